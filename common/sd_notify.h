// SdNotify: tells the service manager about the daemon's state, as systemd's sd_notify(3) does
// for a `Type=notify` unit, without libsystemd. The state is one datagram of newline-separated
// assignments ("READY=1", "STOPPING=1", "STATUS=...") sent to the AF_UNIX datagram socket named
// by $NOTIFY_SOCKET: a filesystem path, or an abstract address written with a leading '@'.
//
//   // once every listener accepts calls:
//   if (absl::Status s = common::SdNotify("READY=1"); !s.ok()) spdlog::warn("{}", s.message());
//   ...
//   common::SdNotify("STOPPING=1");
//
// Without $NOTIFY_SOCKET (not started by systemd, or a unit of another Type) nothing is sent and
// the result is OK.
//
// Thread-safety: both functions are thread-safe; each call uses its own socket.
#ifndef VAULT_COMMON_SD_NOTIFY_H_
#define VAULT_COMMON_SD_NOTIFY_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace vault::common {

// Sends `state` to $NOTIFY_SOCKET; OK and nothing sent when the variable is unset or empty.
absl::Status SdNotify(absl::string_view state);

// Sends `state` to `socket` ("/run/systemd/notify" or "@abstract-name"). INVALID_ARGUMENT for
// an empty state, or a socket name that is neither an absolute path nor '@'-prefixed, or that
// does not fit a sockaddr_un; the errno of socket(2)/sendto(2) otherwise.
absl::Status SdNotifyTo(absl::string_view socket, absl::string_view state);

}  // namespace vault::common

#endif  // VAULT_COMMON_SD_NOTIFY_H_
