#include "node/cas_lifecycle.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cas/digest_proto.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::node {
namespace {

using vault::v1::AuditEntry;

constexpr size_t kMaxRemovePerCall = 1000;

vault::v1::PinInfo ToInfo(const cas::Pin& p, absl::Time now) {
  vault::v1::PinInfo info;
  cas::ToProto(p.digest, info.mutable_digest());
  info.set_reason(p.reason);
  info.set_until_unix_ms(p.until == absl::InfiniteFuture() ? 0 : absl::ToUnixMillis(p.until));
  info.set_by(p.by);
  info.set_pinned_unix_ms(absl::ToUnixMillis(p.pinned_at));
  info.set_expired(p.until <= now);
  return info;
}

vault::v1::CollectReport ToProto(const cas::CollectReport& r, const std::string& trigger) {
  vault::v1::CollectReport out;
  out.set_dry_run(r.dry_run);
  out.set_objects(r.objects);
  out.set_bytes(r.bytes);
  out.set_held(r.held);
  out.set_held_bytes(r.held_bytes);
  out.set_young(r.young);
  out.set_young_bytes(r.young_bytes);
  out.set_removed(r.removed);
  out.set_removed_bytes(r.removed_bytes);
  out.set_kept_recent(r.kept_recent);
  for (const auto& [source, n] : r.held_by) (*out.mutable_held_by())[source] = n;
  out.set_chunks(r.chunks.chunks);
  out.set_chunks_unreferenced(r.chunks.unreferenced);
  out.set_chunk_bytes_unreferenced(r.chunks.bytes);
  out.set_chunks_removed(r.chunks.removed);
  for (const cas::Digest& d : r.listed) cas::ToProto(d, out.add_listed());
  out.set_started_unix_ms(absl::ToUnixMillis(r.started));
  out.set_took_ms(static_cast<uint64_t>(absl::ToInt64Milliseconds(r.took)));
  out.set_trigger(trigger);
  return out;
}

// Bytes of the regular files under `dir` (0 when it cannot be read), and their count.
std::pair<uint64_t, uint64_t> DirBytes(const std::string& dir) {
  uint64_t bytes = 0;
  uint64_t files = 0;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code size_ec;
    if (!it->is_regular_file(size_ec)) continue;
    const uintmax_t n = it->file_size(size_ec);
    if (size_ec) continue;
    bytes += n;
    ++files;
  }
  return {bytes, files};
}

}  // namespace

CasLifecycle::CasLifecycle(const vault::v1::GcConfig& config, Deps deps)
    : config_(config), deps_(std::move(deps)) {}

absl::StatusOr<std::unique_ptr<CasLifecycle>> CasLifecycle::Start(const vault::v1::GcConfig& config,
                                                                  Deps deps) {
  std::unique_ptr<CasLifecycle> life(new CasLifecycle(config, std::move(deps)));
  VAULT_ASSIGN_OR_RETURN(life->pins_, cas::Pins::Open(life->deps_.db, life->deps_.store));
  CasLifecycle* self = life.get();
  std::vector<cas::RootSource> sources;
  sources.push_back({.name = "agent", .list = [self](cas::RootSink& sink) {
                       return self->deps_.agents->ListCasRoots(
                           sink, absl::Now(),
                           absl::Seconds(self->config_.keep_ended_agents_seconds()));
                     }});
  if (life->deps_.images != nullptr) {
    sources.push_back({.name = "image", .list = [self](cas::RootSink& sink) -> absl::Status {
                         VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::ImageRecord> images,
                                                self->deps_.images->List());
                         for (const vault::v1::ImageRecord& image : images) {
                           const std::string holder = absl::StrCat(
                               "image ", image.names_size() > 0 ? image.names(0) : image.id());
                           auto hold = [&](const vault::v1::Digest& d) {
                             if (absl::StatusOr<cas::Digest> digest = cas::FromProto(d);
                                 digest.ok()) {
                               sink.Hold(*digest, holder);
                             }
                           };
                           hold(image.manifest());
                           hold(image.config());
                           for (const vault::v1::ImageLayer& l : image.layers()) hold(l.blob());
                         }
                         return absl::OkStatus();
                       }});
  }
  life->collector_ = std::make_unique<cas::Collector>(
      life->deps_.store, life->pins_.get(), std::move(sources),
      cas::RemovalHooks{.also =
                            [self](const cas::Digest& d, rocksdb::WriteBatch* batch) {
                              return self->deps_.agents->AddCasRemoval(d, batch);
                            },
                        .removed =
                            [self](const std::vector<cas::Digest>& removed) {
                              self->deps_.agents->CasObjectsRemoved(removed);
                            }});
  if (config.interval_seconds() > 0)
    life->schedule_ = std::thread([self] { self->ScheduleLoop(); });
  return life;
}

CasLifecycle::~CasLifecycle() { Stop(); }

void CasLifecycle::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (schedule_.joinable()) schedule_.join();
}

