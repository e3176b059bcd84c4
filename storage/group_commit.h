// GroupCommitter: many threads' writes become one durable RocksDB write (group commit).
//
// Each caller hands an operation to Commit(); one caller at a time becomes the leader, takes
// every operation queued behind it, lets the owner turn the whole group into one WriteBatch
// (`prepare`, run by exactly one thread at a time, in queue order), writes it once, and wakes
// the others. This is how LevelDB's DBImpl::Write batches writers. Because `prepare` runs
// serially, it may assign sequence numbers and check for duplicates without its own lock.
//
//   GroupCommitter<PutOp> committer(db, {
//       .prepare = [&](absl::Span<PutOp* const> ops, rocksdb::WriteBatch* batch) { ... },
//       .finish = [&](absl::Span<PutOp* const> ops, const absl::Status& written) { ... }});
//   absl::Status s = committer.Commit(&op);  // returns when op's group is durable (or failed)
//
// Thread-safety: Commit may be called from any number of threads.
#ifndef VAULT_STORAGE_GROUP_COMMIT_H_
#define VAULT_STORAGE_GROUP_COMMIT_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "rocksdb/write_batch.h"
#include "storage/database.h"

namespace vault::storage {

template <typename Op>
class GroupCommitter {
 public:
  struct Hooks {
    // Adds the group's records to `batch`. A non-OK status fails the whole group unwritten.
    std::function<absl::Status(absl::Span<Op* const> ops, rocksdb::WriteBatch* batch)> prepare;
    // Runs on the leader after the write, with its outcome (also when prepare failed), before
    // any caller of the group returns. Still serial with `prepare`.
    std::function<void(absl::Span<Op* const> ops, const absl::Status& written)> finish;
  };

  GroupCommitter(const Database* db, Hooks hooks, size_t max_group = 4096)
      : db_(db), hooks_(std::move(hooks)), max_group_(max_group) {}
  GroupCommitter(const GroupCommitter&) = delete;
  GroupCommitter& operator=(const GroupCommitter&) = delete;

  // Commits `op` as part of some group; returns that group's status.
  absl::Status Commit(Op* op) { return CommitMany(absl::MakeSpan(&op, 1)); }

  // Commits several operations of one caller; they land in the same group.
  absl::Status CommitMany(absl::Span<Op* const> ops) {
    Writer w;
    w.ops = ops;
    absl::MutexLock lock(&mu_);
    queue_.push_back(&w);
    auto my_turn = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return w.done || queue_.front() == &w;
    };
    mu_.Await(absl::Condition(&my_turn));
    if (w.done) return w.status;

    // Leader: take every queued writer, up to max_group_ operations.
    std::vector<Writer*> group;
    std::vector<Op*> all;
    for (Writer* q : queue_) {
      if (!group.empty() && all.size() + q->ops.size() > max_group_) break;
      group.push_back(q);
      all.insert(all.end(), q->ops.begin(), q->ops.end());
    }
    mu_.Unlock();
    // Reserved for the usual records of an operation (keys, small values, refs into pack
    // files), so that building a large group does not copy the batch again and again.
    rocksdb::WriteBatch batch(all.size() * kReservedBytesPerOp);
    absl::Status status = hooks_.prepare(all, &batch);
    if (status.ok() && batch.Count() > 0) status = db_->Write(&batch);
    if (hooks_.finish) hooks_.finish(all, status);
    mu_.Lock();
    for (Writer* q : group) {
      queue_.pop_front();
      q->status = status;
      q->done = true;
    }
    return w.status;
  }

 private:
  struct Writer {
    absl::Span<Op* const> ops;
    bool done = false;
    absl::Status status;
  };

  static constexpr size_t kReservedBytesPerOp = 256;

  const Database* const db_;
  const Hooks hooks_;
  const size_t max_group_;

  absl::Mutex mu_;
  std::deque<Writer*> queue_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::storage

#endif  // VAULT_STORAGE_GROUP_COMMIT_H_
