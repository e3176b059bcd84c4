// sandbox: the one interface every sandbox type implements.
//
// A sandbox runs one untrusted program with only what its spec grants: a read-only code
// directory, a private work directory under a storage quota, limits on memory, CPU, processes,
// files and wall time, and one inherited socket (fd 3) as its only channel to the host. The
// runtime (agent/) sees only this interface and picks the type by the spec's (sandbox ...) name
// through SandboxRegistry (registry.h). Each type lives in a folder of its own:
//   - sandbox/posix/: "posix" (LinuxSandbox): a native program or a script in Linux namespaces,
//     Landlock, seccomp, cgroups and rlimits;
//   - an interpreter type (WASM, Scheme) runs its interpreter as the program of a posix sandbox,
//     so that every posix fence holds around it, and speaks the host-call protocol on fd 3 for
//     the code it interprets;
//   - the container type (sandbox/container/) runs an OCI image under runc, with the posix
//     type's Landlock rules and seccomp filters installed by its own init inside.
// A type whose runner can capture a running program's whole execution state says so
// (Sandbox::can_snapshot): the runner hands the snapshot to the vault over its host-call channel,
// at a checkpoint or migrate, or when SandboxHandle::Interrupt asks (wasm: docs/wasm.md); the
// others (posix) move an agent by the state it hands over and start it again.
//
//   ASSIGN_OR_RETURN(auto sandbox, LinuxSandbox::Create(options));
//   SandboxSpec spec;
//   spec.program = "/code/agent";
//   spec.argv = {"agent", "--once"};
//   spec.code_dir = "/var/lib/vault/agents/a1/code";
//   spec.channel_fd = host_end_of_socketpair;  // becomes fd 3 inside
//   ASSIGN_OR_RETURN(auto handle, sandbox->Spawn(spec));
//   ASSIGN_OR_RETURN(ExitInfo exit, handle->Wait(absl::InfiniteDuration()));
//
// Thread safety: a Sandbox may be used from many threads at once. A SandboxHandle's methods
// may be called from any thread; Wait may be called by several threads and all see the same
// ExitInfo.
#ifndef VAULT_SANDBOX_SANDBOX_H_
#define VAULT_SANDBOX_SANDBOX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace vault::sandbox {

// Finite limits for one sandbox. Every field has a finite default; zero is never "unlimited".
struct Limits {
  uint64_t memory_bytes = 256ull << 20;   // cgroup memory limit (OOM kills only the sandbox)
  uint64_t cpu_seconds = 60;              // total CPU time of every process in the sandbox
  uint32_t cpu_percent = 100;             // CPU share: 100 = one full core
  uint32_t max_processes = 64;            // processes and threads (cgroup pids + RLIMIT_NPROC)
  uint32_t max_open_files = 256;          // RLIMIT_NOFILE
  uint64_t max_file_bytes = 64ull << 20;  // RLIMIT_FSIZE
  absl::Duration wall_time = absl::Minutes(10);
  uint64_t storage_bytes = 64ull << 20;  // work directory + /tmp (one tmpfs)
  uint64_t storage_inodes = 4096;        // files in the work directory + /tmp

  bool operator==(const Limits&) const = default;
};

// Checks that every limit is finite and non-zero and below sane ceilings.
absl::Status ValidateLimits(const Limits& limits);

struct ExitInfo;

struct SandboxSpec {
  // Absolute path inside the sandbox of the program to run, and its argv (argv[0] included;
  // when empty, argv is {program}).
  std::string program;
  std::vector<std::string> argv;
  // Extra environment entries "KEY=VALUE". The environment is otherwise replaced by a minimal
  // one (PATH, HOME=/work, TMPDIR=/tmp, LANG=C.UTF-8, VAULT_CHANNEL_FD when there is a channel).
  std::vector<std::string> env;
  // Host directory mounted read-only (exec allowed, nosuid) at /code. Optional.
  std::string code_dir;
  // Host directories mounted read-only at the same path inside. Optional.
  std::vector<std::string> read_only_dirs;
  // The container type's: the host folder of the image's unpacked root (the whole read-only
  // file tree inside), and the working directory inside ("": /work). Set by its SetProgram;
  // the other types refuse them.
  std::string root_dir;
  std::string cwd;
  // Host descriptor that becomes fd 3 inside (normally one end of a socketpair). -1: none.
  // The caller keeps ownership; Spawn dups it.
  int channel_fd = -1;
  // Host descriptors for the program's stdin, stdout and stderr. -1: /dev/null inside.
  // Never pass a terminal: the sandbox relays nothing, so a tty here is the caller's risk.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  Limits limits;
  // A label for logs and cgroup names ([A-Za-z0-9._-], at most 64 characters). Optional.
  std::string name;
  // Called once when the sandbox has ended, with what Wait returns, on an internal thread that
  // watches every sandbox: it must return quickly (queue work elsewhere) and must not destroy
  // the handle. Optional.
  std::function<void(const ExitInfo&)> on_exit;
};

