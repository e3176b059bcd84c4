// sandbox_cgroup: one sandbox's cgroup (Cgroup in cgroup.h): a directory in each hierarchy that
// holds one of its controllers, and what is done to it: processes moved in, frozen, killed, read,
// removed. CgroupManager (cgroup.cc) creates it. Private to sandbox/posix.
//
// Thread safety: as Cgroup (cgroup.h).
#ifndef VAULT_SANDBOX_POSIX_INTERNAL_SANDBOX_CGROUP_H_
#define VAULT_SANDBOX_POSIX_INTERNAL_SANDBOX_CGROUP_H_

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/posix/internal/cgroupfs.h"

namespace vault::sandbox {

class CgroupImpl final : public Cgroup {
 public:
  struct Place {
    std::string dir;  // empty: the controller is missing
    int version = 0;
  };

  CgroupImpl(std::vector<std::string> dirs, std::vector<CgroupMount> mounts,
             std::array<Place, kNumControllers> places);
  ~CgroupImpl() override;

  absl::Status AddProcess(pid_t pid) override;
  absl::StatusOr<ThreadReturn> EnterCallingThread() override;
  absl::Status AddClonedProcess(pid_t pid) override;
  absl::Status Freeze() override;
  absl::Status Thaw() override;
  absl::Status KillAll() override;
  absl::StatusOr<std::set<pid_t>> Tasks() const override { return ListTasks(); }
  absl::StatusOr<CgroupReadings> Read() const override;
  absl::StatusOr<uint64_t> CpuUsageNs() const override;
  absl::Status Remove() override;

  // Writes the limits for the controllers present; used once, by Create.
  absl::Status WriteLimits(const CgroupLimits& limits);

 private:
  const Place& place(CgroupController controller) const { return places_[Index(controller)]; }

  static std::string File(const Place& place, absl::string_view name);
  bool IsV2Dir(const std::string& dir) const;
  absl::Status RequireFreezer() const;
  absl::Status SetFrozen(bool frozen, absl::Time deadline);
  absl::StatusOr<std::set<pid_t>> ListTasks() const;
  absl::StatusOr<std::set<pid_t>> KillRound(absl::Time deadline);
  template <typename Done>
  absl::Status WaitUntil(absl::Time deadline, Done done) const;
  absl::Status RemoveDirs(absl::Duration timeout);

  // Constant after construction.
  const std::vector<std::string> dirs_;    // one per hierarchy used, each distinct
  const std::vector<CgroupMount> mounts_;  // the hierarchy of each of dirs_
  const std::array<Place, kNumControllers> places_;
  std::atomic<bool> removed_{false};
  mutable absl::Mutex cpu_mu_;
  mutable common::UniqueFd cpu_fd_ ABSL_GUARDED_BY(cpu_mu_);
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_POSIX_INTERNAL_SANDBOX_CGROUP_H_
