#include "audit/mirror.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "audit/log.h"
#include "common/status_macros.h"

namespace vault::audit {
namespace {

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

}  // namespace

Mirror::Mirror(const storage::Database* db, std::string peer, NoteVerifier verifier, Alarm on_alarm)
    : db_(db),
      peer_(std::move(peer)),
      verifier_(std::move(verifier)),
      on_alarm_(std::move(on_alarm)),
      store_(db, peer_) {
  absl::MutexLock lock(&mu_);
  status_.set_peer(peer_);
  status_.set_state(vault::v1::MirrorStatus::FOLLOWING);
}

absl::Status Mirror::Load() {
  VAULT_ASSIGN_OR_RETURN(vault::v1::LogHead head, store_.ReadHead());
  VAULT_ASSIGN_OR_RETURN(frontier_, Frontier::Load(head.size(), store_.Reader()));
  size_ = head.size();
  if (size_ > 0) {
    VAULT_ASSIGN_OR_RETURN(last_leaf_, HashFromBytes(head.last_leaf_hash()));
  }
  VAULT_ASSIGN_OR_RETURN(held_, store_.ReadCheckpoint());
  VAULT_ASSIGN_OR_RETURN(std::optional<vault::v1::MirrorStatus> saved, store_.ReadMirrorStatus());
  absl::MutexLock lock(&mu_);
  if (saved.has_value()) status_ = *std::move(saved);
  status_.set_peer(peer_);
  status_.set_entries(size_);
  if (held_.has_value()) {
    status_.set_checkpoint_size(held_->size());
    status_.set_checkpoint_note(held_->note());
  }
  return absl::OkStatus();
}

vault::v1::MirrorStatus Mirror::status() const {
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Status Mirror::SaveStatus(vault::v1::MirrorStatus status) {
  rocksdb::WriteBatch batch;
  store_.SetMirrorStatus(&batch, status);
  absl::Status written = db_->Write(&batch);
  absl::MutexLock lock(&mu_);
  status_ = std::move(status);
  return written;
}

void Mirror::RecordError(const absl::Status& error) {
  absl::MutexLock lock(&mu_);
  if (status_.state() == vault::v1::MirrorStatus::FORKED ||
      status_.state() == vault::v1::MirrorStatus::INVALID) {
    return;
  }
  status_.set_state(vault::v1::MirrorStatus::UNREACHABLE);
  status_.set_last_error(std::string(error.message()));
  status_.set_entries(size_);  // pages stored before the failure are held
}

absl::Status Mirror::Fork(const std::string& held_note, const std::string& new_note,
                          const std::string& reason) {
  vault::v1::MirrorStatus s = status();
  s.set_state(vault::v1::MirrorStatus::FORKED);
  s.clear_evidence();
  s.add_evidence(held_note);
  s.add_evidence(new_note);
  s.set_detected_unix_ms(NowMs());
  s.set_last_error(absl::StrCat("fork: ", reason));
  VAULT_RETURN_IF_ERROR(SaveStatus(s));
  if (on_alarm_) on_alarm_(s);
  return absl::FailedPreconditionError(
      absl::StrCat("vault ", peer_, " forked its audit log: ", reason));
}

absl::Status Mirror::Invalid(uint64_t seq, const std::string& note, const std::string& reason) {
  vault::v1::MirrorStatus s = status();
  s.set_state(vault::v1::MirrorStatus::INVALID);
  s.clear_evidence();
  s.add_evidence(note);
  s.set_first_bad_sequence(seq);
  s.set_detected_unix_ms(NowMs());
  s.set_last_error(reason);
  VAULT_RETURN_IF_ERROR(SaveStatus(s));
  if (on_alarm_) on_alarm_(s);
  return absl::FailedPreconditionError(
      absl::StrCat("vault ", peer_, " signed an invalid audit log: ", reason));
}

absl::Status Mirror::Sync(PeerLog& peer, uint64_t max_entries) {
  vault::v1::MirrorStatus::State state = status().state();
  if (state == vault::v1::MirrorStatus::FORKED || state == vault::v1::MirrorStatus::INVALID) {
    return absl::FailedPreconditionError(absl::StrCat("the mirror of ", peer_, " is ",
                                                      vault::v1::MirrorStatus::State_Name(state),
                                                      "; it is no longer followed"));
  }
  absl::Status s = SyncLocked(peer, max_entries);
  if (!s.ok() && s.code() != absl::StatusCode::kFailedPrecondition) RecordError(s);
  return s;
}

absl::Status Mirror::SyncLocked(PeerLog& peer, uint64_t max_entries) {
  VAULT_ASSIGN_OR_RETURN(std::string note, peer.Checkpoint());
  absl::StatusOr<std::string> body = OpenNote(note, verifier_);
  if (!body.ok()) {
    return absl::Status(body.status().code(),
                        absl::StrCat("checkpoint from ", peer_, ": ", body.status().message()));
  }
  absl::StatusOr<Checkpoint> cp = ParseCheckpoint(*body);
  if (!cp.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint from ", peer_, ": ", cp.status().message()));
  }
  if (cp->origin != LogOrigin(peer_)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint from ", peer_, " has origin \"",
                                                   cp->origin, "\", expected \"", LogOrigin(peer_),
                                                   "\""));
  }

