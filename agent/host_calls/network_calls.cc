// The network host call: net_connect. The vault makes the connection its grant allows and passes
// the connected socket to the agent (which has no network of its own).
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"

namespace vault::agent::host_calls {
namespace {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

absl::StatusOr<common::UniqueFd> ConnectTcp(const std::string& host, uint32_t port,
                                            absl::Duration timeout, std::string* address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &result);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", host));
  absl::Time deadline = absl::Now() + timeout;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    common::UniqueFd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) continue;
    char text[NI_MAXHOST] = "";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last =
          absl::UnavailableError(absl::StrCat("connect ", text, ":", port, ": ", strerror(errno)));
      continue;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    int wait_ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (poll(&p, 1, wait_ms) != 1) {
      last = absl::DeadlineExceededError(absl::StrCat("connect ", text, ":", port, ": timed out"));
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = absl::UnavailableError(absl::StrCat("connect ", text, ":", port, ": ", strerror(err)));
      continue;
    }
    int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    *address =
        absl::StrCat(ai->ai_family == AF_INET6 ? absl::StrCat("[", text, "]") : text, ":", port);
    freeaddrinfo(result);
    return fd;
  }
  freeaddrinfo(result);
  return last;
}

}  // namespace

void AuthorizeNetConnect(HostCallContext& ctx) {
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  const std::string host = absl::AsciiStrToLower(request.net_connect().host());
  c.subject = absl::StrCat(host, ":", request.net_connect().port());
  c.grant = MakeGrant(Grant::NETWORK);
  c.grant->set_host(host);
  c.grant->set_port(request.net_connect().port());
}

void NetConnect(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  const auto& nc = request.net_connect();
  if (nc.port() == 0 || nc.port() > 65535) {
    c.status = absl::InvalidArgumentError("port must be 1-65535");
    return;
  }
  absl::Duration timeout = absl::Milliseconds(nc.timeout_ms() == 0 ? 5000 : nc.timeout_ms());
  timeout = std::min(timeout, absl::Milliseconds(s.config().call_deadline_ms()));
  std::string address;
  absl::StatusOr<common::UniqueFd> fd =
      ConnectTcp(absl::AsciiStrToLower(nc.host()), nc.port(), timeout, &address);
  if (!fd.ok()) {
    c.status = fd.status();
    return;
  }
  c.pass_fd = *std::move(fd);
  resp.mutable_net_connect()->set_address(address);
  c.output_bytes = address;
}

}  // namespace vault::agent::host_calls
