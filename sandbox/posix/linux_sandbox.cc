// LinuxSandbox: Create and Init (the fences probed, vault-sandbox-init found, the supervisor
// started); Spawn and the rest are in internal/launch.cc, supervisor.cc and handle.cc.
#include "sandbox/posix/linux_sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "sandbox/posix/cgroup.h"
#include "sandbox/posix/internal/linux_sandbox_impl.h"
#include "sandbox/posix/internal/plan.h"
#include "sandbox/posix/landlock.h"
#include "sandbox/posix/seccomp.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

using common::UniqueFd;

std::string ReadSmallFile(const char* path) {
  std::string out;
  UniqueFd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd.get(), buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

absl::StatusOr<std::string> FindInit(const std::string& configured) {
  std::vector<std::string> candidates;
  if (!configured.empty()) {
    candidates.push_back(configured);
  } else {
    if (const char* env = getenv("VAULT_SANDBOX_INIT"); env != nullptr && *env != '\0') {
      candidates.push_back(env);
    } else {
      std::error_code ec;
      std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
      if (!ec) {
        std::filesystem::path dir = self.parent_path();
        candidates.push_back((dir / "vault-sandbox-init").string());
        candidates.push_back((dir / "../sandbox/vault-sandbox-init").string());
        candidates.push_back((dir / "../../sandbox/vault-sandbox-init").string());
        candidates.push_back((dir / "../libexec/vault/vault-sandbox-init").string());
      }
    }
  }
  for (const std::string& candidate : candidates) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      absl::StrCat("vault-sandbox-init not found (looked at: ", absl::StrJoin(candidates, ", "),
                   "); set VAULT_SANDBOX_INIT or install it beside the executable"));
}

