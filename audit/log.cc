#include "audit/log.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_util.h"
#include "common/status_macros.h"

namespace vault::audit {

std::string LogOrigin(absl::string_view vault_name) {
  return absl::StrCat("vault.audit/", vault_name);
}

AuditLog::AuditLog(const storage::Database* db, const capability::PrivateKey* key,
                   AuditLogOptions options, NoteVerifier verifier)
    : db_(db),
      key_(key),
      options_(std::move(options)),
      verifier_(std::move(verifier)),
      origin_(LogOrigin(options_.vault_name)),
      store_(db, options_.vault_name) {
  committer_ = std::make_unique<storage::GroupCommitter<AppendOp>>(
      db, storage::GroupCommitter<AppendOp>::Hooks{
              .prepare = [this](absl::Span<AppendOp* const> ops,
                                rocksdb::WriteBatch* batch) { return Prepare(ops, batch); },
              .finish = [this](absl::Span<AppendOp* const> ops,
                               const absl::Status& written) { Finish(ops, written); }});
}

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const storage::Database* db,
                                                         const capability::PrivateKey* key,
                                                         AuditLogOptions options) {
  VAULT_ASSIGN_OR_RETURN(NoteVerifier verifier,
                         NoteVerifier::FromKey(options.vault_name, key->public_key()));
  std::unique_ptr<AuditLog> log(new AuditLog(db, key, std::move(options), std::move(verifier)));
  VAULT_ASSIGN_OR_RETURN(vault::v1::LogHead head, log->store_.ReadHead());
  Tree tree;
  VAULT_ASSIGN_OR_RETURN(tree.frontier, Frontier::Load(head.size(), log->store_.Reader()));
  if (head.size() > 0) {
    VAULT_ASSIGN_OR_RETURN(tree.last_leaf, HashFromBytes(head.last_leaf_hash()));
  }
  VAULT_ASSIGN_OR_RETURN(std::optional<vault::v1::StoredCheckpoint> cp,
                         log->store_.ReadCheckpoint());
  if (cp.has_value() && cp->size() > head.size()) {
    return absl::DataLossError(absl::StrCat("audit log of ", log->options_.vault_name, " holds ",
                                            head.size(), " entries but its checkpoint signed ",
                                            cp->size()));
  }
  log->pending_ = tree;
  {
    absl::MutexLock lock(&log->mu_);
    log->tree_ = std::move(tree);
    log->checkpoint_ = std::move(cp);
    log->closed_ = false;
  }
  if (log->options_.background_checkpoints) {
    log->checkpointer_ = std::thread([l = log.get()] { l->CheckpointLoop(); });
  }
  return log;
}

AuditLog::~AuditLog() { Close(); }

void AuditLog::Close() {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    stop_ = true;
  }
  if (checkpointer_.joinable()) checkpointer_.join();
  // A final checkpoint, so that a clean shutdown leaves every entry signed. Failure only means
  // the next start signs them.
  (void)IssueCheckpoint();
}

absl::StatusOr<uint64_t> AuditLog::Append(vault::v1::AuditEntry entry) {
  return AppendMany(absl::MakeSpan(&entry, 1));
}

absl::StatusOr<uint64_t> AuditLog::AppendMany(absl::Span<vault::v1::AuditEntry> entries) {
  if (entries.empty()) return absl::InvalidArgumentError("audit: no entries to append");
  AppendOp op{.entries = entries};
  VAULT_RETURN_IF_ERROR(committer_->Commit(&op));
  return op.first_seq;
}

absl::StatusOr<uint64_t> AuditLog::AppendWith(
    vault::v1::AuditEntry entry, const std::function<void(rocksdb::WriteBatch*)>& also) {
  AppendOp op{.entries = absl::MakeSpan(&entry, 1), .also = &also};
  VAULT_RETURN_IF_ERROR(committer_->Commit(&op));
  return op.first_seq;
}

