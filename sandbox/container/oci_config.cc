#include "sandbox/container/oci_config.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/json.h"
#include "common/status_macros.h"

namespace vault::sandbox {
namespace {

// A JSON value written in order: objects and arrays by hand, strings escaped by common/json.
std::string Q(absl::string_view s) { return common::JsonQuote(s); }

std::string Array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) absl::StrAppend(&out, i ? "," : "", items[i]);
  return out + "]";
}

std::string Strings(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(Q(s));
  return Array(quoted);
}

std::string Mount(absl::string_view destination, absl::string_view type, absl::string_view source,
                  const std::vector<std::string>& options) {
  return absl::StrCat(R"({"destination":)", Q(destination), R"(,"type":)", Q(type), R"(,"source":)",
                      Q(source), R"(,"options":)", Strings(options), "}");
}

constexpr absl::string_view kInitInside = "/.vault/init";

constexpr const char* kMaskedPaths[] = {
    "/proc/acpi",          "/proc/asound",     "/proc/kcore",       "/proc/keys",
    "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
    "/proc/scsi",          "/sys/firmware"};
constexpr const char* kReadonlyPaths[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                                          "/proc/sysrq-trigger"};

}  // namespace

absl::StatusOr<std::string> OciConfigJson(const ContainerSpec& spec) {
  if (spec.args.empty() || spec.args[0].empty() ||
      (!absl::StartsWith(spec.args[0], "/") && absl::StrContains(spec.args[0], "/"))) {
    return absl::InvalidArgumentError(
        "a container's program is an absolute path inside the image, or a name found on its "
        "PATH");
  }
  if (!absl::StartsWith(spec.storage_dir, "/")) {
    return absl::InvalidArgumentError(
        "a container needs its scratch folder (an absolute host path holding work/ and tmp/)");
  }
  if (!absl::StartsWith(spec.init_path, "/")) {
    return absl::InvalidArgumentError(
        "a container needs vault-container-init (an absolute host path): it installs the "
        "seccomp filters");
  }
  if (!absl::StartsWith(spec.rootfs, "/")) {
    return absl::InvalidArgumentError("the container's root must be an absolute host path");
  }
  if (spec.host_id == 0) {
    return absl::InvalidArgumentError("a container needs its sandbox's own host id, never root");
  }
  // An image's WorkingDir is the image author's: a clean absolute path, never under /proc, /sys
  // or /dev (runc before 1.1.12 let "/proc/self/fd/N" leave the container: CVE-2024-21626).
  {
    bool clean = absl::StartsWith(spec.cwd, "/") && spec.cwd.size() <= 4096;
    if (clean && spec.cwd != "/") {
      for (absl::string_view part : absl::StrSplit(absl::string_view(spec.cwd).substr(1), '/')) {
        clean = clean && !part.empty() && part != "." && part != "..";
      }
    }
    for (absl::string_view kernel : {"/proc", "/sys", "/dev"}) {
      clean = clean && spec.cwd != kernel && !absl::StartsWith(spec.cwd, absl::StrCat(kernel, "/"));
    }
    if (!clean) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the working directory \"", absl::CHexEscape(spec.cwd),
          "\" is not a clean absolute path outside /proc, /sys and /dev (the image's WorkingDir)"));
    }
  }
  if (spec.cgroups_path.empty() || absl::StartsWith(spec.cgroups_path, "/") ||
      absl::StrContains(spec.cgroups_path, "..")) {
    return absl::InvalidArgumentError("the cgroup path must be relative, without \"..\"");
  }
  VAULT_RETURN_IF_ERROR(ValidateLimits(spec.limits));
  const Limits& l = spec.limits;

  std::vector<std::string> env = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/work",
      "TMPDIR=/tmp"};
  for (const std::string& e : spec.env) {
    if (e.find('=') == std::string::npos || absl::StartsWith(e, "=")) {
      return absl::InvalidArgumentError(
          absl::StrCat("environment entry \"", e, "\" is not KEY=VALUE"));
    }
    env.push_back(e);
  }
  std::vector<std::string> args = {std::string(kInitInside)};
  args.insert(args.end(), spec.args.begin(), spec.args.end());
  const std::string caps = absl::StrCat(R"({"bounding":[],"effective":[],"inheritable":[],)",
                                        R"("permitted":[],"ambient":[]})");
  const std::string rlimits =
      absl::StrCat(R"([{"type":"RLIMIT_NOFILE","hard":)", l.max_open_files, R"(,"soft":)",
                   l.max_open_files, R"(},{"type":"RLIMIT_FSIZE","hard":)", l.max_file_bytes,
                   R"(,"soft":)", l.max_file_bytes, "}]");
  const std::string process =
      absl::StrCat(R"({"terminal":false,"user":{"uid":0,"gid":0},"args":)", Strings(args),
                   R"(,"env":)", Strings(env), R"(,"cwd":)", Q(spec.cwd), R"(,"capabilities":)",
                   caps, R"(,"rlimits":)", rlimits, R"(,"noNewPrivileges":true})");

  // Every mount point must exist in the image: runc cannot make one in a read-only root.
  std::vector<std::string> mounts = {
      Mount("/proc", "proc", "proc", {"nosuid", "noexec", "nodev"}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      // No /dev/pts, /dev/shm or /dev/mqueue: a posix agent has none (no terminal, shared
      // memory in /tmp), and neither has a container agent.
      // Its own network namespace makes sysfs mountable in the user namespace; read-only.
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      // Two binds of the one scratch tmpfs the vault mounted with the storage quota, so that
      // the vault reads the work folder after the container is gone.
      Mount("/work", "bind", absl::StrCat(spec.storage_dir, "/work"),
            {"rbind", "nosuid", "nodev", "noexec"}),
      Mount("/tmp", "bind", absl::StrCat(spec.storage_dir, "/tmp"),
            {"rbind", "nosuid", "nodev", "noexec"}),
  };
  mounts.push_back(Mount(kInitInside, "bind", spec.init_path, {"bind", "ro", "nosuid", "nodev"}));
  for (const auto& [host, inside] : spec.read_only_binds) {
    if (!absl::StartsWith(host, "/") || !absl::StartsWith(inside, "/")) {
      return absl::InvalidArgumentError("bind mounts take absolute paths");
    }
    mounts.push_back(Mount(inside, "bind", host, {"rbind", "ro", "nosuid", "nodev"}));
  }

  const uint64_t quota_us = 100000ull * l.cpu_percent / 100;
  const std::string resources =
      absl::StrCat(R"({"devices":[{"allow":false,"access":"rwm"}],"memory":{"limit":)",
                   l.memory_bytes, R"(,"swap":)", l.memory_bytes, R"(},"pids":{"limit":)",
                   l.max_processes, R"(},"cpu":{"shares":)", 1024ull * l.cpu_percent / 100,
                   R"(,"quota":)", quota_us, R"(,"period":100000}})");
  const std::string id_map =
      absl::StrCat(R"([{"containerID":0,"hostID":)", spec.host_id, R"(,"size":1}])");
  std::vector<std::string> masked, readonly;
  for (const char* p : kMaskedPaths) masked.push_back(Q(p));
  for (const char* p : kReadonlyPaths) readonly.push_back(Q(p));
  const std::string linux_section = absl::StrCat(
      R"({"resources":)", resources,
      R"(,"namespaces":[{"type":"pid"},{"type":"network"},{"type":"ipc"},{"type":"uts"},)",
      R"({"type":"mount"},{"type":"user"}],"uidMappings":)", id_map, R"(,"gidMappings":)", id_map,
      R"(,"cgroupsPath":)", Q(spec.cgroups_path), R"(,"maskedPaths":)", Array(masked),
      R"(,"readonlyPaths":)", Array(readonly), "}");
  return absl::StrCat(R"({"ociVersion":"1.0.2","process":)", process, R"(,"root":{"path":)",
                      Q(spec.rootfs), R"(,"readonly":true},"hostname":)", Q(spec.hostname),
                      R"(,"mounts":)", Array(mounts), R"(,"linux":)", linux_section, "}");
}

}  // namespace vault::sandbox
