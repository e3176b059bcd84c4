// ContainerSandbox: Create (the runtime, cgroups and folders checked, stale containers deleted,
// vault-container-init staged), SetProgram and Spawn; the supervisor thread and the handle are in
// container_supervisor.cc.
#include "sandbox/container/container_sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "sandbox/container/internal/container_impl.h"
#include "sandbox/container/oci_config.h"
#include "sandbox/container/runtime_command.h"
#include "sandbox/posix/seccomp.h"
#include "sandbox/runner_files.h"
#include "spdlog/spdlog.h"

namespace vault::sandbox {
namespace {

using common::UniqueFd;

// Descriptors inside the container (besides stdio): the channel, the seccomp programs, the
// init's report pipe.
constexpr int kChannelFd = 3;
constexpr int kProgramsFd = 4;
constexpr int kReportFd = 5;
// How long a container may take from `runc create` to its program's execution.
constexpr absl::Duration kStartTimeout = absl::Seconds(30);

std::atomic<uint64_t>& Counter() {
  static std::atomic<uint64_t> counter{0};
  return counter;
}

absl::Status Errno(int err, const std::string& what) { return absl::ErrnoToStatus(err, what); }

absl::StatusOr<std::string> FindOnPath(const std::string& name) {
  if (absl::StrContains(name, "/")) {
    if (access(name.c_str(), X_OK) != 0) return Errno(errno, name);
    return name[0] == '/' ? name : std::filesystem::absolute(name).string();
  }
  for (const char* dir :
       {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}) {
    std::string path = absl::StrCat(dir, "/", name);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return absl::NotFoundError(absl::StrCat("no ", name, " on PATH"));
}

// Every folder from `path` up must let others search it: the containers' host ids walk them.
absl::Status CheckSearchable(const std::string& path) {
  for (std::string dir = path; !dir.empty() && dir != "/"; dir = common::DirName(dir)) {
    struct stat st;
    if (stat(dir.c_str(), &st) != 0) return Errno(errno, absl::StrCat("stat ", dir));
    if ((st.st_mode & S_IXOTH) == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s is mode %04o: container agents run as their own host ids, which must reach %s "
          "through it (chmod o+x %s; nothing in it becomes readable)",
          dir, st.st_mode & 07777, path, dir));
    }
  }
  return absl::OkStatus();
}

// The error runc's --log (json lines) ends with, or its output.
std::string RuntimeError(const std::string& log_path, const std::string& output) {
  absl::StatusOr<std::string> log = common::ReadFile(log_path);
  std::string last;
  if (log.ok()) {
    for (absl::string_view line : absl::StrSplit(*log, '\n', absl::SkipEmpty())) {
      if (!absl::StrContains(line, R"("level":"error")") &&
          !absl::StrContains(line, R"("level":"fatal")")) {
        continue;
      }
      size_t at = line.find(R"("msg":")");
      if (at == absl::string_view::npos) continue;
      absl::string_view msg = line.substr(at + 7);
      size_t end = msg.find(R"(",")");
      last = std::string(msg.substr(0, end == absl::string_view::npos ? msg.size() - 2 : end));
    }
  }
  if (last.empty()) last = std::string(absl::StripAsciiWhitespace(output));
  return last.empty() ? "no message" : last;
}

}  // namespace

ContainerSandbox::Impl::~Impl() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
  if (supervisor_.joinable()) supervisor_.join();
}

absl::StatusOr<std::string> ContainerSandbox::Impl::Runtime(
    const std::vector<std::string>& args, const std::vector<std::pair<int, int>>& fds,
    absl::Duration timeout) const {
  std::vector<std::string> argv = {runtime_, "--root", runc_root_};
  argv.insert(argv.end(), args.begin(), args.end());
  VAULT_ASSIGN_OR_RETURN(RuntimeResult result, RunRuntime(argv, fds, timeout));
  if (result.exit_code != 0) {
    return absl::InternalError(absl::StrCat("runc ", args.empty() ? "" : args[0], " failed (exit ",
                                            result.exit_code,
                                            "): ", absl::StripAsciiWhitespace(result.output)));
  }
  return result.output;
}

