// The runtime's side of the channel reactor (agent/channel_reactor.h): frames in, frames out,
// output lines to the log.
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
// The reactor: every agent's channel and output pipe on one epoll.

bool AgentRuntime::Impl::OnReadable(const std::shared_ptr<LiveAgent>& live, uint64_t* handled) {
  std::shared_ptr<AgentConnection> conn;
  {
    absl::MutexLock lock(&live->mu);
    conn = live->conn;
  }
  if (conn == nullptr) return false;
  std::vector<std::string> frames;
  bool more = false;
  // A bounded number of frames per agent per round: the others get their turn.
  absl::Status s = conn->ReadAvailable(&frames, 64, &more);
  *handled += frames.size();
  for (std::string& f : frames) HandleFrame(live, std::move(f));
  if (!s.ok()) {
    reactor_->Forget(conn->fd());
    if (absl::IsUnavailable(s)) {
      // The end of the stream: most often the process is leaving. The watchdog ends it if it
      // is still there a second later.
      absl::MutexLock lock(&live->mu);
      live->channel_closed_at = absl::Now();
      return false;
    }
    End(live, EndCause::kProtocol, absl::StrCat("channel: ", s.message()));
    return false;
  }
  return more;
}

void AgentRuntime::Impl::OnOutput(const std::shared_ptr<LiveAgent>& live) {
  // Agent stdout/stderr lines become log lines ("output"); partial lines wait (bounded).
  std::vector<std::string> lines;
  uint64_t incarnation;
  {
    absl::MutexLock lock(&live->mu);
    if (!live->out_fd.valid()) return;
    incarnation = live->record.incarnation();
    char buf[16384];
    for (int round = 0; round < 8; ++round) {
      ssize_t n = read(live->out_fd.get(), buf, sizeof buf);
      if (n <= 0) break;
      live->out_partial.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = live->out_partial.find('\n', start)) != std::string::npos;
           start = nl + 1) {
        lines.push_back(live->out_partial.substr(start, nl - start));
      }
      live->out_partial.erase(0, start);
      if (live->out_partial.size() > kMaxLogLine) {
        lines.push_back(live->out_partial.substr(0, kMaxLogLine));
        live->out_partial.clear();
      }
    }
    live->record.mutable_counters()->set_log_lines(live->record.counters().log_lines() +
                                                   lines.size());
  }
  for (std::string& line : lines) AppendLog(live->id, "output", std::move(line), incarnation);
}

void AgentRuntime::Impl::SendFrame(const std::shared_ptr<LiveAgent>& live,
                                   const vault::v1::HostFrame& frame, common::UniqueFd pass_fd) {
  std::shared_ptr<AgentConnection> conn;
  uint64_t token;
  if (frame.has_response()) LogAnswer(live, frame.response());
  {
    absl::MutexLock lock(&live->mu);
    conn = live->conn;
    token = live->conn_token;
  }
  if (conn == nullptr) return;
  std::string bytes;
  frame.SerializeToString(&bytes);
  absl::Status s = conn->Send(bytes, std::move(pass_fd));
  if (!s.ok()) {
    End(live, EndCause::kProtocol, absl::StrCat("channel: ", s.message()));
    return;
  }
  if (conn->wants_write()) reactor_->WantWrite(token, conn->fd());
}

}  // namespace vault::agent
