// capability/internal/message_checks: the semantic checks of messages parsed from JSON or text
// format (the S-expression mapper makes the same checks as it reads). A problem names a field path
// ("grants[1]", "code_digest.sha256") that each format locates in its own text. Private to
// capability/.
#ifndef VAULT_CAPABILITY_INTERNAL_MESSAGE_CHECKS_H_
#define VAULT_CAPABILITY_INTERNAL_MESSAGE_CHECKS_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability::internal {

struct Problem {
  std::string path;
  std::string what;
};

std::optional<Problem> FindBadUtf8(const google::protobuf::Message& message,
                                   const std::string& prefix);
std::optional<Problem> CheckSpec(const vault::v1::AgentSpec& spec);
std::optional<Problem> CheckOneGrant(const vault::v1::Grant& grant);
std::optional<Problem> CheckNothing(const vault::v1::Constraints&);
// "path: what", or "what" without a path.
std::string ProblemText(const Problem& p);
// "grants[2]" -> {"grants", 2}; "purpose" -> {"purpose", -1}.
std::pair<std::string, int> PathSegment(absl::string_view segment);

}  // namespace vault::capability::internal

#endif  // VAULT_CAPABILITY_INTERNAL_MESSAGE_CHECKS_H_