// An agent's code object as laid out on the host for a sandbox (agent/code_cache.h): its folder,
// mounted read-only at /code, and what kind of program it holds. Which kinds a type runs, and
// how, is the type's to say (Sandbox::SetProgram).
struct CodeObject {
  enum class Kind {
    kNative,  // an executable at /code/agent (ELF, or a script with its own #! line)
    kPython,  // a Python script at /code/agent.py
  };
  Kind kind = Kind::kNative;
  std::string dir;     // the host folder
  std::string digest;  // the code object's SHA-256, lowercase hex (a container's: its image's
                       // manifest digest)
  uint64_t size = 0;   // the code object's size in bytes
  // The spec's (command ...), for a container agent: the program and its arguments, in place of
  // the image's entrypoint and cmd. Empty: the image's.
  std::vector<std::string> command;
  // For kPython: the host folder of the Python SDK (mounted read-only, on PYTHONPATH).
  std::string python_sdk_dir;
};
// "native", "python".
const char* CodeKindName(CodeObject::Kind kind);

// Which limit ended the sandbox, when one did.
enum class LimitHit {
  kNone = 0,
  kMemory,    // the cgroup's OOM killer fired (or RLIMIT_AS refused memory and the program died)
  kCpuTime,   // RLIMIT_CPU or the cgroup's total CPU time
  kWallTime,  // the wall-time limit; the sandbox was killed
  kFileSize,  // SIGXFSZ: a write went past RLIMIT_FSIZE
};
const char* LimitHitName(LimitHit limit);

struct Usage {
  uint64_t memory_current_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  absl::Duration cpu_time;   // user + system, all processes
  uint64_t work_bytes = 0;   // bytes used in the work directory + /tmp
  uint64_t work_inodes = 0;  // inodes used there
  uint32_t processes = 0;    // live processes and threads
};

struct ExitInfo {
  bool exited = false;  // true: the program called exit; exit_code is valid
  int exit_code = -1;
  int signal = 0;  // the signal that ended the program, when !exited
  LimitHit limit = LimitHit::kNone;
  bool killed = false;       // ended by Kill()
  Usage final_usage;         // readings taken when the sandbox ended (peak memory, CPU time)
  absl::Duration wall_time;  // from spawn to end
};

// Describes how a sandbox ended in one line, e.g. "killed by signal 9 (memory limit)".
std::string DescribeExit(const ExitInfo& exit);

