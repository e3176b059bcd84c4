#include "replication/pusher.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "replication/internal/rpc.h"

namespace vault::replication {

using internal::Context;
using internal::FromGrpc;
using internal::FromItem;
using internal::ToProto;

// One push: the caller's thread finds what the peer lacks and queues calls; `streams` workers
// make them.
class Pusher::Run {
 public:
  Run(Pusher* pusher, const ProgressFn& progress)
      : p_(pusher), opt_(pusher->options_), progress_(progress), start_(absl::Now()) {
    retry_.window = opt_.retry_window;
    retry_.stopped = [this] { return p_->stopped_.load(); };
    for (int i = 0; i < std::max(1, opt_.streams); ++i) {
      workers_.emplace_back([this] { Work(); });
    }
  }
  ~Run() { (void)Finish(); }

  void Plan(uint64_t objects, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    stats_.planned_objects = objects;
    stats_.planned_bytes = bytes;
  }
  void SetLastSeq(uint64_t seq) {
    absl::MutexLock lock(&mu_);
    stats_.last_seq = seq;
  }

  // Asks the peer which of `page` (stored here) it lacks and queues their transfer.
  absl::Status Offer(const std::vector<cas::Digest>& page) {
    VAULT_RETURN_IF_ERROR(Failed());
    vault::v1::FindMissingRequest req;
    for (const cas::Digest& d : page) ToProto(d, req.add_digests());
    vault::v1::FindMissingResponse resp;
    VAULT_RETURN_IF_ERROR(Attempt([&] {
      resp.Clear();
      return FromGrpc(p_->stub_->FindMissing(Context(opt_.call_timeout).get(), req, &resp),
                      "FindMissing");
    }));
    absl::flat_hash_set<cas::Digest> missing;
    for (const vault::v1::Digest& m : resp.missing()) {
      absl::StatusOr<cas::Digest> d = internal::FromProto(m);
      if (!d.ok()) return absl::InternalError("FindMissing: the peer answered a malformed digest");
      missing.insert(*std::move(d));
    }
    uint64_t skipped = 0, skipped_bytes = 0;
    for (const cas::Digest& d : page) {
      if (!missing.contains(d)) {
        ++skipped;
        skipped_bytes += d.size();
        continue;
      }
      missing.erase(d);  // a digest listed twice is sent once
      if (d.size() >= opt_.stream_threshold) {
        VAULT_RETURN_IF_ERROR(Queue(Task{.large = d, .is_large = true}));
        continue;
      }
      if (!batch_.empty() &&
          (batch_bytes_ + d.size() > opt_.batch_bytes || batch_.size() >= opt_.batch_items)) {
        VAULT_RETURN_IF_ERROR(FlushBatch());
      }
      batch_.push_back(d);
      batch_bytes_ += d.size();
    }
    absl::MutexLock lock(&mu_);
    stats_.skipped += skipped;
    stats_.skipped_bytes += skipped_bytes;
    Report();
    return absl::OkStatus();
  }

  // Sends what is left, waits for the workers, and returns the totals or the first failure.
  absl::StatusOr<PushStats> Finish() {
    if (!finished_) {
      finished_ = true;
      if (Failed().ok()) (void)FlushBatch();
      {
        absl::MutexLock lock(&mu_);
        closed_ = true;
      }
      for (std::thread& t : workers_) t.join();
    }
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    stats_.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    return stats_;
  }

 private:
  struct Task {
    std::vector<cas::Digest> batch;
    cas::Digest large;
    bool is_large = false;
  };

  absl::Status Failed() {
    if (p_->stopped_.load()) return absl::CancelledError("replication stopped");
    absl::MutexLock lock(&mu_);
    return error_;
  }
  void Fail(const absl::Status& s) {
    absl::MutexLock lock(&mu_);
    if (error_.ok()) error_ = s;
  }
  // Retries transient failures, counting them.
  absl::Status Attempt(const std::function<absl::Status()>& attempt) {
    return internal::Retry(retry_, [&] {
      absl::Status s = attempt();
      if (!s.ok() && internal::Transient(s)) {
        absl::MutexLock lock(&mu_);
        ++stats_.retries;
      }
      return s;
    });
  }
  void Report() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (progress_) progress_(stats_);
  }
  void Refuse(const cas::Digest& d, const absl::Status& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++stats_.refused;
    if (stats_.refusals.size() < opt_.max_refusals_listed) stats_.refusals.push_back({d, s});
  }

