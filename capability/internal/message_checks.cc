#include "capability/internal/message_checks.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "capability/grant.h"
#include "capability/text_syntax.h"
#include "google/protobuf/descriptor.h"

namespace vault::capability::internal {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using text::CheckGrant;
using text::IsValidUtf8;
using vault::v1::AgentSpec;
using vault::v1::Constraints;
using vault::v1::Grant;

std::optional<Problem> FindBadUtf8(const Message& message, const std::string& prefix) {
  const Reflection* reflection = message.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const FieldDescriptor* field : fields) {
    std::string name = absl::StrCat(prefix, field->name());
    int count = field->is_repeated() ? reflection->FieldSize(message, field) : 1;
    for (int i = 0; i < count; ++i) {
      std::string path = field->is_repeated() ? absl::StrCat(name, "[", i, "]") : name;
      if (field->type() == FieldDescriptor::TYPE_STRING) {
        std::string scratch;
        const std::string& value =
            field->is_repeated()
                ? reflection->GetRepeatedStringReference(message, field, i, &scratch)
                : reflection->GetStringReference(message, field, &scratch);
        if (!IsValidUtf8(value)) return Problem{path, "string is not valid UTF-8"};
      } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        const Message& sub = field->is_repeated()
                                 ? reflection->GetRepeatedMessage(message, field, i)
                                 : reflection->GetMessage(message, field);
        if (std::optional<Problem> p = FindBadUtf8(sub, path + ".")) return p;
      }
    }
  }
  return std::nullopt;
}

std::optional<Problem> CheckSpec(const AgentSpec& spec) {
  if (std::optional<Problem> p = FindBadUtf8(spec, "")) return p;
  if (spec.has_code_digest() && spec.code_digest().sha256().size() != 32) {
    return Problem{"code_digest.sha256", absl::StrCat("must be 32 bytes (a SHA-256), not ",
                                                      spec.code_digest().sha256().size())};
  }
  if (spec.has_code_file() && spec.code_file().empty()) return Problem{"code_file", "is empty"};
  for (int i = 0; i < spec.grants_size(); ++i) {
    absl::Status valid = CheckGrant(spec.grants(i));
    if (!valid.ok()) return Problem{absl::StrCat("grants[", i, "]"), std::string(valid.message())};
  }
  if (absl::Status all = ValidateGrants(spec.grants()); !all.ok()) {
    return Problem{"grants", std::string(all.message())};
  }
  return std::nullopt;
}

std::optional<Problem> CheckOneGrant(const Grant& grant) {
  if (std::optional<Problem> p = FindBadUtf8(grant, "")) return p;
  absl::Status valid = CheckGrant(grant);
  if (!valid.ok()) return Problem{"", std::string(valid.message())};
  return std::nullopt;
}

std::optional<Problem> CheckNothing(const Constraints&) { return std::nullopt; }

std::string ProblemText(const Problem& p) {
  return p.path.empty() ? p.what : absl::StrCat(p.path, ": ", p.what);
}

// "grants[2]" → {"grants", 2}; "purpose" → {"purpose", -1}.
std::pair<std::string, int> PathSegment(absl::string_view segment) {
  size_t bracket = segment.find('[');
  if (bracket == absl::string_view::npos) return {std::string(segment), -1};
  int index = -1;
  absl::string_view digits = segment.substr(bracket + 1);
  absl::ConsumeSuffix(&digits, "]");
  if (!absl::SimpleAtoi(digits, &index)) index = -1;
  return {std::string(segment.substr(0, bracket)), index};
}

}  // namespace vault::capability::internal