class SandboxHandle {
 public:
  virtual ~SandboxHandle() = default;  // kills the sandbox if it still runs
  // An identifier unique within the process (also the cgroup name).
  virtual const std::string& id() const = 0;
  // Freezes every process of the sandbox (their CPU time stops). FailedPrecondition when the
  // freezer fence is missing or the sandbox has ended.
  virtual absl::Status Pause() = 0;
  virtual absl::Status Resume() = 0;
  // The wall-time limit counts from now on (a process started ahead of its use, such as an
  // arriving agent's, started at its Offer, is charged from the moment it is adopted).
  virtual void RestartWallClock() = 0;
  // The wall-time limit becomes `limit`, counted from now: a sandbox started ahead of the program
  // it will serve (sandbox/wasm/warm_pool.h) waits under a long one and takes its program's here.
  virtual void SetWallTime(absl::Duration limit) = 0;
  // Kills every process of the sandbox. Idempotent; OK when it has already ended.
  virtual absl::Status Kill() = 0;
  // Waits up to `timeout` for the sandbox to end. DeadlineExceeded when it still runs.
  virtual absl::StatusOr<ExitInfo> Wait(absl::Duration timeout) = 0;
  // Current readings; after the end, the final readings.
  virtual absl::StatusOr<Usage> GetUsage() = 0;
  // Bytes used in the work directory only: one statfs, for a watchdog that polls many.
  virtual absl::StatusOr<uint64_t> GetWorkBytes() = 0;
  virtual bool paused() const = 0;
  // Reads a regular file of the work directory (path relative to /work, at most max_bytes)
  // the way the host must read anything an agent wrote: beneath the work directory only, no
  // symlinks, nothing outside, no other mounts (openat2 RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
  // RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV). InvalidArgument for an absolute path;
  // PermissionDenied for any symlink on the way or a ".." that would leave the work directory
  // (a ".." that stays inside is resolved); NotFound; FailedPrecondition for a non-regular file
  // (FIFOs are never opened); ResourceExhausted when larger than max_bytes. Works while the sandbox
  // runs and after it ended, until the handle is destroyed.
  virtual absl::StatusOr<std::string> ReadWorkFile(const std::string& relative_path,
                                                   size_t max_bytes) = 0;
  // Copies the work directory's regular files and folders into `host_dir` (created if
  // missing; it must be empty), with the same care: nothing is followed, symlinks, FIFOs,
  // sockets and devices are skipped and counted. Call it after the end (FailedPrecondition
  // while the sandbox runs, so that nothing changes under the copy).
  struct CopyStats {
    uint64_t files = 0;
    uint64_t directories = 0;
    uint64_t bytes = 0;
    uint64_t skipped = 0;  // symlinks and special files
  };
  virtual absl::StatusOr<CopyStats> CopyWorkDirTo(const std::string& host_dir) = 0;
  // Asks the program to capture its execution state soon (a wasm runner checkpoints at its next
  // fuel slice): SIGUSR1 to every process of the sandbox but its init. UNIMPLEMENTED where the
  // type cannot, FAILED_PRECONDITION once it has ended.
  virtual absl::Status Interrupt() {
    return absl::UnimplementedError("this sandbox cannot interrupt its program");
  }
};

class Sandbox {
 public:
  virtual ~Sandbox() = default;
  // The sandbox type: "posix", later "container", "scheme", "wasm" (registry.h).
  virtual const char* type() const = 0;
  // Whether its runner captures a running program's execution state (and restores it, from the
  // snapshot its effect log starts from).
  virtual bool can_snapshot() const { return false; }
  // Whether the programs it runs are deterministic given their host calls' answers (an
  // interpreter whose clock and randomness come only through the host), so that the runtime may
  // move and restart them by replaying their effect log (design §10).
  virtual bool replays() const { return false; }
  // How this type runs `code`: sets `spec`'s program, argv and code_dir, and adds what the
  // program needs (environment entries, read-only folders) to what `spec` has. INVALID_ARGUMENT,
  // naming what the type runs, for a code object it cannot run.
  virtual absl::Status SetProgram(const CodeObject& code, SandboxSpec* spec) const = 0;
  // Gives the program set by SetProgram the spec's `args` (after its name) and `env` entries
  // ("KEY=VALUE"). The default appends them to argv and env; a type whose programs take neither
  // refuses them (INVALID_ARGUMENT).
  virtual absl::Status SetArguments(const std::vector<std::string>& args,
                                    const std::vector<std::string>& env, SandboxSpec* spec) const;
  // The lock to hold shared around every clone the type makes on its own, outside Spawn (a pool
  // of sandboxes started ahead: sandbox/wasm/warm_pool.h): the runtime's, which keeps code files
  // from being open for writing while a sandbox is cloned (agent/code_cache.h). It makes none
  // before this is set; nullptr (the runtime stopping) ends them and waits for one in progress.
  virtual void SetCloneLock(absl::Mutex* mu) {}
  // Starts the program. Returns once the program has been executed inside every fence (or
  // with a status saying which setup step failed: InvalidArgument for a bad spec, NotFound
  // for a missing program or directory, Internal/FailedPrecondition for a kernel refusal).
  virtual absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec) = 0;
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_SANDBOX_H_