void CasLifecycle::ScheduleLoop() {
  const absl::Duration every = absl::Seconds(config_.interval_seconds());
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return stopping_; };
      if (mu_.AwaitWithTimeout(absl::Condition(&stop), every)) return;
    }
    absl::StatusOr<vault::v1::CollectReport> r =
        Collect({.actor = deps_.auditor->self(), .trigger = "schedule"});
    if (!r.ok()) spdlog::warn("scheduled CAS collection failed: {}", r.status().ToString());
  }
}

absl::StatusOr<vault::v1::CollectReport> CasLifecycle::Collect(const CollectOptions& options) {
  const absl::Duration keep = absl::Seconds(config_.keep_unheld_seconds());
  cas::CollectReport partial;
  absl::StatusOr<cas::CollectReport> run = collector_->Run(
      {.dry_run = options.dry_run,
       .grace = keep,
       .keep_going = [this]() -> absl::Status {
         absl::MutexLock lock(&mu_);
         return stopping_ ? absl::CancelledError("the vault is stopping") : absl::OkStatus();
       },
       .list_limit = options.list_limit},
      &partial);
  // (One collection at a time: the collector's own lock; compaction takes the store's.)
  if (!run.ok()) {
    // A failed run is witnessed too: what it removed before it stopped is not lost from view.
    // What it removed before it stopped is witnessed all the same.
    (void)deps_.auditor->Record(
        Auditor::Entry(options.actor, "cas.gc", options.trigger, AuditEntry::ALLOWED, "",
                       {{"objects", absl::StrCat(partial.objects)},
                        {"removed", absl::StrCat(partial.removed)},
                        {"removed_bytes", absl::StrCat(partial.removed_bytes)},
                        {"chunks_removed", absl::StrCat(partial.chunks.removed)},
                        {"error", std::string(run.status().message())}}));
    return run.status();
  }
  vault::v1::CollectReport report = ToProto(*run, options.trigger);
  // Compaction: a dry run (or a run without it) only measures the packs.
  const auto keep_going = [this]() -> absl::Status {
    absl::MutexLock lock(&mu_);
    return stopping_ ? absl::CancelledError("the vault is stopping") : absl::OkStatus();
  };
  absl::StatusOr<cas::CompactReport> compacted =
      deps_.store->Compact({.max_live_fraction = config_.compact_below_live_percent() / 100.0,
                            .dry_run = options.dry_run || !options.compact,
                            .retire_delay = kRetireDelay,
                            .keep_going = keep_going});
  if (!compacted.ok()) {
    (void)deps_.auditor->Record(
        Auditor::Entry(options.actor, "cas.gc", options.trigger, AuditEntry::ALLOWED, "",
                       {{"removed", absl::StrCat(run->removed)},
                        {"error", absl::StrCat("compaction: ", compacted.status().message())}}));
    return compacted.status();
  }
  report.set_pack_files(compacted->files);
  report.set_pack_bytes(compacted->file_bytes);
  report.set_pack_live_bytes(compacted->live_bytes);
  report.set_packs_rewritten(compacted->rewritten);
  report.set_pack_bytes_freed(compacted->freed_bytes);
  report.set_pack_bytes_copied(compacted->copied_bytes);
  report.set_pack_values_damaged(compacted->kept_damaged);
  report.set_took_ms(static_cast<uint64_t>(
      absl::ToInt64Milliseconds(absl::Now() - absl::FromUnixMillis(report.started_unix_ms()))));
  std::string held_by;
  for (const auto& [source, n] : run->held_by) {
    absl::StrAppend(&held_by, held_by.empty() ? "" : ",", source, ":", n);
  }
  if (!options.dry_run) {
    VAULT_RETURN_IF_ERROR(deps_.auditor->Record(
        Auditor::Entry(options.actor, "cas.gc", options.trigger, AuditEntry::ALLOWED, "",
                       {{"objects", absl::StrCat(run->objects)},
                        {"held", absl::StrCat(run->held)},
                        {"held_by", held_by},
                        {"young", absl::StrCat(run->young)},
                        {"removed", absl::StrCat(run->removed)},
                        {"removed_bytes", absl::StrCat(run->removed_bytes)},
                        {"kept_recent", absl::StrCat(run->kept_recent)},
                        {"chunks_removed", absl::StrCat(run->chunks.removed)},
                        {"chunk_bytes", absl::StrCat(run->chunks.bytes)},
                        {"took_ms", absl::StrCat(report.took_ms())}})));
  }
  spdlog::info(
      "CAS collection ({}{}): {} objects, {} held, {} young, {} removed ({} bytes), {} "
      "chunks removed, in {} ms",
      options.trigger, options.dry_run ? ", dry run" : "", run->objects, run->held, run->young,
      run->removed, run->removed_bytes, run->chunks.removed, report.took_ms());
  absl::MutexLock lock(&mu_);
  last_ = report;
  return report;
}

