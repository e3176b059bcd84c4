// Host calls that stand in for a sandbox's own environment: clock, random. An interpreter whose
// programs must replay (wasm, scheme) has no clock or randomness of its own; these answers are
// logged like every other, so a replay sees the same time and the same bytes.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "agent/internal/host_call.h"
#include "common/random.h"

namespace vault::agent::host_calls {

inline constexpr uint32_t kMaxRandomBytes = 4096;

void Clock(HostCallContext& ctx) {
  ctx.call.response.mutable_clock()->set_unix_nanos(absl::ToUnixNanos(absl::Now()));
}

void Random(HostCallContext& ctx) {
  HostCall& c = ctx.call;
  const uint32_t n = ctx.request.random().bytes();
  if (n > kMaxRandomBytes) {
    c.status = absl::InvalidArgumentError(
        absl::StrCat("random asks for ", n, " bytes; at most ", kMaxRandomBytes, " a call"));
    return;
  }
  absl::StatusOr<std::string> bytes = common::RandomBytes(n);
  if (!bytes.ok()) {
    c.status = bytes.status();
    return;
  }
  c.bytes = n;
  c.response.mutable_random()->set_data(*std::move(bytes));
}

}  // namespace vault::agent::host_calls
