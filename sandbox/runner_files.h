// sandbox/runner_files: the interpreting sandbox types (scheme, wasm): RunnerSandbox, which runs a
// runner as the program of a posix sandbox; where a type finds its runner's files, and the copy
// of them its sandboxes see. The build tree may live under /work, which a sandbox keeps for
// itself, and a sandbox's host ids must reach the files: so they are copied into a folder under a
// staging root, named by their content (`wasm-<16 hex digits of SHA-256>`, 0711, the files
// world-readable, executables 0755), shared by every vault of the machine that runs the same
// build. Each vault holds a lease on the folder it uses (common/folder_lease.h); staging removes
// the folders of other builds that no vault leases, so restarts, upgrades and vaults killed with
// SIGKILL leave nothing behind.
//
//   ASSIGN_OR_RETURN(StagedRunner staged, StageRunner({.files = {"vault-wasm-runner"},
//                                                      .env = "VAULT_WASM_RUNNER_DIR",
//                                                      .folder = "wasm"}, "", stage_root));
//
// Thread safety: a plain function; concurrent calls (from any process) may share a staging root.
#ifndef VAULT_SANDBOX_RUNNER_FILES_H_
#define VAULT_SANDBOX_RUNNER_FILES_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/folder_lease.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

struct RunnerFiles {
  // The files (the first is the runner executable; the others are read-only data).
  std::vector<std::string> files;
  // The environment variable naming the folder, when no folder is given.
  std::string env;
  // The folder's name under sandbox/ in the build tree (and libexec/vault/ when installed).
  std::string folder;
};

// Looks in `runner_dir` when given; else in $env; else beside the executable
// (../sandbox/FOLDER, ../../sandbox/FOLDER, ../libexec/vault/FOLDER). Copies the files into
// `stage_root`/FOLDER-HASH (unless that folder is there already) and returns it with a lease on
// it. NOT_FOUND naming the places looked at.
struct StagedRunner {
  std::string dir;
  common::FolderLease lease;  // held for as long as sandboxes may run the files
};
absl::StatusOr<StagedRunner> StageRunner(const RunnerFiles& runner, const std::string& runner_dir,
                                         const std::string& stage_root);

// A sandbox type whose program is an interpreter's runner (scheme, wasm), run as the program of a
// posix sandbox: every posix fence holds around the interpreter.
class RunnerSandbox : public Sandbox {
 public:
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec) override {
    return posix_->Spawn(spec);
  }
  // Where the runner's staged files are (what its sandboxes see).
  const std::string& runner_dir() const { return runner_dir_; }

 protected:
  RunnerSandbox(Sandbox* posix, StagedRunner staged)
      : posix_(posix), runner_dir_(std::move(staged.dir)), lease_(std::move(staged.lease)) {}
  Sandbox* const posix_;  // not owned; it outlives this
  const std::string runner_dir_;

 private:
  common::FolderLease lease_;
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_RUNNER_FILES_H_
