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

template <typename Tag, typename Tag::type kMember>
struct Expose {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnon-template-friend"
#endif
  friend typename Tag::type MemberOf(Tag) { return kMember; }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
};

struct FramesTag {
  using type = std::vector<wi::Frame> wi::Thread::*;
  friend type MemberOf(FramesTag);
};
struct ValuesTag {
  using type = std::vector<wi::Value> wi::Thread::*;
  friend type MemberOf(ValuesTag);
};
struct RefsTag {
  using type = std::vector<uint32_t> wi::Thread::*;
  friend type MemberOf(RefsTag);
};
struct InstTag {
  using type = wi::Instance* wi::Thread::*;
  friend type MemberOf(InstTag);
};
struct ModTag {
  using type = wi::Module* wi::Thread::*;
  friend type MemberOf(ModTag);
};

template struct Expose<FramesTag, &wi::Thread::frames_>;
template struct Expose<ValuesTag, &wi::Thread::values_>;
template struct Expose<RefsTag, &wi::Thread::refs_>;
template struct Expose<InstTag, &wi::Thread::inst_>;
template struct Expose<ModTag, &wi::Thread::mod_>;

inline std::vector<wi::Frame>& Frames(wi::Thread& t) { return t.*MemberOf(FramesTag{}); }
inline std::vector<wi::Value>& Values(wi::Thread& t) { return t.*MemberOf(ValuesTag{}); }
inline std::vector<uint32_t>& Refs(wi::Thread& t) { return t.*MemberOf(RefsTag{}); }
inline wi::Instance*& Inst(wi::Thread& t) { return t.*MemberOf(InstTag{}); }
inline wi::Module*& Mod(wi::Thread& t) { return t.*MemberOf(ModTag{}); }

}  // namespace vault::sandbox::wasm::internal

#endif  // VAULT_SANDBOX_WASM_INTERNAL_THREAD_ACCESS_H_