absl::Status AuditLog::Prepare(absl::Span<AppendOp* const> ops, rocksdb::WriteBatch* batch) {
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return absl::FailedPreconditionError("audit log is closed");
  }
  const int64_t now = absl::ToUnixMicros(absl::Now());
  for (AppendOp* op : ops) {
    if (op->also != nullptr && *op->also) (*op->also)(batch);
    op->first_seq = pending_.frontier.size();
    for (vault::v1::AuditEntry& e : op->entries) {
      const uint64_t seq = pending_.frontier.size();
      e.set_sequence(seq);
      e.set_time_unix_micros(now);
      e.set_vault(options_.vault_name);
      e.set_prev_hash(std::string(AsBytes(pending_.last_leaf)));
      // The leaf is these bytes, written once and hashed as stored (never re-serialized).
      std::string bytes = common::SerializeDeterministic(e);
      Hash leaf = LeafHash(bytes);
      store_.AddEntry(batch, seq, leaf, bytes);
      pending_.frontier.Append(leaf,
                               [&](NodeId id, const Hash& h) { store_.AddNode(batch, id, h); });
      pending_.last_leaf = leaf;
    }
  }
  vault::v1::LogHead head;
  head.set_size(pending_.frontier.size());
  head.set_last_leaf_hash(std::string(AsBytes(pending_.last_leaf)));
  store_.SetHead(batch, head);
  return absl::OkStatus();
}

void AuditLog::Finish(absl::Span<AppendOp* const> ops, const absl::Status& written) {
  absl::MutexLock lock(&mu_);
  if (written.ok()) {
    tree_ = pending_;
  } else {
    pending_ = tree_;  // nothing of the group is durable: its sequence numbers are free again
  }
}

uint64_t AuditLog::size() const {
  absl::MutexLock lock(&mu_);
  return tree_.frontier.size();
}

std::optional<vault::v1::StoredCheckpoint> AuditLog::LatestCheckpoint() const {
  absl::MutexLock lock(&mu_);
  return checkpoint_;
}

absl::StatusOr<vault::v1::StoredCheckpoint> AuditLog::IssueCheckpoint() {
  absl::MutexLock issue(&issue_mu_);
  uint64_t size;
  Hash root;
  {
    absl::MutexLock lock(&mu_);
    if (checkpoint_.has_value() && checkpoint_->size() == tree_.frontier.size()) {
      return *checkpoint_;
    }
    size = tree_.frontier.size();
    root = tree_.frontier.Root();
  }
  VAULT_ASSIGN_OR_RETURN(std::string note,
                         SignNote(FormatCheckpoint({.origin = origin_, .size = size, .root = root}),
                                  options_.vault_name, *key_));
  vault::v1::StoredCheckpoint cp;
  cp.set_note(std::move(note));
  cp.set_size(size);
  cp.set_root(std::string(AsBytes(root)));
  cp.set_issued_unix_ms(absl::ToUnixMillis(absl::Now()));
  rocksdb::WriteBatch batch;
  store_.SetCheckpoint(&batch, cp);
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  absl::MutexLock lock(&mu_);
  checkpoint_ = cp;
  return cp;
}

void AuditLog::CheckpointLoop() {
  const uint64_t every = std::max<uint32_t>(1, options_.checkpoint_every_entries);
  for (;;) {
    bool due;
    {
      absl::MutexLock lock(&mu_);
      auto signed_size = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return checkpoint_.has_value() ? checkpoint_->size() : 0;
      };
      auto wake = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || tree_.frontier.size() >= signed_size() + every;
      };
      mu_.AwaitWithTimeout(absl::Condition(&wake), options_.checkpoint_interval);
      if (stop_) return;
      due = tree_.frontier.size() > signed_size() || !checkpoint_.has_value();
    }
    // A failed signature or write is retried on the next round.
    if (due) (void)IssueCheckpoint();
  }
}

vault::v1::AuditEntry MakeEntry(std::string actor, std::string action, std::string subject,
                                vault::v1::AuditEntry::Decision decision, std::string motivation,
                                std::vector<std::pair<std::string, std::string>> details) {
  vault::v1::AuditEntry e;
  e.set_actor(std::move(actor));
  e.set_action(std::move(action));
  e.set_subject(std::move(subject));
  e.set_decision(decision);
  e.set_motivation(std::move(motivation));
  for (auto& [k, v] : details) {
    vault::v1::AuditEntry::Detail* d = e.add_details();
    d->set_key(std::move(k));
    d->set_value(std::move(v));
  }
  return e;
}

}  // namespace vault::audit
