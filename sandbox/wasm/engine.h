// sandbox/wasm/engine: one WebAssembly module run by wabt's interpreter with the vault's limits,
// and its whole execution state captured and restored (strong mobility, docs/wasm.md).
//
// Loading checks the module before anything of it runs: its size, that it parses and validates,
// that every import is a function the host offers with the same type, that its memory and table
// fit the limits (their maximum is lowered to the limits, so that a memory.grow past them fails
// as the wasm specification says: -1), and that no function declares absurdly many locals. A start
// function is run as the first part of the program, under the same fuel, not during loading.
//
// Execution goes in slices of `slice` instructions; fuel is charged a slice at a time (so an
// agent may run up to one slice past its fuel, and each restore charges up to one slice again).
// Between slices, and inside a host call, Capture takes the state: linear memory (its non-zero
// 4 KiB chunks), globals, tables, the call stack (function index and code offset per frame), the
// value stack, dropped segments and the fuel used. Restore puts it back into a freshly
// instantiated module; a snapshot taken inside a host call makes that call again on Run (its
// import's callback is called with `resumed` set) and goes on with its results.
//
//   ASSIGN_OR_RETURN(auto engine, Engine::Load(bytes, limits, resolver));
//   RETURN_IF_ERROR(engine->Start("_start"));           // or engine->Restore(snapshot)
//   Engine::Outcome outcome = engine->Run();            // returned, trapped, out of fuel, exited
//
// Thread safety: none. One engine per runner, used from its one thread; host callbacks run on it.
#ifndef VAULT_SANDBOX_WASM_ENGINE_H_
#define VAULT_SANDBOX_WASM_ENGINE_H_

#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vault/v1/wasm.pb.h"

namespace vault::sandbox::wasm {

// The snapshot format this engine writes and reads.
inline constexpr absl::string_view kSnapshotFormat = "vault-wasm-snapshot/1 wabt-1.0.32";

struct EngineLimits {
  uint64_t max_module_bytes = 16u << 20;
  uint32_t max_memory_pages = 1024;  // 64 MiB of linear memory
  uint32_t max_table_elements = 65536;
  uint32_t max_call_depth = 4096;        // frames
  uint64_t max_stack_values = 1u << 20;  // values on the value stack (16 bytes each)
  uint32_t max_function_locals = 50000;
  uint64_t fuel = 0;  // instructions; 0: no fuel limit
  uint32_t slice = 10000;
};

// A wasm value as the host sees it: the type and its bits (i32/f32 in the low 32).
enum class ValType { kI32, kI64, kF32, kF64 };
struct HostFunctionType {
  std::vector<ValType> params;
  std::vector<ValType> results;
};

class Engine;

// A host call's context: its arguments, where its results go (as many as its type has, each the
// value's bits), and whether it is being made again after a restore (the snapshot was taken in
// it). A callback returns OK, or ends the program: Engine::Exit(...) for an exit, or any other
// status for a trap with that message.
struct HostCall {
  Engine& engine;
  const std::vector<uint64_t>& args;
  std::vector<uint64_t>& results;
  bool resumed;
};
using HostCallback = std::function<absl::Status(HostCall&)>;

struct HostFunction {
  HostFunctionType type;
  HostCallback callback;
};

// Gives the host function for an import, or NOT_FOUND (the vault does not offer it).
using ImportResolver =
    std::function<absl::StatusOr<HostFunction>(absl::string_view module, absl::string_view name)>;

class Engine {
 public:
  struct Outcome {
    enum Kind {
      kReturned,       // the entry function returned
      kExited,         // a host call ended the program (Exit)
      kFuelExhausted,  // the fuel ran out
      kTrapped,        // a trap: `message` says which
    } kind = kReturned;
    int exit_code = 0;    // kExited
    std::string message;  // kTrapped: "out of bounds memory access ...", "stack exhausted"
  };

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // INVALID_ARGUMENT for a malformed or invalid module, an import the resolver does not give
  // (or gives with another type), a memory, table or function past the limits; the message says
  // which and why.
  static absl::StatusOr<std::unique_ptr<Engine>> Load(absl::string_view module_bytes,
                                                      const EngineLimits& limits,
                                                      const ImportResolver& resolver);

  // Prepares a fresh run of the exported function `entry` (no parameters): the module's start
  // function first, when it has one. NOT_FOUND when there is no such export.
  absl::Status Start(absl::string_view entry);
  // Prepares the run a snapshot was taken of. INVALID_ARGUMENT for a snapshot of another module
  // or format, or one that does not fit this module (and FAILED_PRECONDITION after Start).
  absl::Status Restore(const vault::v1::WasmSnapshot& snapshot);
  // Runs until the program ends one way or another.
  Outcome Run();

  // The state now, taken between slices or from inside a host callback (the call then pending:
  // made again by Run after a Restore). FAILED_PRECONDITION when there is nothing running.
  absl::StatusOr<vault::v1::WasmSnapshot> Capture();

  // For host callbacks: linear memory 0 (empty when the module has none). A range outside it is
  // INVALID_ARGUMENT ("out of bounds").
  absl::StatusOr<absl::string_view> Read(uint64_t offset, uint64_t length) const;
  absl::Status Write(uint64_t offset, absl::string_view bytes);
  uint64_t memory_bytes() const;
  uint64_t fuel_used() const { return fuel_used_; }
  const std::string& module_sha256() const { return module_sha256_; }
  // The runner's own state, kept in snapshots beside the interpreter's.
  std::string& host_state() { return host_state_; }

  // A status that, returned by a host callback, ends the program with this exit code.
  static absl::Status Exit(int code);

  // Between slices, when *flag is set (a signal handler sets it), clears it and calls `handler`
  // (a runner's capture on request; Capture there has no call pending). A status other than OK
  // ends the program as a host callback's would.
  void SetInterrupt(volatile sig_atomic_t* flag, std::function<absl::Status(Engine&)> handler) {
    interrupt_flag_ = flag;
    interrupt_ = std::move(handler);
  }

 private:
  struct State;
  Engine();
  absl::Status RunPending(Outcome* outcome);
  absl::Status RunHost(size_t import_index, const std::vector<uint64_t>& args, bool resumed,
                       std::vector<uint64_t>* results);

  std::unique_ptr<State> state_;
  std::string module_sha256_;
  uint64_t fuel_used_ = 0;
  std::string host_state_;
  volatile sig_atomic_t* interrupt_flag_ = nullptr;
  std::function<absl::Status(Engine&)> interrupt_;
};

}  // namespace vault::sandbox::wasm

#endif  // VAULT_SANDBOX_WASM_ENGINE_H_
