// agent/internal/runtime_util: small conversions the runtime's files and the host-call handlers
// share. Private to agent/.
#ifndef VAULT_AGENT_INTERNAL_RUNTIME_UTIL_H_
#define VAULT_AGENT_INTERNAL_RUNTIME_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/cas.pb.h"

namespace vault::agent {

// sha256:<hex>/<size> of a wire digest (whatever its length).
std::string DigestText(const vault::v1::Digest& d);
absl::StatusOr<cas::Digest> ToDigest(const vault::v1::Digest& d);
vault::v1::Digest FromDigest(const cas::Digest& d);
}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_RUNTIME_UTIL_H_
