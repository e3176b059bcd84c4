#include "node/admin_service.h"

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "node/grpc_status.h"
#include "replication/pusher.h"
#include "replication/reconciler.h"

namespace vault::node {
namespace {

using vault::v1::ReplicationProgress;

constexpr size_t kMaxRefusalEntries = 16;  // DENIED entries per call; the rest share one

using ProgressSink = std::function<void(const ReplicationProgress&)>;
// A long job: runs on a thread of its own, reports progress, ends with a final progress and a
// status. `stop` asks it to end soon.
struct Job {
  std::function<absl::Status(const ProgressSink& progress, ReplicationProgress* final)> run;
  std::function<void()> stop;
};

// Streams a job's progress: at most one write in flight, the newest progress replacing any not
// yet written, then the final message and the job's status. The call ends only after the job's
// thread has, so the job never outlives the server (Shutdown waits for calls to end).
class JobReactor final : public grpc::ServerWriteReactor<ReplicationProgress> {
 public:
  explicit JobReactor(Job job) : job_(std::move(job)) {
    std::thread([this] { RunJob(); }).detach();
  }

  void OnWriteDone(bool ok) override {
    Action next;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) client_gone_ = true;
      next = NextLocked();
    }
    if (!ok) job_.stop();
    Perform(next);
  }
  void OnCancel() override {
    {
      absl::MutexLock lock(&mu_);
      client_gone_ = true;
    }
    job_.stop();
  }
  void OnDone() override { delete this; }

 private:
  enum class Action { kNone, kWrite, kFinish };

  void RunJob() {
    ReplicationProgress final;
    absl::Status s = job_.run(
        [this](const ReplicationProgress& p) {
          Action next;
          {
            absl::MutexLock lock(&mu_);
            latest_ = p;
            pending_ = true;
            next = NextLocked();
          }
          Perform(next);
        },
        &final);
    final.set_done(true);
    Action next;
    {
      absl::MutexLock lock(&mu_);
      latest_ = std::move(final);
      pending_ = true;
      status_ = ToGrpc(s);
      job_done_ = true;
      next = NextLocked();
    }
    Perform(next);  // the thread's last touch of `this`
  }

  Action NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return Action::kNone;
    if (client_gone_) {
      if (!job_done_) return Action::kNone;
      finishing_ = true;
      return Action::kFinish;
    }
    if (pending_) {
      out_ = latest_;
      pending_ = false;
      writing_ = true;
      if (job_done_) final_written_ = true;
      return Action::kWrite;
    }
    if (job_done_ && final_written_) {
      finishing_ = true;
      return Action::kFinish;
    }
    return Action::kNone;
  }
  void Perform(Action a) {
    if (a == Action::kWrite) StartWrite(&out_);
    if (a == Action::kFinish) Finish(FinalStatus());
  }
  grpc::Status FinalStatus() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

  Job job_;
  absl::Mutex mu_;
  ReplicationProgress latest_ ABSL_GUARDED_BY(mu_);
  ReplicationProgress out_;  // the message being written
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool final_written_ ABSL_GUARDED_BY(mu_) = false;
  bool job_done_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

class FailedReactor final : public grpc::ServerWriteReactor<ReplicationProgress> {
 public:
  explicit FailedReactor(const absl::Status& s) { Finish(ToGrpc(s)); }
  void OnDone() override { delete this; }
};

ReplicationProgress ToProgress(const replication::PushStats& s) {
  ReplicationProgress p;
  p.set_planned_objects(s.planned_objects);
  p.set_planned_bytes(s.planned_bytes);
  p.set_objects(s.objects);
  p.set_bytes(s.bytes);
  p.set_skipped(s.skipped);
  p.set_skipped_bytes(s.skipped_bytes);
  p.set_refused(s.refused);
  p.set_chunks_skipped(s.chunks_skipped);
  p.set_chunk_bytes_skipped(s.chunk_bytes_skipped);
  p.set_resumed_bytes(s.resumed_bytes);
  p.set_sent_bytes(s.sent_bytes);
  p.set_retries(s.retries);
  p.set_last_seq(s.last_seq);
  p.set_seconds(s.seconds);
  for (const replication::Refusal& r : s.refusals) {
    vault::v1::Refusal* out = p.add_refusals();
    ToProto(r.digest, out->mutable_digest());
    SetItemStatus(r.status, out->mutable_status());
  }
  return p;
}

