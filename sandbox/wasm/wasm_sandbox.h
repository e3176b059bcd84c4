// sandbox/wasm: the "wasm" sandbox type. A wasm agent's module runs in vault-wasm-runner
// (runner_main.cc: wabt's interpreter through engine.h, the vault's host imports, fuel, snapshots),
// and the runner runs as the program of a posix sandbox, so every posix fence holds around the
// interpreter: the interpreter is defence in depth, not the only wall (docs/wasm.md).
//
// A wasm program's clock and randomness come only through host calls, so it replays (its effect
// log answers its calls again after a hop or restart); and its runner captures its whole execution
// state at a checkpoint or migrate, so its log starts again from that snapshot each time: it goes
// on at the next instruction wherever it is restored (strong mobility).
//
// Sandboxes started ahead of their agents (warm_pool.h) take most of the start off an agent's
// path: Spawn hands a warm one the agent's module and channel when one of the same limits waits.
//
//   ASSIGN_OR_RETURN(auto wasm, WasmSandbox::Create(posix_sandbox, "", stage_root, 2));
//   types.Add(wasm.get());
//
// Thread safety: as the posix sandbox it wraps.
#ifndef VAULT_SANDBOX_WASM_WASM_SANDBOX_H_
#define VAULT_SANDBOX_WASM_WASM_SANDBOX_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/runner_files.h"
#include "sandbox/sandbox.h"
#include "sandbox/wasm/warm_pool.h"

namespace vault::sandbox {

class WasmSandbox : public RunnerSandbox {
 public:
  // `posix` runs the runner (not owned; it outlives this). `runner_dir` holds vault-wasm-runner;
  // "" looks in $VAULT_WASM_RUNNER_DIR, then beside the executable (runner_files.h). The runner
  // is staged under `stage_root` (runner_files.h). Up to `warm_pool` sandboxes are kept started
  // ahead (once SetCloneLock is given).
  static absl::StatusOr<std::unique_ptr<WasmSandbox>> Create(Sandbox* posix,
                                                             const std::string& runner_dir,
                                                             const std::string& stage_root,
                                                             size_t warm_pool = 0);

  const char* type() const override { return "wasm"; }
  bool can_snapshot() const override { return true; }
  bool replays() const override { return true; }
  void SetCloneLock(absl::Mutex* mu) override { pool_->SetCloneLock(mu); }
  // A warm sandbox when one of spec's limits waits (its module read from spec's code folder),
  // else a cold start.
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec& spec) override;
  // Warm sandboxes waiting, and the starts warm and cold so far.
  struct Starts {
    uint64_t ready = 0;
    uint64_t warm = 0;
    uint64_t cold = 0;
  };
  Starts starts() const {
    return {.ready = pool_->idle(), .warm = warm_starts_.load(), .cold = cold_starts_.load()};
  }
  // The code object is the agent's module (the wasm binary format), at /code/agent.
  absl::Status SetProgram(const CodeObject& code, SandboxSpec* spec) const override;
  // The module's WASI args and environ (not the runner's own environment).
  absl::Status SetArguments(const std::vector<std::string>& args,
                            const std::vector<std::string>& env, SandboxSpec* spec) const override;

 private:
  WasmSandbox(Sandbox* posix, StagedRunner staged, size_t warm_pool);

  std::unique_ptr<wasm::WarmPool> pool_;
  std::atomic<uint64_t> warm_starts_{0};
  std::atomic<uint64_t> cold_starts_{0};
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_WASM_WASM_SANDBOX_H_
