#include "sandbox/posix/internal/plan.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "sandbox/posix/landlock.h"

namespace vault::sandbox::internal {
namespace {

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

bool ValidEnvEntry(absl::string_view entry) {
  size_t eq = entry.find('=');
  if (eq == absl::string_view::npos || eq == 0 || entry.find('\0') != absl::string_view::npos) {
    return false;
  }
  for (size_t i = 0; i < eq; ++i) {
    char c = entry[i];
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_') ||
        (i == 0 && absl::ascii_isdigit(static_cast<unsigned char>(c)))) {
      return false;
    }
  }
  return true;
}

// Absolute, normalized, no "..", no NUL.
absl::Status CheckInsidePath(absl::string_view what, absl::string_view path) {
  if (path.empty() || path[0] != '/' || path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an absolute path: \"", path, "\""));
  }
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must not contain . or ..: \"", path, "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveHostDir(absl::string_view what, const std::string& path) {
  std::error_code ec;
  std::filesystem::path resolved = std::filesystem::canonical(path, ec);
  if (ec) {
    return absl::NotFoundError(absl::StrCat(what, " ", path, ": ", ec.message()));
  }
  if (!std::filesystem::is_directory(resolved, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a directory"));
  }
  std::string result = resolved.string();
  // /run and /var/run hold the host daemons' sockets (D-Bus, journald, container runtimes).
  for (const char* refused : {"/proc", "/sys", "/dev", "/run", "/var/run"}) {
    if (result == refused || absl::StartsWith(result, absl::StrCat(refused, "/"))) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", path, " is under ", refused, ", which is never mounted in"));
    }
  }
  if (result == "/") {
    return absl::InvalidArgumentError(absl::StrCat(what, " must not be the host's root"));
  }
  return result;
}

// The mkdir ops for every missing parent of `inside` (an absolute path) under /newroot.
void AddMkdirs(std::vector<MountOp>& ops, const std::string& inside, mode_t mode = 0755) {
  std::string prefix = "/newroot";
  for (absl::string_view part : absl::StrSplit(inside, '/', absl::SkipEmpty())) {
    absl::StrAppend(&prefix, "/", part);
    ops.push_back({MountOp::kMkdir, prefix, "", 0, false, mode});
  }
}

void AddReadOnlyBind(std::vector<MountOp>& ops, const std::string& host, const std::string& inside,
                     bool allow_exec, const struct stat* checked = nullptr) {
  AddMkdirs(ops, inside);
  std::string target = absl::StrCat("/newroot", inside);
  MountOp bind{MountOp::kBind, absl::StrCat("/oldroot", host), target};
  if (checked != nullptr) {
    bind.dev = static_cast<uint64_t>(checked->st_dev);
    bind.ino = static_cast<uint64_t>(checked->st_ino);
  }
  ops.push_back(std::move(bind));
  uint64_t attr = kMountAttrRdonly | kMountAttrNosuid | kMountAttrNodev;
  if (!allow_exec) attr |= kMountAttrNoexec;
  ops.push_back({MountOp::kAttr, target, "", attr, true});
}

}  // namespace

