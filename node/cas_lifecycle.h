// node: the CAS lifecycle of a vault (design §12, docs/operations.md "Reclaiming space"): pins,
// an operator's removals, collections when asked and on the schedule of cas.gc.interval_seconds,
// and the disk usage. The roots come from the vault's agents (agent::AgentRuntime::ListCasRoots),
// its images and its pins; every pin, unpin, removal and collection is an audit entry.
//
//   VAULT_ASSIGN_OR_RETURN(auto life, CasLifecycle::Start(config.cas().gc(), deps));
//   VAULT_ASSIGN_OR_RETURN(vault::v1::CollectReport r, life->Collect({.dry_run = true}));
//
// Thread-safety: thread-safe; the deps must outlive it (Stop ends the schedule first).
#ifndef VAULT_NODE_CAS_LIFECYCLE_H_
#define VAULT_NODE_CAS_LIFECYCLE_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "agent/runtime.h"
#include "cas/collector.h"
#include "cas/pins.h"
#include "cas/store.h"
#include "image/image_store.h"
#include "node/auditor.h"
#include "storage/database.h"
#include "vault/v1/cas_admin.pb.h"
#include "vault/v1/config.pb.h"

namespace vault::node {

class CasLifecycle {
 public:
  struct Deps {
    storage::Database* db = nullptr;
    cas::Store* store = nullptr;
    agent::AgentRuntime* agents = nullptr;
    image::ImageStore* images = nullptr;  // null: no image holds anything
    Auditor* auditor = nullptr;
    std::string pack_dir;
    std::string db_dir;
  };
  struct CollectOptions {
    bool dry_run = false;
    uint32_t list_limit = 0;
    std::string actor;                 // for the audit entry
    std::string trigger = "operator";  // or "schedule"
    bool compact = true;               // rewrite sparse pack files after the collection
  };

  static absl::StatusOr<std::unique_ptr<CasLifecycle>> Start(const vault::v1::GcConfig& config,
                                                             Deps deps);
  ~CasLifecycle();
  // How long a rewritten pack file stays open for reads already under way (PackStore::Retire).
  static constexpr absl::Duration kRetireDelay = absl::Seconds(2);
  // Ends the schedule (a collection in progress stops at its next step). Idempotent.
  void Stop();

  absl::StatusOr<vault::v1::CollectReport> Collect(const CollectOptions& options);
  // Removes each object unless something holds it (its result then says what, and the fix).
  absl::StatusOr<vault::v1::RemoveObjectsResponse> Remove(
      const vault::v1::RemoveObjectsRequest& request, const std::string& actor);
  absl::StatusOr<vault::v1::PinResponse> Pin(const vault::v1::PinRequest& request,
                                             const std::string& actor);
  absl::Status Unpin(const vault::v1::UnpinRequest& request, const std::string& actor);
  absl::StatusOr<vault::v1::ListPinsResponse> ListPins() const;
  absl::StatusOr<vault::v1::UsageResponse> Usage() const;
  // The last collection's report (a dry run's too), if one ran since start.
  std::optional<vault::v1::CollectReport> last_report() const;

 private:
  CasLifecycle(const vault::v1::GcConfig& config, Deps deps);
  void ScheduleLoop();

  const vault::v1::GcConfig config_;
  const Deps deps_;
  std::unique_ptr<cas::Pins> pins_;
  std::unique_ptr<cas::Collector> collector_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<vault::v1::CollectReport> last_ ABSL_GUARDED_BY(mu_);
  std::thread schedule_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_CAS_LIFECYCLE_H_
