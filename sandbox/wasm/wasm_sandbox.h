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
//   ASSIGN_OR_RETURN(auto wasm, WasmSandbox::Create(posix_sandbox, "", stage_root));
//   types.Add(wasm.get());
//
// Thread safety: as the posix sandbox it wraps.
#ifndef VAULT_SANDBOX_WASM_WASM_SANDBOX_H_
#define VAULT_SANDBOX_WASM_WASM_SANDBOX_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/runner_files.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

class WasmSandbox : public RunnerSandbox {
 public:
  // `posix` runs the runner (not owned; it outlives this). `runner_dir` holds vault-wasm-runner;
  // "" looks in $VAULT_WASM_RUNNER_DIR, then beside the executable (runner_files.h). The runner
  // is staged under `stage_root` (runner_files.h).
  static absl::StatusOr<std::unique_ptr<WasmSandbox>> Create(Sandbox* posix,
                                                             const std::string& runner_dir,
                                                             const std::string& stage_root);

  const char* type() const override { return "wasm"; }
  bool can_snapshot() const override { return true; }
  bool replays() const override { return true; }
  // The code object is the agent's module (the wasm binary format), at /code/agent.
  absl::Status SetProgram(const CodeObject& code, SandboxSpec* spec) const override;
  // The module's WASI args and environ (not the runner's own environment).
  absl::Status SetArguments(const std::vector<std::string>& args,
                            const std::vector<std::string>& env, SandboxSpec* spec) const override;

 private:
  WasmSandbox(Sandbox* posix, StagedRunner staged) : RunnerSandbox(posix, std::move(staged)) {}
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_WASM_WASM_SANDBOX_H_