std::vector<std::pair<std::string, std::string>> Totals(const ReplicationProgress& p) {
  return {{"objects", absl::StrCat(p.objects())},
          {"bytes", absl::StrCat(p.bytes())},
          {"skipped", absl::StrCat(p.skipped())},
          {"refused", absl::StrCat(p.refused())},
          {"pulled_objects", absl::StrCat(p.pulled_objects())},
          {"sent_bytes", absl::StrCat(p.sent_bytes())},
          {"seconds", absl::StrFormat("%.3f", p.seconds())}};
}

// The entries of a job's end: how it ended, and each object refused.
absl::Status AuditEnd(Auditor* auditor, const std::string& actor, const std::string& action,
                      const std::string& peer, const absl::Status& outcome,
                      const ReplicationProgress& p,
                      std::vector<std::pair<std::string, std::string>> extra = {}) {
  std::vector<vault::v1::AuditEntry> entries;
  std::vector<std::pair<std::string, std::string>> details = Totals(p);
  for (auto& kv : extra) details.push_back(std::move(kv));
  details.emplace_back("stage", "finished");
  if (!outcome.ok()) details.emplace_back("code", absl::StatusCodeToString(outcome.code()));
  entries.push_back(
      Auditor::Entry(actor, action, peer,
                     outcome.ok() ? vault::v1::AuditEntry::ALLOWED : vault::v1::AuditEntry::DENIED,
                     outcome.ok() ? "" : std::string(outcome.message()), std::move(details)));
  for (const vault::v1::Refusal& r : p.refusals()) {
    if (entries.size() > kMaxRefusalEntries) break;
    absl::StatusOr<cas::Digest> d = FromProto(r.digest());
    entries.push_back(Auditor::Entry(
        actor, action, d.ok() ? d->ToString() : "malformed digest", vault::v1::AuditEntry::DENIED,
        r.status().message(),
        {{"peer", peer},
         {"stage", "refused"},
         {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(r.status().code()))}}));
  }
  if (p.refused() > static_cast<uint64_t>(entries.size() - 1)) {
    entries.push_back(Auditor::Entry(
        actor, action, absl::StrCat(p.refused() - (entries.size() - 1), " more objects"),
        vault::v1::AuditEntry::DENIED, "refused in the same call (see the entries before)",
        {{"peer", peer}, {"stage", "refused"}}));
  }
  return auditor->RecordMany(std::move(entries));
}

constexpr int kMaxDigestsListed = 10000;  // per side, in a Reconcile's progress

ReplicationProgress ToProgress(const replication::ReconcileStats& s) {
  ReplicationProgress p = ToProgress(s.pushed);
  p.set_planned_objects(s.missing_here.size() + s.missing_there.size());
  p.set_planned_bytes(s.missing_here_bytes + s.missing_there_bytes);
  p.set_pulled_objects(s.pulled_objects);
  p.set_pulled_bytes(s.pulled_bytes);
  p.set_refused(s.pushed.refused + s.pull_refused);
  for (const replication::Refusal& r : s.pull_refusals) {
    vault::v1::Refusal* out = p.add_refusals();
    ToProto(r.digest, out->mutable_digest());
    SetItemStatus(r.status, out->mutable_status());
  }
  p.set_ranges_compared(s.ranges_compared);
  p.set_ranges_listed(s.ranges_listed);
  p.set_round_trips(s.round_trips);
  p.set_compare_wire_bytes(s.wire_bytes);
  p.set_compare_seconds(s.compare_seconds);
  p.set_missing_here(s.missing_here.size());
  p.set_missing_here_bytes(s.missing_here_bytes);
  p.set_missing_there(s.missing_there.size());
  p.set_missing_there_bytes(s.missing_there_bytes);
  p.set_seconds(s.seconds);
  return p;
}