absl::StatusOr<vault::v1::RemoveObjectsResponse> CasLifecycle::Remove(
    const vault::v1::RemoveObjectsRequest& request, const std::string& actor) {
  if (request.digests_size() == 0) {
    return absl::InvalidArgumentError("name at least one object to remove");
  }
  if (request.digests_size() > static_cast<int>(kMaxRemovePerCall)) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxRemovePerCall, " objects per call"));
  }
  std::vector<cas::Digest> digests;
  for (const vault::v1::Digest& d : request.digests()) {
    absl::StatusOr<cas::Digest> digest = cas::FromProto(d);
    if (!digest.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("object ", digests.size() + 1, ": ", digest.status().message()));
    }
    digests.push_back(*std::move(digest));
  }
  vault::v1::RemoveObjectsResponse response;
  std::vector<AuditEntry> entries;
  for (const cas::Digest& d : digests) {
    vault::v1::RemovedObject* result = response.add_results();
    cas::ToProto(d, result->mutable_digest());
    absl::StatusOr<cas::RemoveOutcome> out = collector_->RemoveUnheld(d);
    if (absl::IsFailedPrecondition(out.status())) {
      result->set_error(std::string(out.status().message()));
      entries.push_back(Auditor::Entry(actor, "cas.rm", d.ToString(), AuditEntry::DENIED, "",
                                       {{"reason", result->error()}}));
      continue;
    }
    if (!out.ok()) {
      // Recorded before the error goes back: the removals before it were made.
      if (!entries.empty()) VAULT_RETURN_IF_ERROR(deps_.auditor->RecordMany(std::move(entries)));
      return out.status();
    }
    result->set_removed(out->removed);
    if (out->removed) {
      entries.push_back(
          Auditor::Entry(actor, "cas.rm", d.ToString(), AuditEntry::ALLOWED, "",
                         {{"bytes", absl::StrCat(d.size())}, {"seq", absl::StrCat(out->seq)}}));
    }
  }
  if (!entries.empty()) VAULT_RETURN_IF_ERROR(deps_.auditor->RecordMany(std::move(entries)));
  return response;
}

absl::StatusOr<vault::v1::PinResponse> CasLifecycle::Pin(const vault::v1::PinRequest& request,
                                                         const std::string& actor) {
  VAULT_ASSIGN_OR_RETURN(cas::Digest d, cas::FromProto(request.digest()));
  const bool replaced = pins_->Get(d).ok();
  cas::Pin pin{.digest = d,
               .reason = request.reason(),
               .until = request.until_unix_ms() == 0
                            ? absl::InfiniteFuture()
                            : absl::FromUnixMillis(request.until_unix_ms()),
               .by = actor};
  VAULT_RETURN_IF_ERROR(pins_->Add(pin));
  VAULT_ASSIGN_OR_RETURN(cas::Pin stored, pins_->Get(d));
  vault::v1::PinResponse response;
  *response.mutable_pin() = ToInfo(stored, absl::Now());
  response.set_replaced(replaced);
  VAULT_RETURN_IF_ERROR(deps_.auditor->Record(Auditor::Entry(
      actor, "cas.pin", d.ToString(), AuditEntry::ALLOWED, request.reason(),
      {{"until", request.until_unix_ms() == 0
                     ? std::string("unpinned")
                     : absl::FormatTime(absl::RFC3339_sec, stored.until, absl::UTCTimeZone())}})));
  return response;
}

absl::Status CasLifecycle::Unpin(const vault::v1::UnpinRequest& request, const std::string& actor) {
  VAULT_ASSIGN_OR_RETURN(cas::Digest d, cas::FromProto(request.digest()));
  VAULT_RETURN_IF_ERROR(pins_->Remove(d));
  return deps_.auditor->Record(
      Auditor::Entry(actor, "cas.unpin", d.ToString(), AuditEntry::ALLOWED));
}

absl::StatusOr<vault::v1::ListPinsResponse> CasLifecycle::ListPins() const {
  VAULT_ASSIGN_OR_RETURN(std::vector<cas::Pin> pins, pins_->List());
  vault::v1::ListPinsResponse response;
  const absl::Time now = absl::Now();
  for (const cas::Pin& p : pins) *response.add_pins() = ToInfo(p, now);
  return response;
}

absl::StatusOr<vault::v1::UsageResponse> CasLifecycle::Usage() const {
  vault::v1::UsageResponse response;
  const cas::StoreTotals totals = deps_.store->totals();
  response.set_objects(totals.objects);
  response.set_bytes(totals.bytes);
  const auto [pack_bytes, pack_files] = DirBytes(deps_.pack_dir);
  response.set_pack_bytes(pack_bytes);
  response.set_pack_files(pack_files);
  response.set_database_bytes(DirBytes(deps_.db_dir).first);
  VAULT_ASSIGN_OR_RETURN(std::vector<cas::Pin> pins, pins_->List());
  response.set_pins(pins.size());
  VAULT_ASSIGN_OR_RETURN(cas::CompactReport packs, deps_.store->Compact({.dry_run = true}));
  response.set_pack_live_bytes(packs.live_bytes);
  response.set_pack_garbage_bytes(packs.file_bytes - std::min(packs.file_bytes, packs.live_bytes));
  if (std::optional<vault::v1::CollectReport> last = last_report(); last.has_value()) {
    *response.mutable_last_collection() = *std::move(last);
  }
  return response;
}

std::optional<vault::v1::CollectReport> CasLifecycle::last_report() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

}  // namespace vault::node
