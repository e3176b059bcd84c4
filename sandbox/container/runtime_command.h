// sandbox/container/runtime_command: runs the OCI runtime's command line (runc) and waits for it,
// with a deadline. The child gets exactly the descriptors asked for (`fds`: inside fd <- host fd,
// every other descriptor closed) and a minimal environment.
//
//   VAULT_ASSIGN_OR_RETURN(RuntimeResult r, RunRuntime({"/usr/sbin/runc", "start", id}, {},
//                                                      absl::Seconds(10)));
//   if (r.exit_code != 0) ... r.output ...
//
// Thread-safety: thread-safe (posix_spawn; every descriptor of the vault is close-on-exec).
#ifndef VAULT_SANDBOX_CONTAINER_RUNTIME_COMMAND_H_
#define VAULT_SANDBOX_CONTAINER_RUNTIME_COMMAND_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace vault::sandbox {

struct RuntimeResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout and stderr, when not given in `fds` (at most 64 KiB kept)
};

// Runs `argv` (argv[0] an absolute path). `fds` maps descriptors inside the child to the
// caller's; fds 0-2 that are not mapped are /dev/null (stdin) and a pipe collected into
// `output` (stdout, stderr). DEADLINE_EXCEEDED, after killing it, when it runs past `timeout`.
absl::StatusOr<RuntimeResult> RunRuntime(const std::vector<std::string>& argv,
                                         const std::vector<std::pair<int, int>>& fds,
                                         absl::Duration timeout);

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_CONTAINER_RUNTIME_COMMAND_H_