absl::Status ContainerSandbox::Impl::Init(const ContainerSandboxOptions& options) {
  options_ = options;
  if (!options_.images) return absl::InvalidArgumentError("the container type needs its images");
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "container agents need vaultd to run as root (runc creates their user namespaces)");
  }
  if (options_.state_dir.empty() || options_.state_dir[0] != '/') {
    return absl::InvalidArgumentError("the container type's state folder must be absolute");
  }
  absl::StatusOr<std::string> runtime = FindOnPath(options_.runtime);
  if (!runtime.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no OCI runtime: ", runtime.status().message(),
                     " (apt-get install runc, or set containers.runtime)"));
  }
  runtime_ = *runtime;
  VAULT_ASSIGN_OR_RETURN(RuntimeResult version,
                         RunRuntime({runtime_, "--version"}, {}, absl::Seconds(10)));
  std::vector<std::string> lines = absl::StrSplit(version.output, '\n');
  if (version.exit_code != 0 || lines.empty() || !absl::StartsWith(lines[0], "runc version ")) {
    return absl::FailedPreconditionError(
        absl::StrCat(runtime_,
                     " --version does not say \"runc version\": only runc's command line is spoken "
                     "(set containers.runtime to runc)"));
  }

  std::error_code ec;
  runc_root_ = options_.state_dir + "/runc";
  bundles_ = options_.state_dir + "/bundles";
  scratch_ = options_.state_dir + "/scratch";
  for (const std::string& dir : {options_.state_dir, runc_root_, bundles_, scratch_}) {
    std::filesystem::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("mkdir ", dir, ": ", ec.message()));
  }
  chmod(options_.state_dir.c_str(), 0711);
  chmod(runc_root_.c_str(), 0700);
  chmod(bundles_.c_str(), 0700);
  chmod(scratch_.c_str(), 0711);
  VAULT_RETURN_IF_ERROR(CheckSearchable(scratch_));
  for (const std::string& dir : options_.reachable) {
    std::filesystem::create_directories(dir, ec);
    VAULT_RETURN_IF_ERROR(CheckSearchable(dir));
  }

  CgroupManager::Options cgroup_options;
  cgroup_options.folder = options_.cgroup_folder;
  absl::StatusOr<std::unique_ptr<CgroupManager>> cgroups = CgroupManager::Detect(cgroup_options);
  if (!cgroups.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("container agents need cgroups: ", cgroups.status().message()));
  }
  for (CgroupController c :
       {CgroupController::kMemory, CgroupController::kPids, CgroupController::kCpu,
        CgroupController::kCpuAcct, CgroupController::kFreezer}) {
    if (!(*cgroups)->Has(c)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "container agents need the memory, pids, cpu, cpuacct and freezer cgroup controllers: ",
          (*cgroups)->Describe(), " ", (*cgroups)->Warnings()));
    }
  }
  cgroups_ = std::move(*cgroups);

  VAULT_ASSIGN_OR_RETURN(StagedRunner staged, StageRunner({.files = {"vault-container-init"},
                                                           .env = "VAULT_CONTAINER_INIT_DIR",
                                                           .folder = "container"},
                                                          options_.init_dir, options_.stage_root));
  init_path_ = staged.dir + "/vault-container-init";
  init_lease_ = std::move(staged.lease);
  VAULT_RETURN_IF_ERROR(CheckSearchable(staged.dir));
  VAULT_ASSIGN_OR_RETURN(SeccompPrograms programs, BuildSeccompPrograms());
  seccomp_programs_ = SerializeSeccompPrograms(programs);

  std::string id_lock_dir = options_.id_lock_dir;
  std::filesystem::create_directories(id_lock_dir, ec);
  if (ec || chmod(id_lock_dir.c_str(), 0700) != 0) {
    spdlog::warn("container host ids: cannot use {} ({}); ids are unique within this process only",
                 id_lock_dir, ec.message());
    id_lock_dir.clear();
  }
  host_ids_ = std::make_unique<HostIdPool>(options_.host_id_base, options_.host_id_count,
                                           std::move(id_lock_dir));
  cpus_ = std::max<int64_t>(1, sysconf(_SC_NPROCESSORS_ONLN));
  RemoveStale();

  description_ = absl::StrCat(lines[0], " (", runtime_, "), cgroups ", cgroups_->Describe(),
                              ", state in ", options_.state_dir);
  epoll_ = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  if (epoll_.get() < 0) return Errno(errno, "epoll_create1");
  wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (wake_.get() < 0) return Errno(errno, "eventfd");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_.get();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev) != 0) {
    return Errno(errno, "epoll_ctl");
  }
  supervisor_ = std::thread([this] { SupervisorLoop(); });
  return absl::OkStatus();
}

