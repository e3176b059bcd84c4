// cas/collector: the CAS's garbage collection (design §12). An object stays while something
// holds it: a pin, or a root that a source outside the CAS reports (an agent's code and state,
// what an agent stored, an image's blobs), or while it is younger than the grace period; the
// rest is removed, then the chunks nothing names any more.
//
//   Collector gc(store.get(), pins.get(), {{.name = "image", .list = ListImageBlobs}});
//   VAULT_ASSIGN_OR_RETURN(CollectReport r, gc.Run({.grace = absl::Hours(1)}));
//   // An operator's removal, refused while something holds the object:
//   VAULT_ASSIGN_OR_RETURN(RemoveOutcome out, gc.RemoveUnheld(digest));
//
// Safe while puts, reads, uploads and agents run. The run notes its start, then reads the
// roots: whatever is rooted after that was stored or confirmed after it (Store::Touch, a put's
// confirmation), so the removals, which name the start less the grace period as their cutoff
// (RemoveOptions::untouched_before), leave it alone. Removals are written in groups; a crash
// between two leaves only garbage for the next run.
//
// Thread-safety: thread-safe; one Run at a time (a second waits).
#ifndef VAULT_CAS_COLLECTOR_H_
#define VAULT_CAS_COLLECTOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cas/digest.h"
#include "cas/pins.h"
#include "cas/store.h"

namespace vault::cas {

// What a root source reports, as it lists its roots.
class RootSink {
 public:
  virtual ~RootSink() = default;
  // `digest` must stay; `holder` says what holds it ("agent a-1f2e (code)").
  virtual void Hold(const Digest& digest, absl::string_view holder) = 0;
  // The source keeps records about `digest` that must go when it is removed, though they do
  // not hold it (RemoveOptions::also is called for such objects only).
  virtual void Track(const Digest& digest) = 0;
};

struct RootSource {
  std::string name;  // "agent", "image": the report counts the objects each source held
  std::function<absl::Status(RootSink&)> list;
};

struct CollectOptions {
  bool dry_run = false;
  // Objects stored or confirmed this recently stay, rooted or not: puts and replication in
  // progress, and what was stored just before it is rooted.
  absl::Duration grace = absl::Hours(1);
  // Asked between steps: its error ends the run (a shutdown).
  std::function<absl::Status()> keep_going;
  // Dry run: list up to this many of the objects it would remove.
  size_t list_limit = 0;
};

struct CollectReport {
  bool dry_run = false;
  uint64_t objects = 0;  // objects examined
  uint64_t bytes = 0;    // their bytes
  uint64_t held = 0;     // held by a pin or a root
  uint64_t held_bytes = 0;
  uint64_t young = 0;  // within the grace period, not held
  uint64_t young_bytes = 0;
  uint64_t removed = 0;  // removed (dry run: would be)
  uint64_t removed_bytes = 0;
  uint64_t kept_recent = 0;                 // confirmed by a put or a new root while the run went
  std::map<std::string, uint64_t> held_by;  // source name ("pin" for pins) -> objects
  ChunkSweep chunks;
  std::vector<Digest> listed;  // dry run: objects it would remove (CollectOptions::list_limit)
  absl::Time started;
  absl::Duration took;
};

// What the sources that track objects (RootSink::Track) do when one is removed.
struct RemovalHooks {
  // Adds the writes that go with the removal (in its write, RemoveOptions::also).
  std::function<absl::Status(const Digest&, rocksdb::WriteBatch*)> also;
  // Told once the removals are durable, with the tracked objects removed.
  std::function<void(const std::vector<Digest>&)> removed;
};

class Collector {
 public:
  // `store` and `pins` must outlive the collector.
  Collector(Store* store, const Pins* pins, std::vector<RootSource> sources,
            RemovalHooks hooks = {});

  // On an error, *partial (when given) gets what the run had done by then.
  absl::StatusOr<CollectReport> Run(const CollectOptions& options,
                                    CollectReport* partial = nullptr);
  // What holds `digest` now: "pinned (reason)" or a source's holder; "" when nothing does.
  absl::StatusOr<std::string> HolderOf(const Digest& digest) const;
  // An operator's removal: at once, whatever its age, unless something holds the object
  // (FAILED_PRECONDITION naming the holder and the fix). RemoveOutcome::removed false when it
  // was not stored.
  absl::StatusOr<RemoveOutcome> RemoveUnheld(const Digest& digest);

 private:
  struct Roots : RootSink {
    absl::flat_hash_map<std::string, std::string> held;  // key -> the first holder
    absl::flat_hash_map<std::string, std::string> source_of;
    absl::flat_hash_set<std::string> tracked;
    std::string source;  // the source listing now
    void Hold(const Digest& digest, absl::string_view holder) override;
    void Track(const Digest& digest) override;
  };
  absl::Status RunInto(const CollectOptions& options, CollectReport* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(run_mu_);
  absl::Status ReadRoots(Roots* roots, absl::Time now) const;
  RemoveOptions RemovalOptions(const Roots& roots, absl::Time untouched_before) const;
  // Tells hooks_.removed which of `removed` were tracked.
  void TellRemoved(const Roots& roots, const std::vector<Digest>& removed) const;

  Store* const store_;
  const Pins* const pins_;
  const std::vector<RootSource> sources_;
  const RemovalHooks hooks_;
  absl::Mutex run_mu_;
};

}  // namespace vault::cas

#endif  // VAULT_CAS_COLLECTOR_H_
