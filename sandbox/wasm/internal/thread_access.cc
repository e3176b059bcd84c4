#include "sandbox/wasm/internal/thread_access.h"

// (The explicit instantiations below must stand in one translation unit only: this one.)
namespace vault::sandbox::wasm::internal {

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

std::vector<wi::Frame>& Frames(wi::Thread& t) { return t.*MemberOf(FramesTag{}); }
std::vector<wi::Value>& Values(wi::Thread& t) { return t.*MemberOf(ValuesTag{}); }
std::vector<uint32_t>& Refs(wi::Thread& t) { return t.*MemberOf(RefsTag{}); }
wi::Instance*& Inst(wi::Thread& t) { return t.*MemberOf(InstTag{}); }
wi::Module*& Mod(wi::Thread& t) { return t.*MemberOf(ModTag{}); }

}  // namespace vault::sandbox::wasm::internal