// The digests that differ, listed once (they do not change after the comparison).
void ListDifferences(const replication::ReconcileStats& s, ReplicationProgress* p) {
  p->set_compared(true);
  for (size_t i = 0; i < s.missing_here.size() && i < kMaxDigestsListed; ++i) {
    ToProto(s.missing_here[i], p->add_missing_here_digests());
  }
  for (size_t i = 0; i < s.missing_there.size() && i < kMaxDigestsListed; ++i) {
    ToProto(s.missing_there[i], p->add_missing_there_digests());
  }
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::Status(grpc::CallbackServerContext* ctx,
                                               const vault::v1::StatusRequest*,
                                               vault::v1::StatusResponse* resp) {
  resp->set_name(config_.name());
  resp->set_public_key(public_key_);
  resp->set_version(kVersion);
  resp->set_listen_address(listen_);
  resp->set_admin_socket(config_.admin_socket());
  resp->set_data_dir(config_.data_dir());
  resp->set_started_unix_ms(started_unix_ms_);
  cas::StoreTotals totals = store_->totals();
  resp->set_object_count(totals.objects);
  resp->set_stored_bytes(totals.bytes);
  resp->set_last_seq(store_->last_seq());
  resp->set_sandbox_fences(sandbox_.fences);
  resp->set_agents_enabled(sandbox_.agents_enabled);
  resp->set_agents_disabled_reason(sandbox_.disabled_reason);
  for (const vault::v1::Member& m : config_.members()) {
    auto* out = resp->add_members();
    out->set_name(m.name());
    out->set_address(m.address());
    out->set_public_key(m.public_key());
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<ReplicationProgress>* AdminService::Replicate(
    grpc::CallbackServerContext* ctx, const vault::v1::ReplicateRequest* req) {
  const int selectors = (req->digests_size() > 0) + req->all() + (req->since_seq() > 0);
  if (selectors != 1) {
    return new FailedReactor(absl::InvalidArgumentError(
        "Replicate: name the objects with exactly one of digests, all or since_seq"));
  }
  if (members_ == nullptr) {
    return new FailedReactor(absl::FailedPreconditionError(
        "Replicate: this vault has no TLS material, so it cannot reach members"));
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = members_->Get(req->peer());
  if (!channel.ok()) return new FailedReactor(channel.status());
  std::vector<cas::Digest> digests;
  for (int i = 0; i < req->digests_size(); ++i) {
    absl::StatusOr<cas::Digest> d = FromProto(req->digests(i));
    if (!d.ok()) {
      return new FailedReactor(absl::InvalidArgumentError(
          absl::StrCat("Replicate: digests[", i, "]: ", d.status().message())));
    }
    digests.push_back(*std::move(d));
  }
  replication::PushOptions options;
  if (req->streams() > 0)
    options.streams = static_cast<int>(std::min<uint32_t>(req->streams(), 64));
  auto pusher = std::make_shared<replication::Pusher>(store_, *channel, options);
  const std::string actor = auditor_->Actor(ctx);
  const std::string peer = req->peer();
  const std::string selection = req->all()             ? std::string("all")
                                : req->since_seq() > 0 ? absl::StrCat("since ", req->since_seq())
                                                       : absl::StrCat(digests.size(), " digests");
  absl::Status started = auditor_->Record(
      Auditor::Entry(actor, "replication.push", peer, vault::v1::AuditEntry::ALLOWED, "",
                     {{"stage", "started"}, {"selection", selection}}));
  if (!started.ok()) return new FailedReactor(started);
  Job job;
  job.stop = [pusher] { pusher->Stop(); };
  job.run = [this, pusher, actor, peer, digests = std::move(digests), all = req->all(),
             since = req->since_seq()](const ProgressSink& progress,
                                       ReplicationProgress* final) -> absl::Status {
    absl::Time last_report = absl::InfinitePast();
    replication::ProgressFn on_progress = [&](const replication::PushStats& s) {
      absl::Time now = absl::Now();
      if (now - last_report < absl::Milliseconds(100)) return;  // at most 10 a second
      last_report = now;
      progress(ToProgress(s));
    };
    absl::StatusOr<replication::PushStats> stats =
        digests.empty() ? pusher->PushFeed(all ? 0 : since, on_progress)
                        : pusher->PushDigests(digests, on_progress);
    if (stats.ok()) *final = ToProgress(*stats);
    absl::Status audited =
        AuditEnd(auditor_, actor, "replication.push", peer, stats.status(), *final);
    if (!stats.ok()) return stats.status();
    return audited;
  };
  return new JobReactor(std::move(job));
}

grpc::ServerWriteReactor<ReplicationProgress>* AdminService::Reconcile(
    grpc::CallbackServerContext* ctx, const vault::v1::ReconcileRequest* req) {
  if (members_ == nullptr) {
    return new FailedReactor(absl::FailedPreconditionError(
        "Reconcile: this vault has no TLS material, so it cannot reach members"));
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = members_->Get(req->peer());
  if (!channel.ok()) return new FailedReactor(channel.status());
  replication::ReconcileOptions options;
  // Neither direction named: both.
  options.pull = req->pull() || !req->push();
  options.push = req->push() || !req->pull();
  options.dry_run = req->dry_run();
  options.min_bytes = req->min_bytes();
  options.max_bytes = req->max_bytes();
  auto reconciler =
      std::make_shared<replication::Reconciler>(store_, *channel, req->peer(), options);
  const std::string actor = auditor_->Actor(ctx);
  const std::string peer = req->peer();
  const std::string mode = options.pull && options.push ? "both" : options.pull ? "pull" : "push";
  absl::Status started = auditor_->Record(Auditor::Entry(
      actor, "replication.reconcile", peer, vault::v1::AuditEntry::ALLOWED, "",
      {{"stage", "started"}, {"mode", mode}, {"dry_run", options.dry_run ? "true" : "false"}}));
  if (!started.ok()) return new FailedReactor(started);
  Job job;
  job.stop = [reconciler] { reconciler->Stop(); };
  job.run = [this, reconciler, actor, peer, mode](const ProgressSink& progress,
                                                  ReplicationProgress* final) -> absl::Status {
    absl::Time last_report = absl::InfinitePast();
    replication::ReconcileProgressFn on_progress = [&](replication::ReconcileStage stage,
                                                       const replication::ReconcileStats& s) {
      absl::Time now = absl::Now();
      if (stage == replication::ReconcileStage::kCopying &&
          now - last_report < absl::Milliseconds(100)) {
        return;  // at most 10 a second
      }
      last_report = now;
      ReplicationProgress p = ToProgress(s);
      p.set_compared(true);
      progress(p);
    };
    absl::StatusOr<replication::ReconcileStats> stats = reconciler->Run(on_progress);
    if (stats.ok()) {
      *final = ToProgress(*stats);
      ListDifferences(*stats, final);
    }
    absl::Status audited =
        AuditEnd(auditor_, actor, "replication.reconcile", peer, stats.status(), *final,
                 {{"mode", mode},
                  {"missing_here", absl::StrCat(final->missing_here())},
                  {"missing_there", absl::StrCat(final->missing_there())},
                  {"ranges_compared", absl::StrCat(final->ranges_compared())},
                  {"round_trips", absl::StrCat(final->round_trips())}});
    if (!stats.ok()) return stats.status();
    return audited;
  };
  return new JobReactor(std::move(job));
}

}  // namespace vault::node
