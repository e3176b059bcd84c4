// sandbox/container/scratch: a container agent's writable storage, a tmpfs the vault mounts on the
// host (so that it outlives the container: the vault reads the agent's work folder after the
// end, as for posix agents), holding work/ and tmp/, which the container's runtime config binds
// at /work and /tmp (oci_config.h).
//
//   VAULT_ASSIGN_OR_RETURN(Scratch s, MountScratch("/var/lib/vault/containers/scratch/c-1",
//                                                  limits, host_id));
//   ... runc create (its bind mounts take the folders) ...
//   s.Detach();  // off the host's mount table; s.work_fd keeps the tmpfs alive
//
// Thread-safety: plain functions; a Scratch is owned by one thread at a time.
#ifndef VAULT_SANDBOX_CONTAINER_SCRATCH_H_
#define VAULT_SANDBOX_CONTAINER_SCRATCH_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/unique_fd.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

struct Scratch {
  Scratch() = default;
  Scratch(Scratch&& other) noexcept { *this = std::move(other); }
  Scratch& operator=(Scratch&& other) noexcept;
  ~Scratch() { Detach(); }
  // Unmounts the tmpfs from the host (lazily: the container's binds and work_fd keep it) and
  // removes its mount point. Idempotent.
  void Detach();

  std::string path;          // the mount point on the host
  common::UniqueFd work_fd;  // O_PATH of work/ (what ReadWorkFile and CopyWorkDirTo read)
};

// Mounts a tmpfs of limits.storage_bytes and storage_inodes at `path` (made, 0700, its parent
// must exist), mode 0700 and owned by `host_id`, with work/ and tmp/ in it (0700, `host_id`'s).
// Nothing is left mounted or made on failure.
absl::StatusOr<Scratch> MountScratch(const std::string& path, const Limits& limits,
                                     uint32_t host_id);

// Unmounts and removes what a previous process left under `parent` (each entry a mount point of
// MountScratch). Returns how many it removed.
int RemoveStaleScratch(const std::string& parent);

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_CONTAINER_SCRATCH_H_
