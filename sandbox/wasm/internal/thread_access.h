// The parts of wabt's interpreter thread that a snapshot reads and writes: its call stack, value
// stack, reference slots and current instance. wabt 1.0.32 keeps them private and has no API to
// run a call in slices or to capture it, so they are reached the one way standard C++ allows
// without changing wabt: a pointer to a private member named in an explicit template
// instantiation (where access is not checked), handed out by a friend function.
#ifndef VAULT_SANDBOX_WASM_INTERNAL_THREAD_ACCESS_H_
#define VAULT_SANDBOX_WASM_INTERNAL_THREAD_ACCESS_H_

#include <cstdint>
#include <vector>

#include "wabt/interp/interp.h"

namespace vault::sandbox::wasm::internal {

namespace wi = wabt::interp;

std::vector<wi::Frame>& Frames(wi::Thread& t);
std::vector<wi::Value>& Values(wi::Thread& t);
std::vector<uint32_t>& Refs(wi::Thread& t);
wi::Instance*& Inst(wi::Thread& t);
wi::Module*& Mod(wi::Thread& t);

}  // namespace vault::sandbox::wasm::internal

#endif  // VAULT_SANDBOX_WASM_INTERNAL_THREAD_ACCESS_H_
