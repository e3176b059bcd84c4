// audit/mirror: this vault's verified copy of one peer's audit log, and fork detection.
//
// Each Sync round fetches the peer's latest signed checkpoint, checks its signature against the
// member's key (from the federation config) and checks it against the checkpoint held before:
// same size → same root; larger → a consistency proof from the held one must verify; smaller →
// its root must match the tree held (or a consistency proof to the held one must verify). A
// checkpoint that fails these is a fork: both signed notes are kept as evidence, the mirror is
// marked FORKED and stops following, and `on_alarm` is told (vaultd writes a high-priority entry
// in its own log). New entries are fetched in pages; each page is stored only after it is proven
// part of the signed tree (root at the checkpoint's size, or a consistency proof from the page's
// end to it), and after every entry is checked: sequence = position, vault = the peer, prev_hash
// = hash of the entry before. A signed log that breaks those rules marks the mirror INVALID.
//
//   Mirror m(db, "vault-b", verifier, on_alarm);
//   VAULT_RETURN_IF_ERROR(m.Load());
//   absl::Status s = m.Sync(peer_client);   // repeatedly, from one thread
//
// Thread-safety: Sync from one thread at a time; status() from any thread.
#ifndef VAULT_AUDIT_MIRROR_H_
#define VAULT_AUDIT_MIRROR_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "audit/log_store.h"
#include "audit/merkle.h"
#include "audit/note.h"
#include "vault/v1/audit.pb.h"

namespace vault::audit {

// The peer's side of mirroring; node/ implements it over gRPC (with deadlines).
class PeerLog {
 public:
  virtual ~PeerLog() = default;
  // The peer's latest signed checkpoint note.
  virtual absl::StatusOr<std::string> Checkpoint() = 0;
  // Entries [from, to) of the peer's log: at least one, possibly fewer than asked (a page).
  virtual absl::StatusOr<std::vector<std::string>> Entries(uint64_t from, uint64_t to) = 0;
  // The RFC 9162 consistency proof between two sizes of the peer's log.
  virtual absl::StatusOr<std::vector<Hash>> Consistency(uint64_t size1, uint64_t size2) = 0;
};

class Mirror {
 public:
  using Alarm = std::function<void(const vault::v1::MirrorStatus& status)>;

  Mirror(const storage::Database* db, std::string peer, NoteVerifier verifier, Alarm on_alarm);
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  // Reads the persisted state. Call once before Sync.
  absl::Status Load();

  // One round (see the top comment); fetches at most `max_entries` entries. OK when the mirror is
  // in step or advanced; the peer's errors (UNAVAILABLE, DEADLINE_EXCEEDED, ...) or
  // FAILED_PRECONDITION once the mirror is FORKED or INVALID. Every outcome is in status().
  absl::Status Sync(PeerLog& peer, uint64_t max_entries = 1'000'000);

  vault::v1::MirrorStatus status() const;
  const LogStore& store() const { return store_; }
  const NoteVerifier& verifier() const { return verifier_; }
  const std::string& peer() const { return peer_; }

  // Entries fetched per page and proven before they are stored.
  static constexpr uint64_t kPageEntries = 4096;

 private:
  absl::Status SyncLocked(PeerLog& peer, uint64_t max_entries);
  absl::Status Fork(const std::string& held_note, const std::string& new_note,
                    const std::string& reason);
  absl::Status Invalid(uint64_t seq, const std::string& note, const std::string& reason);
  absl::Status SaveStatus(vault::v1::MirrorStatus status);
  void RecordError(const absl::Status& error);

  const storage::Database* const db_;
  const std::string peer_;
  const NoteVerifier verifier_;
  const Alarm on_alarm_;
  const LogStore store_;

  // State owned by the syncing thread.
  std::optional<vault::v1::StoredCheckpoint> held_;
  uint64_t size_ = 0;
  Frontier frontier_;
  Hash last_leaf_{};

  mutable absl::Mutex mu_;
  vault::v1::MirrorStatus status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::audit

#endif  // VAULT_AUDIT_MIRROR_H_