  absl::Status FlushBatch() {
    if (batch_.empty()) return absl::OkStatus();
    Task t{.batch = std::move(batch_)};
    batch_.clear();
    batch_bytes_ = 0;
    return Queue(std::move(t));
  }
  absl::Status Queue(Task task) {
    absl::MutexLock lock(&mu_);
    const size_t cap = 2 * workers_.size();
    auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queue_.size() < cap || !error_.ok() || p_->stopped_.load();
    };
    // Wake up now and then to notice Stop, which does not signal the mutex.
    while (!mu_.AwaitWithTimeout(absl::Condition(&room), absl::Milliseconds(100))) {
    }
    if (!error_.ok()) return error_;
    if (p_->stopped_.load()) return absl::CancelledError("replication stopped");
    queue_.push_back(std::move(task));
    return absl::OkStatus();
  }

  void Work() {
    while (true) {
      Task task;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || !queue_.empty(); };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!Failed().ok()) continue;  // drain without working
      absl::Status s = task.is_large ? SendLarge(task.large) : SendBatch(task.batch);
      if (!s.ok()) Fail(s);
    }
  }

  absl::Status SendBatch(const std::vector<cas::Digest>& digests) {
    vault::v1::BatchPutRequest req;
    std::vector<cas::Digest> sent;
    std::vector<std::pair<cas::Digest, absl::Status>> unreadable;
    for (const cas::Digest& d : digests) {
      // Unverified: the peer hashes every item (a mismatch it reports is checked below).
      absl::StatusOr<std::string> data = p_->source_->ReadAll(d, cas::ReadCheck::kUnverified);
      if (!data.ok()) {
        unreadable.emplace_back(d, data.status());
        continue;
      }
      vault::v1::BatchPutRequest::Item* item = req.add_items();
      ToProto(d, item->mutable_digest());
      *item->mutable_data() = *std::move(data);
      sent.push_back(d);
    }
    vault::v1::BatchPutResponse resp;
    if (!sent.empty()) {
      VAULT_RETURN_IF_ERROR(Attempt([&] {
        resp.Clear();
        absl::Status s =
            FromGrpc(p_->stub_->BatchPut(Context(opt_.call_timeout).get(), req, &resp), "BatchPut");
        if (s.ok() && resp.results_size() != req.items_size()) {
          s = absl::InternalError("BatchPut: the peer answered the wrong number of results");
        }
        return s;
      }));
    }
    std::vector<absl::Status> outcomes;
    for (size_t i = 0; i < sent.size(); ++i) {
      absl::Status s = FromItem(resp.results(static_cast<int>(i)).status());
      if (absl::IsInvalidArgument(s)) {
        // The peer's hash of the bytes sent does not match: were they damaged here?
        if (absl::Status mine = p_->source_->ReadAll(sent[i]).status(); absl::IsDataLoss(mine)) {
          s = mine;
        }
      }
      outcomes.push_back(std::move(s));
    }
    absl::MutexLock lock(&mu_);
    for (const auto& [d, s] : unreadable) Refuse(d, s);
    for (size_t i = 0; i < sent.size(); ++i) {
      const vault::v1::PutResult& r = resp.results(static_cast<int>(i));
      stats_.sent_bytes += sent[i].size();
      const absl::Status& s = outcomes[i];
      if (!s.ok()) {
        Refuse(sent[i], s);
      } else if (r.already_present()) {
        ++stats_.skipped;
        stats_.skipped_bytes += sent[i].size();
      } else {
        ++stats_.objects;
        stats_.bytes += sent[i].size();
      }
    }
    Report();
    return absl::OkStatus();
  }

  // One object in a Put stream, resumed at the peer's durable offset, with the chunks the peer
  // has named rather than sent.
  absl::Status SendLarge(const cas::Digest& d) {
    // Unverified: the peer hashes every byte it receives (each chunk, and the whole object
    // against its digest), so checking them here too would hash them twice. A mismatch it
    // reports is then checked against this store's own copy below.
    absl::StatusOr<std::unique_ptr<cas::ObjectReader>> reader =
        p_->source_->OpenReader(d, cas::ReadCheck::kUnverified);
    if (!reader.ok()) {
      absl::MutexLock lock(&mu_);
      Refuse(d, reader.status());
      Report();
      return absl::OkStatus();
    }
    // Read once, to be sent: past the page cache (this thread alone uses the reader).
    (*reader)->BypassCache();
    const auto& chunks = (*reader)->chunks();
    std::vector<uint64_t> starts;
    absl::flat_hash_set<std::string> peer_lacks;
    if (!chunks.empty()) {
      vault::v1::FindMissingChunksRequest req;
      uint64_t at = 0;
      for (const auto& [hash, size] : chunks) {
        starts.push_back(at);
        at += size;
        vault::v1::ChunkDigest* c = req.add_chunks();
        c->set_sha256(hash);
        c->set_size(size);
      }
      vault::v1::FindMissingChunksResponse resp;
      VAULT_RETURN_IF_ERROR(Attempt([&] {
        resp.Clear();
        return FromGrpc(p_->stub_->FindMissingChunks(Context(opt_.call_timeout).get(), req, &resp),
                        "FindMissingChunks");
      }));
      for (const vault::v1::ChunkDigest& c : resp.missing()) peer_lacks.insert(c.sha256());
    }

    bool skip_chunks = !chunks.empty();
    bool from_zero = false;  // after the peer refused to resume where Stat said
    int precondition_failures = 0;
    vault::v1::PutResponse resp;
    uint64_t skipped = 0, skipped_bytes = 0, resumed = 0;
    absl::Status outcome;
    while (true) {
      outcome = Attempt([&]() -> absl::Status {
        skipped = skipped_bytes = resumed = 0;
        vault::v1::StatRequest stat_req;
        ToProto(d, stat_req.mutable_digest());
        vault::v1::StatResponse stat;
        VAULT_RETURN_IF_ERROR(
            FromGrpc(p_->stub_->Stat(Context(opt_.call_timeout).get(), stat_req, &stat), "Stat"));
        if (stat.present()) {
          resp.Clear();
          resp.mutable_result()->set_already_present(true);
          return absl::OkStatus();
        }
        const uint64_t offset = from_zero ? 0 : stat.upload_offset();
        resumed = offset;
        const absl::Duration timeout =
            opt_.call_timeout +
            absl::Seconds(static_cast<double>(d.size()) / static_cast<double>(std::max<uint64_t>(
                                                              1, opt_.min_rate_bytes_per_second)));
        std::unique_ptr<grpc::ClientContext> ctx = Context(timeout);
        resp.Clear();
        std::unique_ptr<grpc::ClientWriter<vault::v1::PutRequest>> writer =
            p_->stub_->Put(ctx.get(), &resp);
        vault::v1::PutRequest msg;
        // The peer cuts its chunks where this vault's end (no boundary search there); the
        // chunks it already has are named whole below.
        auto first_fields = [&] {
          ToProto(d, msg.mutable_digest());
          msg.set_offset(offset);
          msg.set_chunk_hints(!chunks.empty());
        };
        first_fields();
        bool first = true;
        bool broken = false;
        auto send = [&]() {
          if (!first) msg.clear_digest();
          first = false;
          if (!broken && !writer->Write(msg)) broken = true;
          msg.Clear();
          return !broken;
        };
        auto send_bytes = [&](uint64_t from, uint64_t n) -> absl::Status {
          return (*reader)->Read(
              from, n, opt_.piece_bytes, [&](uint64_t at, absl::string_view piece) -> absl::Status {
                if (first) first_fields();
                msg.set_data(piece.data(), piece.size());
                msg.set_chunk_end(!chunks.empty() && at + piece.size() == from + n);
                {
                  absl::MutexLock lock(&mu_);
                  stats_.sent_bytes += piece.size();
                }
                if (!send()) return absl::UnavailableError("stream broke");
                return absl::OkStatus();
              });
        };
        absl::Status local = absl::OkStatus();
        if (chunks.empty()) {
          if (offset < d.size()) local = send_bytes(offset, d.size() - offset);
        } else {
          for (size_t i = 0; i < chunks.size() && local.ok() && !broken; ++i) {
            const uint64_t s = starts[i], z = chunks[i].second;
            if (s + z <= offset) continue;
            if (s < offset) {
              local = send_bytes(offset, s + z - offset);
            } else if (skip_chunks && !peer_lacks.contains(chunks[i].first)) {
              if (first) first_fields();
              msg.set_chunk_end(true);
              msg.mutable_chunk()->set_sha256(chunks[i].first);
              msg.mutable_chunk()->set_size(static_cast<uint32_t>(z));
              send();
              ++skipped;
              skipped_bytes += z;
            } else {
              local = send_bytes(s, z);
            }
          }
        }
        if (first && !broken) send();  // nothing left to send: the first message alone
        if (!broken) writer->WritesDone();
        grpc::Status finished = writer->Finish();
        // A local read failure is this vault's damaged storage, not the peer's refusal.
        if (!local.ok() && !absl::IsUnavailable(local)) return local;
        return FromGrpc(finished, "Put");
      });
      if (absl::IsFailedPrecondition(outcome) && ++precondition_failures <= 1) {
        // The peer would not resume at its offset, or lacks a chunk it was told of: once more,
        // every byte from the start.
        from_zero = true;
        skip_chunks = false;
        continue;
      }
      break;
    }
    if (absl::IsInvalidArgument(outcome)) {
      // The peer's hash of the bytes sent does not match: were they damaged here?
      if (absl::Status mine = (*reader)->Verify(); absl::IsDataLoss(mine)) outcome = mine;
    }
    absl::MutexLock lock(&mu_);
    if (internal::Transient(outcome) || absl::IsCancelled(outcome)) return outcome;
    if (!outcome.ok() && !absl::IsInvalidArgument(outcome) && !absl::IsDataLoss(outcome) &&
        !absl::IsFailedPrecondition(outcome) && !absl::IsOutOfRange(outcome)) {
      return outcome;  // e.g. UNAUTHENTICATED: the push cannot go on
    }
    if (!outcome.ok()) {
      Refuse(d, outcome);
    } else if (resp.result().already_present()) {
      ++stats_.skipped;
      stats_.skipped_bytes += d.size();
    } else {
      ++stats_.objects;
      stats_.bytes += d.size();
      stats_.chunks_skipped += skipped;
      stats_.chunk_bytes_skipped += skipped_bytes;
      stats_.resumed_bytes += resumed;
    }
    Report();
    return absl::OkStatus();
  }

  Pusher* const p_;
  const PushOptions& opt_;
  const ProgressFn& progress_;
  const absl::Time start_;
  internal::RetryPolicy retry_;
  bool finished_ = false;
  // The caller's thread only.
  std::vector<cas::Digest> batch_;
  uint64_t batch_bytes_ = 0;

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  PushStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

