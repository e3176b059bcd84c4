// capability/internal/parse_message: JSON and protobuf text format into a message, with errors
// located by line and column, then the format-independent semantic check. Private to capability/.
#ifndef VAULT_CAPABILITY_INTERNAL_PARSE_MESSAGE_H_
#define VAULT_CAPABILITY_INTERNAL_PARSE_MESSAGE_H_

#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capability/internal/message_checks.h"
#include "capability/text_syntax.h"
#include "google/protobuf/message.h"

namespace vault::capability::internal {

using MessageCheck = std::function<std::optional<Problem>(const google::protobuf::Message&)>;

absl::Status ParseJsonInto(absl::string_view text, absl::string_view source,
                           google::protobuf::Message* message, const MessageCheck& check);
absl::Status ParseTextInto(absl::string_view text, absl::string_view source,
                           google::protobuf::Message* message, const MessageCheck& check);

template <typename M>
absl::StatusOr<M> ParseJson(absl::string_view text, absl::string_view source,
                            std::optional<Problem> (*check)(const M&)) {
  M message;
  absl::Status s = ParseJsonInto(
      text, source, &message,
      [check](const google::protobuf::Message& m) { return check(static_cast<const M&>(m)); });
  if (!s.ok()) return s;
  return message;
}

template <typename M>
absl::StatusOr<M> ParseText(absl::string_view text, absl::string_view source,
                            std::optional<Problem> (*check)(const M&)) {
  M message;
  absl::Status s = ParseTextInto(
      text, source, &message,
      [check](const google::protobuf::Message& m) { return check(static_cast<const M&>(m)); });
  if (!s.ok()) return s;
  return message;
}

}  // namespace vault::capability::internal

#endif  // VAULT_CAPABILITY_INTERNAL_PARSE_MESSAGE_H_