// The runtime's state folder is this vault's alone (under its data folder): whatever is in it
// was left by a previous process of this vault, killed before it could delete its containers.
void ContainerSandbox::Impl::RemoveStale() {
  int containers = 0;
  if (DIR* dir = opendir(runc_root_.c_str()); dir != nullptr) {
    std::vector<std::string> ids;
    while (dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ids.push_back(entry->d_name);
    }
    closedir(dir);
    for (const std::string& id : ids) {
      absl::StatusOr<std::string> deleted = Runtime({"delete", "--force", id});
      if (deleted.ok()) {
        ++containers;
      } else {
        spdlog::warn("container {} left by a previous run: {}", id, deleted.status().ToString());
      }
    }
  }
  const int scratches = RemoveStaleScratch(scratch_);
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(bundles_, ec)) {
    std::filesystem::remove_all(entry.path(), ec);
  }
  // Ids end in "-<pid>-<n>": only the cgroups of processes that are gone (other vaults of this
  // machine may share the folder).
  cgroups_->RemoveStale([](const std::string& name) {
    std::vector<std::string> parts = absl::StrSplit(name, '-');
    pid_t pid = 0;
    if (parts.size() < 3 || !absl::SimpleAtoi(parts[parts.size() - 2], &pid) || pid <= 0) {
      return false;
    }
    return kill(pid, 0) != 0 && errno == ESRCH;
  });
  if (containers + scratches > 0) {
    spdlog::info("removed {} containers and {} scratch folders a previous run left", containers,
                 scratches);
  }
}

