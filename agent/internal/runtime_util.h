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

// "running", "paused", ...
std::string StateName(vault::v1::AgentState state);
// sha256:<hex>/<size> of a wire digest (whatever its length).
std::string DigestText(const vault::v1::Digest& d);
absl::StatusOr<cas::Digest> ToDigest(const vault::v1::Digest& d);
vault::v1::Digest FromDigest(const cas::Digest& d);
// Stores `data` as `digest`: one Put below the CAS's chunking threshold, a streaming upload
// above it (a state or object of up to a frame may be larger than the threshold).
absl::StatusOr<cas::PutOutcome> PutObject(cas::Store& store, const cas::Digest& digest,
                                          absl::string_view data);

}  // namespace vault::agent

#endif  // VAULT_AGENT_INTERNAL_RUNTIME_UTIL_H_
