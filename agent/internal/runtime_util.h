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
// The purpose recorded for a spec that gives none (it is the motivation of the agent's audit
// entries; the caller is warned).
inline constexpr absl::string_view kDefaultPurpose = "(no purpose given)";
// The checks of a spec's own forms every spawn makes (an operator's or an agent's child):
// name and groups well-formed, fuel only for the interpreting sandboxes. INVALID_ARGUMENT.
absl::Status CheckSpecForms(const vault::v1::AgentSpec& spec);

std::string DigestText(const vault::v1::Digest& d);
absl::StatusOr<cas::Digest> ToDigest(const vault::v1::Digest& d);
vault::v1::Digest FromDigest(const cas::Digest& d);
}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_RUNTIME_UTIL_H_