  // Is the new checkpoint consistent with the one held?
  bool newer = !held_.has_value();
  if (held_.has_value()) {
    const uint64_t held_size = held_->size();
    VAULT_ASSIGN_OR_RETURN(Hash held_root, HashFromBytes(held_->root()));
    if (cp->size == held_size) {
      if (cp->root != held_root) {
        return Fork(held_->note(), note,
                    absl::StrCat("two checkpoints of size ", held_size, " with different roots"));
      }
    } else if (cp->size > held_size) {
      if (held_size > 0) {
        VAULT_ASSIGN_OR_RETURN(std::vector<Hash> proof, peer.Consistency(held_size, cp->size));
        if (!VerifyConsistency(held_size, cp->size, proof, held_root, cp->root).ok()) {
          return Fork(
              held_->note(), note,
              absl::StrCat("no valid consistency proof from size ", held_size, " to ", cp->size));
        }
      }
      newer = true;
    } else {
      // An older (smaller) checkpoint than the one held: it must describe a prefix of it.
      bool consistent;
      if (cp->size <= size_) {
        VAULT_ASSIGN_OR_RETURN(Hash root, RootAt(cp->size, store_.Reader()));
        consistent = root == cp->root;
      } else {
        VAULT_ASSIGN_OR_RETURN(std::vector<Hash> proof, peer.Consistency(cp->size, held_size));
        consistent = VerifyConsistency(cp->size, held_size, proof, cp->root, held_root).ok();
      }
      if (!consistent) {
        return Fork(
            held_->note(), note,
            absl::StrCat("a checkpoint of size ", cp->size,
                         " that is not a prefix of the held checkpoint of size ", held_size));
      }
    }
  }
  if (newer) {
    vault::v1::StoredCheckpoint stored;
    stored.set_note(note);
    stored.set_size(cp->size);
    stored.set_root(std::string(AsBytes(cp->root)));
    stored.set_issued_unix_ms(NowMs());
    rocksdb::WriteBatch batch;
    store_.SetCheckpoint(&batch, stored);
    VAULT_RETURN_IF_ERROR(db_->Write(&batch));
    held_ = std::move(stored);
  }

  // Catch up to the held checkpoint, page by page, each page proven before it is stored.
  const uint64_t target = held_->size();
  VAULT_ASSIGN_OR_RETURN(const Hash target_root, HashFromBytes(held_->root()));
  uint64_t fetched = 0;
  vault::v1::AuditEntry entry;
  while (size_ < target && fetched < max_entries) {
    const uint64_t want = std::min({target, size_ + kPageEntries, size_ + (max_entries - fetched)});
    VAULT_ASSIGN_OR_RETURN(std::vector<std::string> page, peer.Entries(size_, want));
    if (page.empty() || page.size() > want - size_) {
      return absl::DataLossError(absl::StrCat(peer_, " answered ", page.size(),
                                              " entries when asked for ", size_, "..", want));
    }
    Frontier grown = frontier_;
    rocksdb::WriteBatch batch;
    std::vector<Hash> leaves;
    leaves.reserve(page.size());
    for (size_t i = 0; i < page.size(); ++i) {
      Hash leaf = LeafHash(page[i]);
      leaves.push_back(leaf);
      store_.AddEntry(&batch, size_ + i, leaf, page[i]);
      grown.Append(leaf, [&](NodeId id, const Hash& h) { store_.AddNode(&batch, id, h); });
    }
    const uint64_t end = grown.size();
    if (end == target) {
      if (grown.Root() != target_root) {
        return absl::DataLossError(absl::StrCat(
            peer_, " served entries that do not hash to its signed checkpoint of size ", target));
      }
    } else {
      VAULT_ASSIGN_OR_RETURN(std::vector<Hash> proof, peer.Consistency(end, target));
      if (!VerifyConsistency(end, target, proof, grown.Root(), target_root).ok()) {
        return absl::DataLossError(absl::StrCat(peer_, " served entries ", size_, "..", end - 1,
                                                " that are not in its signed log"));
      }
    }
    // The page is what the peer signed. Now the rules every entry must follow.
    Hash prev = last_leaf_;
    for (size_t i = 0; i < page.size(); ++i) {
      const uint64_t seq = size_ + i;
      std::string why;
      if (!entry.ParseFromString(page[i])) {
        why = "does not parse";
      } else if (entry.sequence() != seq) {
        why = absl::StrCat("holds sequence number ", entry.sequence());
      } else if (entry.vault() != peer_) {
        why = absl::StrCat("names vault \"", entry.vault(), "\"");
      } else if (entry.prev_hash() != AsBytes(prev)) {
        why = "breaks the hash chain";
      }
      if (!why.empty()) {
        return Invalid(seq, held_->note(), absl::StrCat("entry ", seq, " ", why));
      }
      prev = leaves[i];
    }
    vault::v1::LogHead head;
    head.set_size(end);
    head.set_last_leaf_hash(std::string(AsBytes(prev)));
    store_.SetHead(&batch, head);
    VAULT_RETURN_IF_ERROR(db_->Write(&batch));
    frontier_ = std::move(grown);
    size_ = end;
    last_leaf_ = prev;
    fetched += page.size();
  }

  vault::v1::MirrorStatus s = status();
  s.set_state(vault::v1::MirrorStatus::FOLLOWING);
  s.set_entries(size_);
  s.set_checkpoint_size(held_->size());
  s.set_checkpoint_note(held_->note());
  s.set_last_error("");
  s.set_last_success_unix_ms(NowMs());
  return SaveStatus(std::move(s));
}

}  // namespace vault::audit