bool ProbeUserNamespaces(std::string* why) {
  alignas(16) static char stack[64 * 1024];
  pid_t pid = clone([](void*) -> int { _exit(0); }, stack + sizeof stack,
                    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
                        CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
                    nullptr);
  if (pid < 0) {
    *why = absl::StrCat("namespaces: clone failed: ", strerror(errno),
                        " (user namespaces disabled? see /proc/sys/user/max_user_namespaces)");
    return false;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

LinuxSandbox::Impl::~Impl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  if (supervisor_.joinable()) supervisor_.join();
}

absl::Status LinuxSandbox::Impl::Init(const LinuxSandboxOptions& options) {
  options_ = options;
  self_uid_ = geteuid();
  self_gid_ = getegid();
  fences_.running_as_root = self_uid_ == 0;
  std::vector<std::string> warnings;
  if (!fences_.running_as_root) {
    gid_t groups[256];
    int n = getgroups(256, groups);
    std::vector<std::string> kept;
    for (int i = 0; i < n; ++i) {
      if (groups[i] != self_gid_) kept.push_back(absl::StrCat(groups[i]));
    }
    fences_.kept_groups = absl::StrJoin(kept, ",");
    if (n < 0) fences_.kept_groups = "unknown (getgroups failed)";
  }
  std::string id_lock_dir;
  if (fences_.running_as_root) {
    std::error_code ec;
    std::filesystem::create_directories(options.id_lock_dir, ec);
    if (ec || chmod(options.id_lock_dir.c_str(), 0700) != 0) {
      warnings.push_back(absl::StrCat("host ids: cannot use ", options.id_lock_dir,
                                      " to claim ids across processes (", ec.message(),
                                      "); ids are unique within this process only"));
    } else {
      id_lock_dir = options.id_lock_dir;
    }
  }
  host_ids_ = std::make_unique<HostIdPool>(options.host_id_base, options.host_id_count,
                                           std::move(id_lock_dir));

  std::string why;
  fences_.user_namespaces = ProbeUserNamespaces(&why);
  if (!why.empty()) warnings.push_back(why);
  fences_.seccomp = prctl(PR_GET_SECCOMP, 0, 0, 0, 0) >= 0;
  if (!fences_.seccomp) warnings.push_back("seccomp: the kernel has no seccomp support");
  fences_.landlock_abi = landlock::ProbeAbi();
  if (fences_.landlock_abi <= 0) {
    warnings.push_back("landlock: not available in this kernel (or disabled at boot: lsm=)");
  }
  CgroupManager::Options cgroup_options;
  cgroup_options.folder = options.cgroup_folder;
  cgroup_options.prefer_v2_freezer = options.prefer_v2_freezer;
  absl::StatusOr<std::unique_ptr<CgroupManager>> cgroups = CgroupManager::Detect(cgroup_options);
  if (cgroups.ok()) {
    cgroups_ = std::move(*cgroups);
    fences_.cgroup_memory = cgroups_->Has(CgroupController::kMemory);
    fences_.cgroup_pids = cgroups_->Has(CgroupController::kPids);
    fences_.cgroup_cpu =
        cgroups_->Has(CgroupController::kCpu) && cgroups_->Has(CgroupController::kCpuAcct);
    fences_.cgroup_freezer = cgroups_->Has(CgroupController::kFreezer);
    fences_.cgroup_detail = cgroups_->Describe();
    if (!cgroups_->Warnings().empty()) warnings.push_back(cgroups_->Warnings());
    if (!fences_.cgroups())
      cgroups_.reset();  // all or nothing: a partial cgroup is not a fence
    else
      // Sandbox ids end in "-<pid>-<n>": remove only what a process that is gone left behind,
      // never the fresh cgroup of another process sharing the folder.
      cgroups_->RemoveStale([](const std::string& name) {
        std::vector<std::string> parts = absl::StrSplit(name, '-');
        pid_t pid = 0;
        if (parts.size() < 3 || !absl::SimpleAtoi(parts[parts.size() - 2], &pid) || pid <= 0) {
          return false;
        }
        return kill(pid, 0) != 0 && errno == ESRCH;
      });
  } else {
    fences_.cgroup_detail = "none";
    warnings.push_back(absl::StrCat("cgroups: ", cgroups.status().message()));
  }
  fences_.warnings = absl::StrJoin(warnings, "; ");
  for (const std::string& warning : warnings) spdlog::warn("sandbox fence: {}", warning);
  VAULT_RETURN_IF_ERROR(CheckPolicy(fences_, options.required));

  VAULT_ASSIGN_OR_RETURN(seccomp_, BuildSeccompPrograms());
  VAULT_ASSIGN_OR_RETURN(init_path_, FindInit(options.init_path));
  init_fd_ = UniqueFd(open(init_path_.c_str(), O_PATH | O_CLOEXEC));
  if (init_fd_.get() < 0) return Errno(errno, absl::StrCat("open ", init_path_));
  int cap_last = 0;
  if (absl::SimpleAtoi(absl::StripAsciiWhitespace(ReadSmallFile("/proc/sys/kernel/cap_last_cap")),
                       &cap_last)) {
    cap_last_ = cap_last;
  }

  // The system part of every sandbox's tree.
  system_ops_ = internal::SystemMountOps();

  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (epoll_.get() < 0) return Errno(errno, "epoll_create1");
  wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake_.get() < 0) return Errno(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_.get();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0)
    return Errno(errno, "epoll_ctl");
  supervisor_ = std::thread([this] { SupervisorLoop(); });
  return absl::OkStatus();
}

LinuxSandbox::LinuxSandbox(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
LinuxSandbox::~LinuxSandbox() = default;

absl::StatusOr<std::unique_ptr<LinuxSandbox>> LinuxSandbox::Create(
    const LinuxSandboxOptions& options) {
  auto impl = std::make_shared<Impl>();
  VAULT_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<LinuxSandbox>(new LinuxSandbox(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> LinuxSandbox::Spawn(const SandboxSpec& spec) {
  return impl_->Spawn(spec);
}

const FenceReport& LinuxSandbox::fences() const { return impl_->fences(); }

absl::Status LinuxSandbox::SetProgram(const CodeObject& code, SandboxSpec* spec) const {
  switch (code.kind) {
    case CodeObject::Kind::kPython:
      spec->program = "/usr/bin/python3";
      spec->argv = {"python3", "/code/agent.py"};
      spec->env.push_back(absl::StrCat("PYTHONPATH=", code.python_sdk_dir));
      spec->env.push_back("PYTHONDONTWRITEBYTECODE=1");
      spec->env.push_back("PYTHONUNBUFFERED=1");
      spec->read_only_dirs.push_back(code.python_sdk_dir);
      break;
    case CodeObject::Kind::kNative:
      spec->program = "/code/agent";
      spec->argv = {"agent"};
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a posix sandbox runs native programs and Python scripts, not ",
                       CodeKindName(code.kind), " code"));
  }
  spec->code_dir = code.dir;
  return absl::OkStatus();
}

}  // namespace vault::sandbox
