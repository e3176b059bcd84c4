// replication: follow — keep copies of the objects a peer stores.
//
// For each FollowConfig, a thread reads the peer's change feed (Feed) from a cursor kept in this
// vault's database, asks the store which of the selected objects it lacks, fetches them (small
// ones with BatchGet, large ones with Get streams, chunks already stored here taken from here),
// verifies and stores them, and only then advances the cursor (a durable write). An object whose
// bytes do not hash to its digest is refused, audited with the peer's name, and fetched again at
// the next round; the cursor stays before it. The peer's restarts are retried; this vault's
// restarts resume at the cursor.
//
// Audit: "replication.follow" when a follower starts, one entry per round that stored objects
// (their count, bytes and feed range), and one DENIED entry per refused object.
//
//   VAULT_ASSIGN_OR_RETURN(auto follower, Follower::Start(deps, config.follow()));
//   ...
//   follower->Stop();
//
// Thread-safety: Start/Stop from one thread; Statuses() is thread-safe.
#ifndef VAULT_REPLICATION_FOLLOWER_H_
#define VAULT_REPLICATION_FOLLOWER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "audit/log.h"
#include "cas/store.h"
#include "replication/member_channels.h"
#include "storage/database.h"
#include "vault/v1/config.pb.h"

namespace vault::replication {

// Where a follower stands (for metrics): its cursor and the peer's newest feed number as last
// seen, so the peer's entries not yet passed are peer_last_seq - cursor.
struct FollowStatus {
  std::string peer;
  uint64_t cursor = 0;         // the persisted cursor (0 before the first round)
  uint64_t peer_last_seq = 0;  // the peer's newest seq in its last Feed answer (0: none yet)
};

struct FollowerDeps {
  storage::Database* db = nullptr;
  cas::Store* store = nullptr;
  audit::AuditLog* log = nullptr;
  std::string self_key;  // ed25519:<hex>, the actor of the audit entries
  MemberChannels* members = nullptr;
};

class Follower {
 public:
  // The column family holding the cursors.
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  static absl::StatusOr<std::unique_ptr<Follower>> Start(
      FollowerDeps deps, const std::vector<vault::v1::FollowConfig>& follows);
  ~Follower();
  // Ends every follower thread (a round in progress stops at its next step). Idempotent.
  void Stop();

  // The persisted cursor for `peer` (0 before the first round).
  static absl::StatusOr<uint64_t> LoadCursor(storage::Database* db, const std::string& peer);

  // One per followed peer, in config order.
  std::vector<FollowStatus> Statuses() const;

 private:
  class Peer;
  Follower() = default;
  std::vector<std::unique_ptr<Peer>> peers_;
};

}  // namespace vault::replication

#endif  // VAULT_REPLICATION_FOLLOWER_H_
