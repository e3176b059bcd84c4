// protocol_error: the status of a frame from the vault that breaks the host-call protocol (the
// channel is then closed). Private to sdk/cpp: the channel (vault_agent.cc) and the host calls
// (host_calls.cc) both report it.
#ifndef VAULT_SDK_CPP_INTERNAL_PROTOCOL_ERROR_H_
#define VAULT_SDK_CPP_INTERNAL_PROTOCOL_ERROR_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace vault::sdk {

inline absl::Status ProtocolError(absl::string_view what) {
  return absl::InternalError(absl::StrCat("vault-agent: protocol error: ", what));
}

}  // namespace vault::sdk

#endif  // VAULT_SDK_CPP_INTERNAL_PROTOCOL_ERROR_H_
