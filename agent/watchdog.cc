// The watchdog: heartbeats, storage, unfinished frames, receive timeouts, exit grace.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "common/file_util.h"
#include "common/log_fields.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

using vault::v1::AgentRecord;
using vault::v1::AgentState;

// ---------------------------------------------------------------------------------------------
// The watchdog: heartbeats, storage, unfinished frames, receive timeouts, exit grace.

void AgentRuntime::Impl::WatchdogLoop() {
  uint64_t tick = 0;
  const absl::Duration read_timeout = absl::Milliseconds(options_.config.read_timeout_ms());
  // Every kTick, until Stop.
  while (!watchdog_stop_.WaitForNotificationWithTimeout(kTick)) {
    ++tick;
    std::vector<std::shared_ptr<LiveAgent>> agents;
    {
      absl::MutexLock lock(&mu_);
      agents.reserve(agents_.size());
      for (auto& [id, live] : agents_) agents.push_back(live);
    }
    const absl::Time now = absl::Now();
    for (const std::shared_ptr<LiveAgent>& live : agents) {
      EndCause cause = EndCause::kNone;
      std::string reason;
      bool expire_receive = false;
      std::shared_ptr<AgentConnection> conn;
      {
        absl::MutexLock lock(&live->mu);
        if (!live->running) continue;
        conn = live->conn;
        bool paused = live->record.state() == vault::v1::PAUSED ||
                      live->record.state() == vault::v1::MIGRATING;
        if (live->pending_receive.has_value() && now >= live->pending_receive->deadline) {
          expire_receive = true;
        }
        uint32_t hb = live->record.spec().heartbeat_timeout_ms();
        if (paused) live->last_heartbeat = now;  // a frozen agent cannot beat
        if (live->exit_requested && now >= live->exit_deadline) {
          cause = EndCause::kExitCall;
          reason = live->end_reason;
        } else if (!live->exit_requested && now - live->channel_closed_at > absl::Seconds(1)) {
          cause = EndCause::kProtocol;
          reason = "channel: the agent closed its channel and did not exit";
        } else if (hb > 0 && now - live->last_heartbeat > absl::Milliseconds(hb)) {
          cause = EndCause::kWatchdog;
          reason = absl::StrCat("heartbeat limit: none for ",
                                absl::ToInt64Milliseconds(now - live->last_heartbeat),
                                " ms (limit ", hb, " ms)");
        } else if (conn != nullptr && !paused && now - conn->partial_since() > read_timeout) {
          cause = EndCause::kProtocol;
          reason = absl::StrCat("a frame did not arrive whole within ",
                                options_.config.read_timeout_ms(), " ms");
        } else if (tick % 20 == 0 && live->handle != nullptr) {
          absl::StatusOr<uint64_t> work_bytes = live->handle->GetWorkBytes();
          sandbox::Limits limits = LimitsFor(live->record.constraints(), options_.config);
          if (work_bytes.ok() && *work_bytes >= limits.storage_bytes) {
            cause = EndCause::kWatchdog;
            reason = absl::StrCat("storage limit: ", *work_bytes, " bytes used of ",
                                  limits.storage_bytes);
          }
        }
      }
      if (expire_receive) ExpireReceive(live);
      if (conn != nullptr && conn->wants_write()) (void)conn->Flush();
      if (cause == EndCause::kExitCall) {
        absl::MutexLock lock(&live->mu);
        if (live->handle != nullptr) (void)live->handle->Kill();
      } else if (cause != EndCause::kNone) {
        End(live, cause, reason);
      }
    }
    // Forget control nonces older than the window.
    if (tick % 400 == 0) {
      absl::MutexLock lock(&mu_);
      absl::erase_if(nonces_, [&](const auto& kv) { return kv.second < now; });
    }
  }
}

}  // namespace vault::agent
