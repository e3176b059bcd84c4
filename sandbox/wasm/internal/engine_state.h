// The engine's state (engine.cc runs it, engine_snapshot.cc captures and restores it): wabt's
// store, module, instance and thread, the host functions, and what a run carries between slices.
// Private to sandbox/wasm.
#ifndef VAULT_SANDBOX_WASM_INTERNAL_ENGINE_STATE_H_
#define VAULT_SANDBOX_WASM_INTERNAL_ENGINE_STATE_H_

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "sandbox/wasm/engine.h"
#include "sandbox/wasm/internal/thread_access.h"
#include "wabt/feature.h"
#include "wabt/interp/interp.h"

namespace vault::sandbox::wasm {

namespace wi = wabt::interp;

struct Engine::State {
  EngineLimits limits;
  wabt::Features features;
  wi::Store store{features};
  wi::Module::Ptr module;
  wi::Instance::Ptr instance;
  std::unique_ptr<wi::Thread> thread;
  std::vector<HostFunction> imports;  // by function import index
  std::vector<wi::HostFunc::Ptr> host_funcs;
  std::optional<uint32_t> start_function;  // the module's start, run as the program's first part
  uint32_t imported_functions = 0;
  std::unordered_map<size_t, uint32_t> function_of_ref;  // Ref.index → function index
  bool prepared = false;                                 // Start or Restore done
  std::string next_entry;  // to call when the frames run out (the start function ran first)
  // The host call running now (its import and arguments), for Capture.
  std::optional<std::pair<uint32_t, std::vector<uint64_t>>> in_call;
  // A host call a restored snapshot was taken in, to make again first.
  std::optional<std::pair<uint32_t, std::vector<uint64_t>>> pending;
  // How a host callback ended the program.
  std::optional<absl::Status> host_end;

  std::vector<wi::Frame>& frames() { return internal::Frames(*thread); }
  std::vector<wi::Value>& values() { return internal::Values(*thread); }
  std::vector<uint32_t>& refs() { return internal::Refs(*thread); }

  wi::Memory* memory() {
    if (instance->memories().empty()) return nullptr;
    return store.UnsafeGet<wi::Memory>(instance->memories()[0]).get();
  }
  std::optional<uint32_t> FunctionOf(wi::Ref ref) const {
    auto it = function_of_ref.find(ref.index);
    if (it == function_of_ref.end()) return std::nullopt;
    return it->second;
  }
  absl::Status PushCall(uint32_t function) {
    wi::Ref ref = instance->funcs()[function];
    wi::DefinedFunc::Ptr f{store, ref};
    if (!f->type().params.empty()) {
      return absl::InvalidArgumentError("the entry function must take no parameters");
    }
    internal::Inst(*thread) = instance.get();
    internal::Mod(*thread) = module.get();
    frames().emplace_back(ref, static_cast<uint32_t>(values().size()), 0, f->desc().code_offset,
                          instance.get(), module.get());
    return absl::OkStatus();
  }
};

}  // namespace vault::sandbox::wasm

#endif  // VAULT_SANDBOX_WASM_INTERNAL_ENGINE_STATE_H_
