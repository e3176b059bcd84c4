// audit/log: the vault's own tamper-evident audit log (design §4).
//
// Every entry is appended durably: Append returns once the entry is in RocksDB's synced WAL,
// together with the tree nodes it completes and the new head, in one write. Appends from many
// threads share one write (group commit); sequence numbers are assigned in commit order with no
// gaps, are persisted with the entries, and are never reused. A background thread signs a
// checkpoint (C2SP signed note) once `checkpoint_every_entries` entries have been appended since
// the last one, or `checkpoint_interval` after a change; IssueCheckpoint signs one on demand.
//
//   VAULT_ASSIGN_OR_RETURN(auto log, AuditLog::Open(db, &vault_key, {.vault_name = "vault-a"}));
//   vault::v1::AuditEntry e;
//   e.set_actor("local-admin"); e.set_action("cas.put"); e.set_subject(digest);
//   e.set_decision(vault::v1::AuditEntry::ALLOWED);
//   VAULT_ASSIGN_OR_RETURN(uint64_t seq, log->Append(std::move(e)));
//
// Append fills sequence, time_unix_micros, vault and prev_hash; the caller fills the rest.
//
// Thread-safety: all methods are thread-safe. Close (or the destructor) must not race with
// other calls.
#ifndef VAULT_AUDIT_LOG_H_
#define VAULT_AUDIT_LOG_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "audit/log_store.h"
#include "audit/merkle.h"
#include "audit/note.h"
#include "capability/principal.h"
#include "storage/database.h"
#include "storage/group_commit.h"
#include "vault/v1/audit.pb.h"

namespace vault::audit {

struct AuditLogOptions {
  std::string vault_name;
  uint32_t checkpoint_every_entries = 1000;
  absl::Duration checkpoint_interval = absl::Seconds(1);
  // No background checkpoints (tests, benchmarks); IssueCheckpoint still works.
  bool background_checkpoints = true;
};

// The checkpoint origin of vault `name`'s log.
std::string LogOrigin(absl::string_view vault_name);

// An entry to append (the log fills sequence, time, vault and prev_hash).
vault::v1::AuditEntry MakeEntry(std::string actor, std::string action, std::string subject,
                                vault::v1::AuditEntry::Decision decision,
                                std::string motivation = "",
                                std::vector<std::pair<std::string, std::string>> details = {});

class AuditLog {
 public:
  // `key` signs checkpoints; it must outlive the log.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const storage::Database* db,
                                                        const capability::PrivateKey* key,
                                                        AuditLogOptions options);
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;
  ~AuditLog();

  // Appends one entry; returns its sequence number once durable.
  absl::StatusOr<uint64_t> Append(vault::v1::AuditEntry entry);
  // Appends entries as consecutive sequence numbers in one durable write; returns the first.
  absl::StatusOr<uint64_t> AppendMany(absl::Span<vault::v1::AuditEntry> entries);
  // Appends one entry in the same durable RocksDB write as whatever `also` adds to the batch
  // (another component's records): both are durable, or neither.
  absl::StatusOr<uint64_t> AppendWith(vault::v1::AuditEntry entry,
                                      const std::function<void(rocksdb::WriteBatch*)>& also);

  // Entries durably appended so far.
  uint64_t size() const;
  // The latest checkpoint, or nullopt before the first one.
  std::optional<vault::v1::StoredCheckpoint> LatestCheckpoint() const;
  // Signs and stores a checkpoint of the current log unless the latest one already covers it;
  // returns the latest checkpoint.
  absl::StatusOr<vault::v1::StoredCheckpoint> IssueCheckpoint();

  const LogStore& store() const { return store_; }
  const NoteVerifier& verifier() const { return verifier_; }
  const std::string& origin() const { return origin_; }
  const std::string& vault_name() const { return options_.vault_name; }

  // Stops the checkpoint thread after signing a final checkpoint of whatever was appended.
  // Appends after Close fail with FAILED_PRECONDITION. Idempotent.
  void Close();

 private:
  struct AppendOp {
    absl::Span<vault::v1::AuditEntry> entries;
    const std::function<void(rocksdb::WriteBatch*)>* also = nullptr;
    uint64_t first_seq = 0;
  };
  struct Tree {
    Frontier frontier;
    Hash last_leaf{};
  };

  AuditLog(const storage::Database* db, const capability::PrivateKey* key, AuditLogOptions options,
           NoteVerifier verifier);
  absl::Status Prepare(absl::Span<AppendOp* const> ops, rocksdb::WriteBatch* batch);
  void Finish(absl::Span<AppendOp* const> ops, const absl::Status& written);
  void CheckpointLoop();

  const storage::Database* const db_;
  const capability::PrivateKey* const key_;
  const AuditLogOptions options_;
  const NoteVerifier verifier_;
  const std::string origin_;
  const LogStore store_;
  std::unique_ptr<storage::GroupCommitter<AppendOp>> committer_;

  // Only the group-commit leader touches `pending_` (Prepare and Finish run serially).
  Tree pending_;

  mutable absl::Mutex mu_;
  Tree tree_ ABSL_GUARDED_BY(mu_);  // what is durable
  // True until Open succeeds, so that a log that failed to open writes nothing when destroyed.
  bool closed_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<vault::v1::StoredCheckpoint> checkpoint_ ABSL_GUARDED_BY(mu_);

  absl::Mutex issue_mu_;  // one checkpoint signed at a time
  std::thread checkpointer_;
};

}  // namespace vault::audit

#endif  // VAULT_AUDIT_LOG_H_