absl::Status ContainerSandbox::Impl::SetProgram(const CodeObject& code, SandboxSpec* spec) const {
  if (code.digest.size() != 64) {
    return absl::InvalidArgumentError("a container agent's code is an image's manifest digest");
  }
  VAULT_ASSIGN_OR_RETURN(ContainerImage image, options_.images(code.digest, code.size));
  std::vector<std::string> argv = code.command;
  if (argv.empty()) {
    argv = image.entrypoint;
    argv.insert(argv.end(), image.cmd.begin(), image.cmd.end());
  }
  if (argv.empty() || argv[0].empty()) {
    return absl::InvalidArgumentError(absl::StrCat("image sha256:", code.digest,
                                                   " names no program (no Entrypoint or Cmd): give "
                                                   "one in the spec, (command \"/bin/agent\")"));
  }
  spec->program = argv[0];
  spec->argv = std::move(argv);
  spec->root_dir = image.rootfs;
  spec->cwd = image.working_dir;
  // The image's environment first: the spec's and the vault's entries come after and win.
  spec->env.insert(spec->env.begin(), image.env.begin(), image.env.end());
  spec->code_dir.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> ContainerSandbox::Impl::Spawn(
    const SandboxSpec& spec) {
  const absl::Time started = absl::Now();
  VAULT_RETURN_IF_ERROR(ValidateLimits(spec.limits));
  if (spec.root_dir.empty() || spec.argv.empty()) {
    return absl::InvalidArgumentError("a container needs its image's root and a program");
  }
  if (!spec.code_dir.empty() || !spec.read_only_dirs.empty()) {
    return absl::InvalidArgumentError("a container sees its image only: no /code, no host folders");
  }
  auto state = std::make_shared<ContainerState>();
  state->id = absl::StrCat("c-", getpid(), "-", Counter().fetch_add(1));
  state->limits = spec.limits;
  state->started = started;
  state->on_exit = spec.on_exit;
  state->host_slot = host_ids_->Claim();
  if (state->host_slot < 0) return absl::ResourceExhaustedError("no free container host id");
  const uint32_t host_id = host_ids_->base() + static_cast<uint32_t>(state->host_slot);
  const std::string bundle = absl::StrCat(bundles_, "/", state->id);
  bool created = false;
  auto fail = [&](absl::Status status) {
    if (created) (void)Runtime({"delete", "--force", state->id});
    if (state->cgroup != nullptr) {
      // (A runc killed at its deadline leaves its `runc init` behind, unknown to its state.)
      (void)state->cgroup->KillAll();
      (void)state->cgroup->Remove();
    }
    std::error_code ec;
    std::filesystem::remove_all(bundle, ec);
    host_ids_->Release(state->host_slot);
    return status;
  };

  CgroupLimits cgroup_limits;
  cgroup_limits.memory_bytes = spec.limits.memory_bytes;
  cgroup_limits.max_pids = spec.limits.max_processes;
  cgroup_limits.cpu_percent = spec.limits.cpu_percent;
  absl::StatusOr<std::unique_ptr<Cgroup>> cgroup = cgroups_->Create(state->id, cgroup_limits);
  if (!cgroup.ok()) return fail(cgroup.status());
  state->cgroup = std::move(*cgroup);

  absl::StatusOr<Scratch> scratch =
      MountScratch(absl::StrCat(scratch_, "/", state->id), spec.limits, host_id);
  if (!scratch.ok()) return fail(scratch.status());

  ContainerSpec c;
  c.rootfs = spec.root_dir;
  c.init_path = init_path_;
  c.args = spec.argv;
  c.env = spec.env;
  if (spec.channel_fd >= 0) c.env.push_back(absl::StrCat("VAULT_CHANNEL_FD=", kChannelFd));
  if (!spec.cwd.empty()) c.cwd = spec.cwd;
  c.host_id = host_id;
  c.limits = spec.limits;
  c.cgroups_path = absl::StrCat(options_.cgroup_folder, "/", state->id);
  c.storage_dir = scratch->path;
  absl::StatusOr<std::string> config = OciConfigJson(c);
  if (!config.ok()) return fail(config.status());
  if (mkdir(bundle.c_str(), 0700) != 0) return fail(Errno(errno, absl::StrCat("mkdir ", bundle)));
  if (absl::Status s = common::WriteFileAtomic(bundle + "/config.json", *config, 0600); !s.ok()) {
    return fail(s);
  }

  UniqueFd programs(memfd_create("vault-seccomp", MFD_CLOEXEC));
  if (programs.get() < 0) return fail(Errno(errno, "memfd_create"));
  if (write(programs.get(), seccomp_programs_.data(), seccomp_programs_.size()) !=
          static_cast<ssize_t>(seccomp_programs_.size()) ||
      lseek(programs.get(), 0, SEEK_SET) != 0) {
    return fail(Errno(errno, "write the seccomp programs"));
  }
  int report_pipe[2];
  if (pipe2(report_pipe, O_CLOEXEC) != 0) return fail(Errno(errno, "pipe2"));
  state->report = UniqueFd(report_pipe[0]);
  fcntl(state->report.get(), F_SETFL, O_NONBLOCK);
  UniqueFd report_write(report_pipe[1]);
  UniqueFd devnull(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (devnull.get() < 0) return fail(Errno(errno, "open /dev/null"));
  auto or_null = [&](int fd) { return fd >= 0 ? fd : devnull.get(); };
  std::vector<std::pair<int, int>> fds = {
      {0, or_null(spec.stdin_fd)},   {1, or_null(spec.stdout_fd)},
      {2, or_null(spec.stderr_fd)},  {kChannelFd, or_null(spec.channel_fd)},
      {kProgramsFd, programs.get()}, {kReportFd, report_write.get()}};
  const std::string log = bundle + "/runc.log";
  absl::StatusOr<RuntimeResult> create = RunRuntime(
      {runtime_, "--root", runc_root_, "--log", log, "--log-format", "json", "create", "--bundle",
       bundle, "--pid-file", bundle + "/pid", "--preserve-fds", "3", state->id},
      fds, kStartTimeout);
  report_write.Reset();
  programs.Reset();
  created = true;  // whatever it made, deleted on failure
  if (!create.ok()) return fail(create.status());
  if (create->exit_code != 0) {
    return fail(absl::InternalError(
        absl::StrCat("runc create failed: ", RuntimeError(log, create->output))));
  }
  // The container's init must be in the cgroup the vault freezes, kills and reads: runc puts it
  // under its own cgroup, which is this process's.
  {
    absl::StatusOr<std::string> pid_text = common::ReadFile(bundle + "/pid");
    pid_t pid = 0;
    absl::StatusOr<std::set<pid_t>> tasks = state->cgroup->Tasks();
    if (!pid_text.ok() || !absl::SimpleAtoi(absl::StripAsciiWhitespace(*pid_text), &pid) ||
        !tasks.ok() || !tasks->contains(pid)) {
      return fail(absl::InternalError(
          absl::StrCat("runc did not put the container in the cgroup the vault made for it (",
                       options_.cgroup_folder, "/", state->id,
                       " under vaultd's own cgroup): pause, kill and the limits would miss it")));
    }
  }
  // The binds hold the scratch now; off the host's mount table with it (work_fd keeps it).
  state->work_fd = std::move(scratch->work_fd);
  scratch->Detach();
  if (absl::StatusOr<std::string> start = Runtime({"start", state->id}, {}, kStartTimeout);
      !start.ok()) {
    return fail(start.status());
  }
  // The init's first word: the program executed, or why not.
  std::string first;
  const absl::Time deadline = absl::Now() + kStartTimeout;
  while (!absl::StrContains(first, "\n")) {
    pollfd p{state->report.get(), POLLIN, 0};
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return fail(absl::DeadlineExceededError("the container did not start in time"));
    if (poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    char buf[64];
    const ssize_t n = read(state->report.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    first.append(buf, static_cast<size_t>(n));
  }
  if (!absl::StartsWith(first, "R\n")) {
    int err = 0;
    if (absl::StartsWith(first, "X ") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(first.substr(2, first.find('\n') - 2)), &err)) {
      absl::Status why = Errno(err, absl::StrCat("run ", spec.argv[0], " in the image"));
      if (err == ENOENT) {
        why = absl::NotFoundError(absl::StrCat(
            "the image has no program ", spec.argv[0],
            " (absolute paths inside the image, or names on its PATH; (command ...) sets it)"));
      }
      return fail(why);
    }
    return fail(absl::InternalError(
        "vault-container-init ended before running the program (the seccomp filters were refused "
        "or its report was lost); its reason is on the agent's stderr"));
  }
  state->report_text = first.substr(2);
  {
    absl::MutexLock lock(&state->mu);
    state->deadline = absl::Now() + spec.limits.wall_time;
  }
  state->next_cpu_check = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return fail(absl::CancelledError("the container sandbox is stopping"));
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLHUP;
    ev.data.fd = state->report.get();
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, state->report.get(), &ev) != 0) {
      return fail(Errno(errno, "epoll_ctl"));
    }
    live_[state->report.get()] = state;
  }
  Wake();
  return NewContainerHandle(shared_from_this(), std::move(state));
}

