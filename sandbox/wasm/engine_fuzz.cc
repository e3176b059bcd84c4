// libFuzzer target: arbitrary bytes as a wasm module an agent's spec names. Loading must never
// crash or hang; a module that loads is run with little fuel (its imports, if any, are refused at
// load), and a run that stops for fuel is captured, restored into a fresh engine and run again:
// whatever the module, the engine stays within its limits and its snapshots restore.
//
//   cmake -DVAULT_BUILD_FUZZ=ON -DVAULT_SANITIZE=address,undefined -DCMAKE_CXX_COMPILER=clang++
//   ninja engine_fuzz && sandbox/wasm/engine_fuzz -max_total_time=600 corpus/
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "sandbox/wasm/engine.h"

namespace {

using vault::sandbox::wasm::Engine;
using vault::sandbox::wasm::EngineLimits;
using vault::sandbox::wasm::HostFunction;

absl::StatusOr<HostFunction> NoImports(absl::string_view, absl::string_view) {
  return absl::NotFoundError("the fuzzer offers none");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  EngineLimits limits;
  limits.max_memory_pages = 16;
  limits.max_table_elements = 1024;
  limits.max_call_depth = 256;
  limits.max_stack_values = 1 << 16;
  limits.fuel = 20000;
  limits.slice = 1000;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Load(bytes, limits, &NoImports);
  if (!engine.ok()) return 0;
  if (!(*engine)->Start("_start").ok()) return 0;
  const Engine::Outcome first = (*engine)->Run();
  if (first.kind != Engine::Outcome::kFuelExhausted) return 0;
  absl::StatusOr<vault::v1::WasmSnapshot> snap = (*engine)->Capture();
  if (!snap.ok()) return 0;  // (a reference the snapshot cannot name: refused, not crashed)
  limits.fuel = 40000;
  absl::StatusOr<std::unique_ptr<Engine>> again = Engine::Load(bytes, limits, &NoImports);
  if (!again.ok()) abort();                     // it loaded once
  if (!(*again)->Restore(*snap).ok()) abort();  // a snapshot of this very module
  (void)(*again)->Run();
  return 0;
}