Pusher::Pusher(const cas::Store* source, std::shared_ptr<grpc::Channel> peer, PushOptions options)
    : source_(source),
      channel_(std::move(peer)),
      stub_(vault::v1::Cas::NewStub(channel_)),
      options_(options) {}

Pusher::~Pusher() = default;

absl::StatusOr<PushStats> Pusher::PushDigests(absl::Span<const cas::Digest> digests,
                                              const ProgressFn& progress) {
  VAULT_ASSIGN_OR_RETURN(std::vector<cas::Digest> absent, source_->FindMissing(digests));
  if (!absent.empty()) {
    return absl::NotFoundError(
        absl::StrCat("object ", absent.front().ToString(), " is not stored here",
                     absent.size() > 1 ? absl::StrCat(" (nor ", absent.size() - 1, " more)") : ""));
  }
  absl::flat_hash_set<cas::Digest> unique(digests.begin(), digests.end());
  uint64_t bytes = 0;
  for (const cas::Digest& d : unique) bytes += d.size();
  Run run(this, progress);
  run.Plan(unique.size(), bytes);
  std::vector<cas::Digest> page;
  for (const cas::Digest& d : digests) {
    page.push_back(d);
    if (page.size() >= options_.find_missing_batch) {
      VAULT_RETURN_IF_ERROR(run.Offer(page));
      page.clear();
    }
  }
  if (!page.empty()) VAULT_RETURN_IF_ERROR(run.Offer(page));
  return run.Finish();
}

absl::StatusOr<PushStats> Pusher::PushFeed(uint64_t after_seq, const ProgressFn& progress) {
  Run run(this, progress);
  const uint64_t last = source_->last_seq();
  run.Plan(last > after_seq ? last - after_seq : 0, after_seq == 0 ? source_->totals().bytes : 0);
  uint64_t cursor = after_seq;
  run.SetLastSeq(cursor);
  while (cursor < last) {
    VAULT_ASSIGN_OR_RETURN(std::vector<cas::FeedItem> items,
                           source_->ReadFeed(cursor, options_.find_missing_batch));
    if (items.empty()) break;
    std::vector<cas::Digest> page;
    page.reserve(items.size());
    for (cas::FeedItem& item : items) {
      if (item.seq > last) break;
      page.push_back(std::move(item.digest));
      cursor = item.seq;
    }
    VAULT_RETURN_IF_ERROR(run.Offer(page));
    run.SetLastSeq(cursor);
  }
  return run.Finish();
}

}  // namespace vault::replication
