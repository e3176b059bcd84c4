#include "cas/collector.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace vault::cas {
namespace {

// Objects are examined, and removed, this many at a time: one write per group.
constexpr size_t kPageObjects = 4096;

}  // namespace

void Collector::Roots::Hold(const Digest& digest, absl::string_view holder) {
  std::string key = digest.Key();
  if (held.try_emplace(key, holder).second) source_of.emplace(std::move(key), source);
}

void Collector::Roots::Track(const Digest& digest) { tracked.insert(digest.Key()); }

Collector::Collector(Store* store, const Pins* pins, std::vector<RootSource> sources,
                     RemovalHooks hooks)
    : store_(store), pins_(pins), sources_(std::move(sources)), hooks_(std::move(hooks)) {}

void Collector::TellRemoved(const Roots& roots, const std::vector<Digest>& removed) const {
  if (!hooks_.removed) return;
  std::vector<Digest> tracked;
  for (const Digest& d : removed) {
    if (roots.tracked.contains(d.Key())) tracked.push_back(d);
  }
  if (!tracked.empty()) hooks_.removed(tracked);
}

absl::Status Collector::ReadRoots(Roots* roots, absl::Time now) const {
  if (pins_ != nullptr) {
    roots->source = "pin";
    VAULT_ASSIGN_OR_RETURN(std::vector<Pin> pins, pins_->List());
    for (const Pin& p : pins) {
      if (p.until <= now) continue;
      roots->Hold(p.digest, p.reason.empty() ? "pinned" : absl::StrCat("pinned (", p.reason, ")"));
    }
  }
  for (const RootSource& source : sources_) {
    roots->source = source.name;
    if (absl::Status s = source.list(*roots); !s.ok()) {
      // Without every root nothing can be removed safely.
      return absl::Status(s.code(), absl::StrCat("reading the roots of ", source.name,
                                                 " failed, nothing was removed: ", s.message()));
    }
  }
  return absl::OkStatus();
}

RemoveOptions Collector::RemovalOptions(const Roots& roots, absl::Time untouched_before) const {
  RemoveOptions options{.untouched_before = untouched_before};
  if (hooks_.also) {
    options.also = [this, &roots](const Digest& d, rocksdb::WriteBatch* batch) -> absl::Status {
      if (!roots.tracked.contains(d.Key())) return absl::OkStatus();
      return hooks_.also(d, batch);
    };
  }
  return options;
}

absl::StatusOr<CollectReport> Collector::Run(const CollectOptions& options,
                                             CollectReport* partial) {
  absl::MutexLock one_run(&run_mu_);
  CollectReport report;
  absl::Status s = RunInto(options, &report);
  if (s.ok()) return report;
  if (partial != nullptr) *partial = std::move(report);
  return s;
}

absl::Status Collector::RunInto(const CollectOptions& options, CollectReport* out) {
  CollectReport& report = *out;
  report.dry_run = options.dry_run;
  report.started = absl::Now();
  auto check = [&]() -> absl::Status {
    return options.keep_going ? options.keep_going() : absl::OkStatus();
  };
  // The start is noted before the roots are read: see the header.
  const absl::Time cutoff = report.started - options.grace;
  const int64_t cutoff_ms = absl::ToUnixMillis(cutoff);
  Roots roots;
  VAULT_RETURN_IF_ERROR(ReadRoots(&roots, report.started));
  VAULT_RETURN_IF_ERROR(check());
  const RemoveOptions removal = RemovalOptions(roots, cutoff);

  VAULT_RETURN_IF_ERROR(
      store_->ForEachObjectPage(kPageObjects, [&](std::vector<ObjectInfo>& page) -> absl::Status {
        std::vector<Digest> doomed;
        for (ObjectInfo& info : page) {
          const uint64_t size = info.digest.size();
          ++report.objects;
          report.bytes += size;
          if (auto it = roots.source_of.find(info.digest.Key()); it != roots.source_of.end()) {
            ++report.held;
            report.held_bytes += size;
            ++report.held_by[it->second];
          } else if (info.touched_unix_ms() >= cutoff_ms) {
            ++report.young;
            report.young_bytes += size;
          } else {
            doomed.push_back(std::move(info.digest));
          }
        }
        if (options.dry_run) {
          for (Digest& d : doomed) {
            ++report.removed;
            report.removed_bytes += d.size();
            if (report.listed.size() < options.list_limit) report.listed.push_back(std::move(d));
          }
        } else if (!doomed.empty()) {
          std::vector<absl::StatusOr<RemoveOutcome>> out = store_->RemoveMany(doomed, removal);
          std::vector<Digest> removed;
          absl::Status failed;
          for (size_t i = 0; i < out.size(); ++i) {
            if (!out[i].ok()) {
              failed.Update(out[i].status());
            } else if (out[i]->removed) {
              ++report.removed;
              report.removed_bytes += doomed[i].size();
              removed.push_back(doomed[i]);
            } else if (out[i]->kept_recent) {
              ++report.kept_recent;
            }
          }
          TellRemoved(roots, removed);
          VAULT_RETURN_IF_ERROR(failed);
        }
        return check();
      }));
  VAULT_ASSIGN_OR_RETURN(report.chunks, store_->SweepChunks(options.dry_run, options.keep_going));
  report.took = absl::Now() - report.started;
  return absl::OkStatus();
}

absl::StatusOr<std::string> Collector::HolderOf(const Digest& digest) const {
  Roots roots;
  VAULT_RETURN_IF_ERROR(ReadRoots(&roots, absl::Now()));
  auto it = roots.held.find(digest.Key());
  return it == roots.held.end() ? std::string() : it->second;
}

absl::StatusOr<RemoveOutcome> Collector::RemoveUnheld(const Digest& digest) {
  // Whatever is rooted after this moment confirms the object after it (see the header).
  const absl::Time began = absl::Now();
  Roots roots;
  VAULT_RETURN_IF_ERROR(ReadRoots(&roots, began));
  if (auto it = roots.held.find(digest.Key()); it != roots.held.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", digest.ToString(), " is held by ", it->second,
                     ": it is removed once nothing holds it",
                     roots.source_of[digest.Key()] == "pin"
                         ? absl::StrCat(" (vaultctl cas unpin ", digest.ToString(), ")")
                         : ""));
  }
  VAULT_ASSIGN_OR_RETURN(RemoveOutcome out, store_->Remove(digest, RemovalOptions(roots, began)));
  if (out.removed) TellRemoved(roots, {digest});
  if (out.kept_recent) {
    return absl::FailedPreconditionError(
        absl::StrCat("object ", digest.ToString(),
                     " was stored again or began to be held while it was being removed; it stays"));
  }
  return out;
}

}  // namespace vault::cas
