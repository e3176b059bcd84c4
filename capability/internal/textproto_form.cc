// Protobuf text format, its errors located by line and column.
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "capability/internal/parse_message.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace vault::capability::internal {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using text::ErrorAt;
using text::kMaxDepth;
using text::Pos;
using text::PosAt;

class TextErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (!first_) first_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
  }
  void AddWarning(int, int, const std::string&) override {}
  const std::optional<std::string>& first() const { return first_; }

 private:
  std::optional<std::string> first_;
};

Pos ResolveTextPath(const google::protobuf::TextFormat::ParseInfoTree* tree,
                    const Descriptor* descriptor, absl::string_view path, Pos pos) {
  for (absl::string_view segment : absl::StrSplit(path, '.', absl::SkipEmpty())) {
    auto [name, index] = PathSegment(segment);
    if (tree == nullptr || descriptor == nullptr) break;
    const FieldDescriptor* field = descriptor->FindFieldByName(name);
    if (field == nullptr) break;
    if (field->is_repeated() ? index < 0 : index >= 0) break;
    google::protobuf::TextFormat::ParseLocation location = tree->GetLocation(field, index);
    if (location.line < 0) break;
    pos = Pos{location.line + 1, location.column + 1};
    if (field->message_type() == nullptr) break;
    tree = tree->GetTreeForNested(field, index);
    descriptor = field->message_type();
  }
  return pos;
}

}  // namespace

absl::Status ParseTextInto(absl::string_view text, absl::string_view source,
                           google::protobuf::Message* message, const MessageCheck& check) {
  TextErrors errors;
  google::protobuf::TextFormat::ParseInfoTree tree;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  parser.SetRecursionLimit(kMaxDepth);
  if (!parser.ParseFromString(std::string(text), message)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", errors.first().value_or("1:1: invalid text format")));
  }
  if (std::optional<Problem> problem = check(*message)) {
    // The document's first non-blank byte when the path is not found.
    size_t first = text.find_first_not_of(" \t\r\n");
    Pos start = PosAt(text, first == absl::string_view::npos ? 0 : first);
    return ErrorAt(source, ResolveTextPath(&tree, message->GetDescriptor(), problem->path, start),
                   ProblemText(*problem));
  }
  return absl::OkStatus();
}

}  // namespace vault::capability::internal
