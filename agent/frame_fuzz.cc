// libFuzzer target: arbitrary bytes as what an agent writes to its channel. The frame decoder
// and the host-call frame parser must never crash, hang or grow without bound: every input
// either yields frames no longer than the maximum (each parsed as a GuestFrame, whose
// spawn-child grants are validated as the proxy does) or is refused.
//
//   cmake -DVAULT_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ ...; build/agent/frame_fuzz
//   -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "agent/connection.h"
#include "capability/grant.h"
#include "vault/v1/hostcall.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr size_t kMaxFrame = 4096;
  vault::agent::FrameDecoder decoder(kMaxFrame);
  const char* p = reinterpret_cast<const char*>(data);
  // Feed in uneven pieces, as a socket would deliver them.
  size_t pos = 0;
  for (size_t piece = 1; pos < size; piece = piece * 3 % 17 + 1) {
    size_t n = std::min(piece, size - pos);
    if (!decoder.Feed(std::string(p + pos, n)).ok()) return 0;
    pos += n;
    while (std::optional<std::string> frame = decoder.Next()) {
      if (frame->size() > kMaxFrame) abort();
      vault::v1::GuestFrame g;
      if (!g.ParseFromString(*frame)) continue;
      if (g.has_request() && g.request().has_spawn_child()) {
        (void)vault::capability::ValidateGrants(g.request().spawn_child().spec().grants());
      }
    }
  }
  return 0;
}