std::vector<MountOp> SystemMountOps() {
  std::vector<MountOp> ops;
  // The system part of every sandbox's tree. Merged-/usr links are copied as links.
  for (const char* dir : {"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st;
    if (lstat(dir, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char target[4096];
      ssize_t n = readlink(dir, target, sizeof target - 1);
      if (n <= 0) continue;
      ops.push_back({MountOp::kSymlink, std::string(target, static_cast<size_t>(n)),
                     absl::StrCat("/newroot", dir)});
    } else if (S_ISDIR(st.st_mode)) {
      AddReadOnlyBind(ops, dir, dir, /*allow_exec=*/true);
    }
  }
  ops.push_back({MountOp::kMkdir, "/newroot/etc"});
  if (access("/etc/ld.so.cache", R_OK) == 0) {
    ops.push_back({MountOp::kTouch, "/newroot/etc/ld.so.cache"});
    ops.push_back({MountOp::kBind, "/oldroot/etc/ld.so.cache", "/newroot/etc/ld.so.cache"});
    ops.push_back({MountOp::kAttr, "/newroot/etc/ld.so.cache", "",
                   kMountAttrRdonly | kMountAttrNosuid | kMountAttrNodev | kMountAttrNoexec});
  }
  struct stat alternatives;
  if (stat("/etc/alternatives", &alternatives) == 0 && S_ISDIR(alternatives.st_mode)) {
    AddReadOnlyBind(ops, "/etc/alternatives", "/etc/alternatives", /*allow_exec=*/false);
  }
  ops.push_back({MountOp::kWriteFile, "/newroot/etc/passwd",
                 "agent:x:1000:1000:vault agent:/work:/usr/sbin/nologin\n", 0, false, 0644});
  ops.push_back({MountOp::kWriteFile, "/newroot/etc/group", "agent:x:1000:\n", 0, false, 0644});
  ops.push_back({MountOp::kWriteFile, "/newroot/etc/hostname", "vault-sandbox\n", 0, false, 0644});
  // /dev: a small tmpfs with four device nodes bound from the host, read-only once made.
  ops.push_back({MountOp::kMkdir, "/newroot/dev"});
  ops.push_back({MountOp::kMkdir, "/newroot/proc", "", 0, false, 0555});
  for (const char* device : {"null", "zero", "random", "urandom"}) {
    std::string target = absl::StrCat("/newroot/dev/", device);
    ops.push_back({MountOp::kTouch, target});
    ops.push_back({MountOp::kBind, absl::StrCat("/oldroot/dev/", device), target});
    ops.push_back({MountOp::kAttr, target, "", kMountAttrNosuid | kMountAttrNoexec});
  }
  ops.push_back({MountOp::kSymlink, "/proc/self/fd", "/newroot/dev/fd"});
  ops.push_back({MountOp::kSymlink, "/proc/self/fd/0", "/newroot/dev/stdin"});
  ops.push_back({MountOp::kSymlink, "/proc/self/fd/1", "/newroot/dev/stdout"});
  ops.push_back({MountOp::kSymlink, "/proc/self/fd/2", "/newroot/dev/stderr"});
  // The work directory and /tmp: two binds of the one quota'd scratch tmpfs.
  ops.push_back({MountOp::kMkdir, "/newroot/work"});
  ops.push_back({MountOp::kBind, "/scratch/work", "/newroot/work"});
  ops.push_back({MountOp::kMkdir, "/newroot/tmp", "", 0, false, 01777});
  ops.push_back({MountOp::kBind, "/scratch/tmp", "/newroot/tmp"});
  return ops;
}

absl::Status ValidateSpec(const SandboxSpec& spec) {
  VAULT_RETURN_IF_ERROR(ValidateLimits(spec.limits));
  VAULT_RETURN_IF_ERROR(CheckInsidePath("program", spec.program));
  if (!spec.root_dir.empty() || !spec.cwd.empty()) {
    return absl::InvalidArgumentError(
        "a posix sandbox builds its own root: root_dir and cwd are the container type's");
  }
  if (!spec.name.empty() && !ValidName(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sandbox name must match [A-Za-z0-9._-]{1,64}: \"", spec.name, "\""));
  }
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) return absl::InvalidArgumentError("argv contains NUL");
  }
  for (const std::string& entry : spec.env) {
    if (!ValidEnvEntry(entry)) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment entry must be KEY=VALUE: \"", entry, "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ChildArgs>> BuildChildArgs(const SandboxSpec& spec,
                                                          const FenceReport& fences,
                                                          const HostPreparation& prepared) {
  auto args = std::make_unique<ChildArgs>();
  args->drop_groups = fences.running_as_root;
  args->cap_last = prepared.cap_last;
  args->seccomp = prepared.seccomp;
  args->setup_opts = "mode=0755,size=64k,nr_inodes=64";
  args->root_opts =
      absl::StrCat("mode=0755,size=1m,nr_inodes=1024,uid=", kInsideId, ",gid=", kInsideId);
  args->scratch_opts = absl::StrCat("mode=0700,size=", spec.limits.storage_bytes,
                                    ",nr_inodes=", spec.limits.storage_inodes, ",uid=", kInsideId,
                                    ",gid=", kInsideId);
  args->ops = *prepared.system_ops;
  std::vector<landlock::Rule> rules = {
      {"/", landlock::kReadDir},
      {"/usr", landlock::kReadOnly},
      {"/etc", landlock::kReadFile | landlock::kReadDir},
      {"/proc", landlock::kReadFile | landlock::kReadDir},
      {"/dev/null", landlock::kReadFile | landlock::kWriteFile},
      {"/dev/zero", landlock::kReadFile | landlock::kWriteFile},
      {"/dev/random", landlock::kReadFile},
      {"/dev/urandom", landlock::kReadFile},
      {"/work", landlock::kReadWrite},
      {"/tmp", landlock::kReadWrite},
  };
  // Only the system folders that are folders here: a merged-/usr link (/bin -> usr/bin) leads
  // under /usr, whose rule covers it, and each rule costs the child three system calls.
  for (const char* dir : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st;
    if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
      rules.push_back({dir, landlock::kReadOnly, /*optional=*/true});
    }
  }
  if (!spec.code_dir.empty()) {
    VAULT_ASSIGN_OR_RETURN(std::string code, ResolveHostDir("code directory", spec.code_dir));
    struct stat checked;
    if (stat(code.c_str(), &checked) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("code directory ", code));
    }
    AddReadOnlyBind(args->ops, code, "/code", /*allow_exec=*/true, &checked);
    rules.push_back({"/code", landlock::kReadOnly});
  }
  for (const std::string& dir : spec.read_only_dirs) {
    VAULT_ASSIGN_OR_RETURN(std::string host, ResolveHostDir("read-only directory", dir));
    for (const char* reserved : {"/work", "/code", "/etc"}) {
      if (host == reserved || absl::StartsWith(host, absl::StrCat(reserved, "/"))) {
        return absl::InvalidArgumentError(
            absl::StrCat("read-only directory ", dir, " would hide the sandbox's own ", reserved));
      }
    }
    if (host == "/tmp")
      return absl::InvalidArgumentError("read-only directory /tmp would hide /tmp");
    struct stat checked;
    if (stat(host.c_str(), &checked) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("read-only directory ", host));
    }
    AddReadOnlyBind(args->ops, host, host, /*allow_exec=*/true, &checked);
    rules.push_back({host, landlock::kReadOnly});
  }
  args->landlock = landlock::MakePlan(fences.landlock_abi, std::move(rules));
  args->landlock.extra_fd = kInsideInitFd;  // where the child has moved it by then
  args->landlock.extra_access = landlock::kExecute | landlock::kReadFile;

  const Limits& limits = spec.limits;
  args->rlimits = {
      {RLIMIT_CORE, 0, 0},
      {RLIMIT_NOFILE, limits.max_open_files, limits.max_open_files},
      {RLIMIT_FSIZE, limits.max_file_bytes, limits.max_file_bytes},
      {RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1},
      {RLIMIT_NPROC, limits.max_processes, limits.max_processes},
      {RLIMIT_MEMLOCK, 64 * 1024, 64 * 1024},
      {RLIMIT_MSGQUEUE, 64 * 1024, 64 * 1024},
      {RLIMIT_SIGPENDING, 1024, 1024},
      {RLIMIT_RTPRIO, 0, 0},  // no real-time scheduling: it would escape the CPU quota
      {RLIMIT_NICE, 0, 0},    // nice values can only be raised (priority lowered)
  };
  if (!prepared.cgroups) {
    // Without the memory cgroup the address-space limit is the only memory fence.
    args->rlimits.push_back({RLIMIT_AS, limits.memory_bytes, limits.memory_bytes});
  }

  args->argv_storage = {"vault-sandbox-init", spec.program};
  if (spec.argv.empty()) {
    args->argv_storage.push_back(spec.program);
  } else {
    args->argv_storage.insert(args->argv_storage.end(), spec.argv.begin(), spec.argv.end());
  }
  args->env_storage = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/work", "TMPDIR=/tmp",
                       "LANG=C.UTF-8", "USER=agent"};
  if (spec.channel_fd >= 0) args->env_storage.push_back("VAULT_CHANNEL_FD=3");
  args->env_storage.insert(args->env_storage.end(), spec.env.begin(), spec.env.end());
  for (std::string& s : args->argv_storage) args->argv.push_back(s.data());
  args->argv.push_back(nullptr);
  for (std::string& s : args->env_storage) args->envp.push_back(s.data());
  args->envp.push_back(nullptr);
  args->init_fd = prepared.init_fd;
  args->stdio[0] = spec.stdin_fd;
  args->stdio[1] = spec.stdout_fd;
  args->stdio[2] = spec.stderr_fd;
  args->channel_fd = spec.channel_fd;
  return args;
}

}  // namespace vault::sandbox::internal
