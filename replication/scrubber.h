// replication: the background scrub — re-read and re-hash every stored object at a limited
// rate, and repair a damaged one with a verified copy from a member that stores it.
//
// A thread walks the store's objects in key order (Store::ListKeys), reads each one back
// (Store::Read verifies every stored piece) and hashes the whole object against its digest,
// spending at most ScrubConfig::bytes_per_second (each object counts its size plus 512 bytes).
// Its position — the key of the last object checked — is kept in the "replication" column
// family ("scrub/position"; Follower::ColumnFamilies declares it), written at most once a second
// and when the scrub stops, so after a restart a pass goes on where it was. At the end of a pass
// the position goes back to the start and the thread waits ScrubConfig::interval_ms.
//
// A damaged object (DATA_LOSS from the store, or bytes that do not hash to the digest) is asked
// of the members (ScrubConfig::repair_from, or every member in config order): the first whose
// bytes hash to the digest repairs it (Store::Repair; objects up to 1 GiB, held in memory), and
// the object is read back once more. Each finding is audited, action "cas.scrub", subject the
// digest: ALLOWED when repaired (details: problem, repaired=true, from=<member>), DENIED when not
// (repaired=false and why each member could not help). An object that stays damaged is audited
// once per vaultd run and tried again at every pass.
//
//   VAULT_ASSIGN_OR_RETURN(auto scrubber, Scrubber::Start(deps, config.scrub()));
//   ...
//   scrubber->Stop();
//
// Thread-safety: Start/Stop from one thread; counters() is thread-safe.
#ifndef VAULT_REPLICATION_SCRUBBER_H_
#define VAULT_REPLICATION_SCRUBBER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "audit/log.h"
#include "cas/store.h"
#include "replication/member_channels.h"
#include "storage/database.h"
#include "vault/v1/config.pb.h"

namespace vault::replication {

struct ScrubberDeps {
  storage::Database* db = nullptr;
  cas::Store* store = nullptr;
  audit::AuditLog* log = nullptr;
  std::string self_key;               // ed25519:<hex>, the actor of the audit entries
  MemberChannels* members = nullptr;  // null: findings are reported, never repaired
};

struct ScrubCounters {
  uint64_t passes = 0;  // passes finished
  uint64_t objects = 0;
  uint64_t bytes = 0;
  uint64_t damaged = 0;
  uint64_t repaired = 0;
};

class Scrubber {
 public:
  // Starts the thread. `config` must have passed FinalizeConfig with bytes_per_second > 0.
  static absl::StatusOr<std::unique_ptr<Scrubber>> Start(ScrubberDeps deps,
                                                         const vault::v1::ScrubConfig& config);
  ~Scrubber();
  // Ends the thread (an object being read stops at its next piece) and saves the position.
  // Idempotent.
  void Stop();
  ScrubCounters counters() const;

  // The saved position: the key of the last object checked ("" at the start of a pass).
  static absl::StatusOr<std::string> LoadPosition(storage::Database* db);

 private:
  Scrubber(ScrubberDeps deps, vault::v1::ScrubConfig config);
  void Loop();
  // Checks one object; NOT_FOUND when it is gone. CANCELLED when stopping.
  absl::Status Check(const cas::Digest& d);
  // Reads the object back and hashes it: OK, the store's error, or DATA_LOSS for a mismatch.
  absl::Status Verify(const cas::Digest& d, bool throttle);
  void Repair(const cas::Digest& d, const absl::Status& problem);
  absl::Status SavePosition(const std::string& key);
  // Waits until the rate allows `bytes` more; false when stopping.
  bool Spend(uint64_t bytes);
  // Waits `d` unless stopped first; false when stopping.
  bool Sleep(absl::Duration d);
  bool stopping();

  const ScrubberDeps deps_;
  const vault::v1::ScrubConfig config_;
  std::thread thread_;
  // The scrub thread's own state.
  absl::Time window_start_;
  uint64_t window_bytes_ = 0;
  uint64_t object_spent_ = 0;                  // bytes of the object being checked already paced
  absl::flat_hash_set<cas::Digest> reported_;  // damaged, audited, not repaired

  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  ScrubCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::replication

#endif  // VAULT_REPLICATION_SCRUBBER_H_
