// sandbox/wasm/runner_host: what vault-wasm-runner offers a module: the RFC's `library` host
// imports (library_imports.cc) and a WASI preview1 subset (wasi_imports.cc), each made of host
// calls over the C++ SDK's channel, so that every one goes through the vault's capability proxy
// and audit as a native agent's calls do. The ABI is sdk/wasm/vault_agent.h's.
//
// State the runner keeps besides the interpreter (WASI descriptors, output not yet a whole line, a
// message too large for the buffer it was asked into) lives in a WasmHostState, saved into each
// snapshot and loaded from it.
//
//   RunnerHost host(agent, {"agent", "--n", "3"}, {"LANG=C"});
//   ASSIGN_OR_RETURN(auto engine, Engine::Load(module, limits, host.Resolver()));
//
// Thread safety: none; the runner is single-threaded.
#ifndef VAULT_SANDBOX_WASM_RUNNER_HOST_H_
#define VAULT_SANDBOX_WASM_RUNNER_HOST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/wasm/engine.h"
#include "sdk/cpp/vault_agent.h"
#include "vault/v1/wasm.pb.h"

namespace vault::sandbox::wasm {

class RunnerHost {
 public:
  // `agent` may be given later (set_agent), before the module's first call.
  RunnerHost(vault::sdk::Agent* agent, std::vector<std::string> args, std::vector<std::string> env);
  void set_agent(vault::sdk::Agent* agent) { agent_ = agent; }

  // The imports: module "library" and module "wasi_snapshot_preview1".
  ImportResolver Resolver();

  // The snapshot bytes the engine was restored from: a checkpoint or migrate it was taken in is
  // made again with exactly these (so that the vault's log matches it).
  void set_restored_from(std::string snapshot) { restored_from_ = std::move(snapshot); }
  absl::Status LoadState(absl::string_view host_state);
  // Sends what stdout and stderr hold that is not yet a whole line.
  void FlushOutput();

  // Captures the run inside the current host call (its host state included), serialized.
  absl::StatusOr<std::string> CaptureHere(Engine& engine);
  // The checkpoint and migrate made with a snapshot: `snapshot` is the state; a resumed call sends
  // only the call itself (its snapshot is in the vault already).
  // `requested`: the vault asked for it (an interrupt), the program did not call it.
  absl::Status CheckpointWith(const std::string& snapshot, bool resumed, bool requested = false);
  absl::Status MigrateWith(absl::string_view vault, const std::string& snapshot, bool resumed);

  vault::sdk::Agent& agent() { return *agent_; }
  const std::vector<std::string>& args() const { return args_; }
  const std::vector<std::string>& env() const { return env_; }
  vault::v1::WasmHostState& state() { return state_; }
  const std::string& restored_from() const { return restored_from_; }
  // Appends `bytes` written to fd 1 or 2; each whole line is a log line.
  absl::Status Output(int fd, absl::string_view bytes);
  // The size of a regular file of the vault's tree (read_file); FAILED_PRECONDITION for a
  // directory.
  absl::StatusOr<uint64_t> FileSizeOf(const std::string& path);

 private:
  vault::sdk::Agent* agent_;
  const std::vector<std::string> args_;
  const std::vector<std::string> env_;
  vault::v1::WasmHostState state_;
  std::string restored_from_;
};

// The google.rpc code of a status, as a library import returns it (0: OK).
uint32_t CodeOf(const absl::Status& status);
// Whether `bytes` are UTF-8 (a host call's string fields must be); and `bytes` made so, each byte
// that does not begin a valid sequence written as \xNN (for log lines).
bool IsUtf8(absl::string_view bytes);
std::string Utf8Line(absl::string_view bytes);

// The host functions of each module (library_imports.cc, wasi_imports.cc).
absl::StatusOr<HostFunction> LibraryImport(RunnerHost& host, absl::string_view name);
absl::StatusOr<HostFunction> WasiImport(RunnerHost& host, absl::string_view name);

}  // namespace vault::sandbox::wasm

#endif  // VAULT_SANDBOX_WASM_RUNNER_HOST_H_