void ContainerSandbox::Impl::Release(const std::shared_ptr<ContainerState>& state) {
  absl::StatusOr<std::string> deleted = Runtime({"delete", "--force", state->id});
  if (!deleted.ok()) spdlog::warn("container {}: {}", state->id, deleted.status().ToString());
  if (state->cgroup != nullptr) {
    (void)state->cgroup->KillAll();  // nothing may outlive the container with its host id
    absl::Status removed = state->cgroup->Remove();
    if (!removed.ok()) spdlog::warn("container {}: {}", state->id, removed.ToString());
  }
  std::error_code ec;
  std::filesystem::remove_all(absl::StrCat(bundles_, "/", state->id), ec);
  host_ids_->Release(std::exchange(state->host_slot, -1));
}

ContainerSandbox::ContainerSandbox(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
ContainerSandbox::~ContainerSandbox() = default;

absl::StatusOr<std::unique_ptr<ContainerSandbox>> ContainerSandbox::Create(
    const ContainerSandboxOptions& options) {
  auto impl = std::make_shared<Impl>();
  VAULT_RETURN_IF_ERROR(impl->Init(options));
  return std::unique_ptr<ContainerSandbox>(new ContainerSandbox(std::move(impl)));
}

absl::Status ContainerSandbox::SetProgram(const CodeObject& code, SandboxSpec* spec) const {
  return impl_->SetProgram(code, spec);
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> ContainerSandbox::Spawn(const SandboxSpec& spec) {
  return impl_->Spawn(spec);
}

const std::string& ContainerSandbox::description() const { return impl_->description(); }

}  // namespace vault::sandbox
