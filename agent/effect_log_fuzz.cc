// libFuzzer target: arbitrary bytes as an effect log handed over by a peer (a hop's state). Read
// must never crash or hang, and whatever it accepts must be a log it can write out again whose
// nodes read back the same (trusting every signer: the checks before the signature are the ones
// exercised; the signature's own is a one-line verify).
//
//   cmake -DVAULT_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ ...; build/agent/effect_log_fuzz
//   -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/effect_log.h"
#include "vault/v1/hostcall.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto any = [](absl::string_view) { return true; };
  // As given, and behind the header (most inputs would stop at the magic otherwise).
  // The owner the input claims (so that the checks past it are reached).
  vault::v1::EffectLog claimed;
  (void)claimed.ParseFromString(bytes);
  const vault::agent::EffectLog::Owner owner{claimed.agent_id(), claimed.code_sha256(),
                                             claimed.principal()};
  for (const std::string& object : {bytes, absl::StrCat(vault::agent::kEffectLogMagic, bytes)}) {
    absl::StatusOr<vault::agent::EffectLog> log = vault::agent::EffectLog::Read(object, owner, any);
    if (!log.ok()) continue;
    for (size_t i = 0; i < log->size(); ++i) {
      if (log->node(i).seq() != i) abort();
    }
  }
  return 0;
}
