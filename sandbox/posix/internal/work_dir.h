// work_dir: the host's careful reading of a sandbox's work directory, through the O_PATH
// descriptor the child handed over (child.h, kStepSendWorkFd).
//
// Everything in there was written by the agent, so nothing is followed: paths resolve beneath
// the work directory only, with no symlinks, no magic links and no other mounts (openat2
// RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), and
// FIFOs, sockets and devices are never opened. The errors are those SandboxHandle documents
// for ReadWorkFile and CopyWorkDirTo (sandbox.h).
//
//   VAULT_ASSIGN_OR_RETURN(std::string report, ReadWorkFile(work_fd, "out/report.json", 1 << 20));
//   SandboxHandle::CopyStats stats;
//   VAULT_RETURN_IF_ERROR(CopyWorkDir(work_fd, "/var/lib/vault/results/a1", 64 << 20, stats));
//
// Thread safety: thread-safe; `work_fd` is only read through and must stay open during the
// call. CopyWorkDir should run once the sandbox has ended, so that nothing changes under it.
#ifndef VAULT_SANDBOX_POSIX_INTERNAL_WORK_DIR_H_
#define VAULT_SANDBOX_POSIX_INTERNAL_WORK_DIR_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox::internal {

// Reads the regular file `relative_path` of the work directory, at most `max_bytes`.
absl::StatusOr<std::string> ReadWorkFile(int work_fd, const std::string& relative_path,
                                         size_t max_bytes);

// Copies the work directory's regular files and folders into `host_dir` (created if missing;
// it must be empty), counting into `stats` what was copied and what was skipped. At most
// `max_bytes` are written (ResourceExhausted beyond): sparse files and hard links take little
// room in the sandbox's quota and could otherwise fill the host's disk when copied out.
absl::Status CopyWorkDir(int work_fd, const std::string& host_dir, uint64_t max_bytes,
                         SandboxHandle::CopyStats& stats);

}  // namespace vault::sandbox::internal

#endif  // VAULT_SANDBOX_POSIX_INTERNAL_WORK_DIR_H_
