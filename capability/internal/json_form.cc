// JSON: our own syntax check (protobuf's parser reports no positions), then protobuf's.
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "capability/internal/parse_message.h"
#include "capability/internal/text_cursor.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"

namespace vault::capability::internal {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using text::DescribeByte;
using text::ErrorAt;
using text::IsValidUtf8;
using text::kMaxDepth;
using text::Pos;
using text::Quoted;

struct JsonMember;
struct JsonValue {
  enum class Type { kObject, kArray, kString, kNumber, kLiteral };
  Type type = Type::kLiteral;
  Pos pos;
  std::string text;  // a string's contents, a number or literal as written
  std::vector<JsonMember> members;
  std::vector<JsonValue> elements;
};
struct JsonMember {
  std::string key;
  Pos key_pos;
  JsonValue value;
};

class JsonReader : private TextCursor {
 public:
  JsonReader(absl::string_view text, absl::string_view source) : TextCursor(text, source) {}

  absl::StatusOr<JsonValue> ReadDocument() {
    SkipBlank();
    VAULT_ASSIGN_OR_RETURN(JsonValue value, ReadValue(0));
    SkipBlank();
    if (!AtEnd()) return Error(Here(), "unexpected text after the JSON value");
    return value;
  }

 private:
  void SkipBlank() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      Advance();
    }
  }
  absl::Status Unexpected() const {
    if (AtEnd()) return Error(Here(), "unexpected end of input");
    return Error(Here(), absl::StrCat("unexpected character ", DescribeByte(Peek())));
  }

  absl::StatusOr<JsonValue> ReadValue(int depth) {
    if (AtEnd()) return Unexpected();
    char c = Peek();
    if (c == '{' || c == '[') {
      if (depth >= kMaxDepth) {
        return Error(Here(), absl::StrCat("nested deeper than ", kMaxDepth, " levels"));
      }
      return c == '{' ? ReadObject(depth) : ReadArray(depth);
    }
    if (c == '"') {
      JsonValue v;
      v.type = JsonValue::Type::kString;
      v.pos = Here();
      VAULT_ASSIGN_OR_RETURN(v.text, ReadString());
      return v;
    }
    if (c == '-' || absl::ascii_isdigit(c)) return ReadNumber();
    for (absl::string_view literal : {"true", "false", "null"}) {
      if (absl::StartsWith(text_.substr(i_), literal)) {
        JsonValue v;
        v.pos = Here();
        v.text = std::string(literal);
        for (size_t k = 0; k < literal.size(); ++k) Advance();
        return v;
      }
    }
    return Unexpected();
  }

  absl::StatusOr<JsonValue> ReadObject(int depth) {
    JsonValue object;
    std::set<std::string> keys;  // a set: objects may have many members
    object.type = JsonValue::Type::kObject;
    object.pos = Here();
    Advance();
    SkipBlank();
    if (!AtEnd() && Peek() == '}') {
      Advance();
      return object;
    }
    for (;;) {
      SkipBlank();
      if (AtEnd()) return Error(object.pos, "'{' is never closed");
      if (Peek() != '"') return Error(Here(), "expected a string key");
      JsonMember member;
      member.key_pos = Here();
      VAULT_ASSIGN_OR_RETURN(member.key, ReadString());
      if (!keys.insert(member.key).second) {
        return Error(member.key_pos, absl::StrCat("duplicate key ", Quoted(member.key)));
      }
      SkipBlank();
      if (AtEnd()) return Error(object.pos, "'{' is never closed");
      if (Peek() != ':') return Error(Here(), "expected ':' after the key");
      Advance();
      SkipBlank();
      VAULT_ASSIGN_OR_RETURN(member.value, ReadValue(depth + 1));
      object.members.push_back(std::move(member));
      SkipBlank();
      if (AtEnd()) return Error(object.pos, "'{' is never closed");
      if (Peek() == '}') {
        Advance();
        return object;
      }
      if (Peek() != ',') return Error(Here(), "expected ',' or '}'");
      Advance();
      SkipBlank();
      if (!AtEnd() && Peek() == '}') return Error(Here(), "trailing ',' before '}'");
    }
  }

  absl::StatusOr<JsonValue> ReadArray(int depth) {
    JsonValue array;
    array.type = JsonValue::Type::kArray;
    array.pos = Here();
    Advance();
    SkipBlank();
    if (!AtEnd() && Peek() == ']') {
      Advance();
      return array;
    }
    for (;;) {
      SkipBlank();
      if (AtEnd()) return Error(array.pos, "'[' is never closed");
      VAULT_ASSIGN_OR_RETURN(JsonValue element, ReadValue(depth + 1));
      array.elements.push_back(std::move(element));
      SkipBlank();
      if (AtEnd()) return Error(array.pos, "'[' is never closed");
      if (Peek() == ']') {
        Advance();
        return array;
      }
      if (Peek() != ',') return Error(Here(), "expected ',' or ']'");
      Advance();
      SkipBlank();
      if (!AtEnd() && Peek() == ']') return Error(Here(), "trailing ',' before ']'");
    }
  }

  absl::StatusOr<JsonValue> ReadNumber() {
    JsonValue number;
    number.type = JsonValue::Type::kNumber;
    number.pos = Here();
    size_t start = i_;
    auto digits = [&]() {
      size_t n = 0;
      while (!AtEnd() && absl::ascii_isdigit(Peek())) {
        Advance();
        ++n;
      }
      return n;
    };
    if (Peek() == '-') Advance();
    if (!AtEnd() && Peek() == '0') {
      Advance();
    } else if (digits() == 0) {
      return Error(number.pos, "invalid number");
    }
    if (!AtEnd() && Peek() == '.') {
      Advance();
      if (digits() == 0) return Error(number.pos, "invalid number");
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      Advance();
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) Advance();
      if (digits() == 0) return Error(number.pos, "invalid number");
    }
    if (!AtEnd() && (absl::ascii_isalnum(Peek()) || Peek() == '.')) {
      return Error(number.pos, "invalid number");
    }
    number.text = std::string(text_.substr(start, i_ - start));
    return number;
  }

  absl::StatusOr<uint32_t> Hex4(Pos escape) {
    if (text_.size() - i_ < 4) return Error(escape, "\\u needs four hex digits");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = Peek();
      if (!absl::ascii_isxdigit(c)) return Error(escape, "\\u needs four hex digits");
      v = v * 16 + static_cast<uint32_t>(
                       absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
      Advance();
    }
    return v;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      out->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  absl::StatusOr<std::string> ReadString() {
    Pos open = Here();
    Advance();
    std::string out;
    for (;;) {
      if (AtEnd()) return Error(open, "unterminated string");
      char c = Peek();
      if (c == '"') {
        Advance();
        break;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error(Here(), absl::StrCat("control character ", DescribeByte(c), " in a string"));
      }
      if (c != '\\') {
        out.push_back(c);
        Advance();
        continue;
      }
      Pos escape = Here();
      Advance();
      if (AtEnd()) return Error(open, "unterminated string");
      char e = Peek();
      Advance();
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          VAULT_ASSIGN_OR_RETURN(uint32_t cp, Hex4(escape));
          if (cp >= 0xdc00 && cp <= 0xdfff)
            return Error(escape, "unpaired surrogate in \\u escape");
          if (cp >= 0xd800 && cp <= 0xdbff) {
            if (text_.size() - i_ < 2 || text_[i_] != '\\' || text_[i_ + 1] != 'u') {
              return Error(escape, "unpaired surrogate in \\u escape");
            }
            Pos low_escape = Here();
            Advance();
            Advance();
            VAULT_ASSIGN_OR_RETURN(uint32_t low, Hex4(low_escape));
            if (low < 0xdc00 || low > 0xdfff) {
              return Error(escape, "unpaired surrogate in \\u escape");
            }
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          }
          AppendUtf8(cp, &out);
          break;
        }
        default:
          return Error(escape, absl::StrCat("unknown escape \\", DescribeByte(e)));
      }
    }
    if (!IsValidUtf8(out)) return Error(open, "string is not valid UTF-8");
    return out;
  }
};

const FieldDescriptor* JsonField(const Descriptor* descriptor, const std::string& key) {
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (field->json_name() == key || field->name() == key) return field;
  }
  return nullptr;
}

// Unknown and repeated fields, oneof conflicts, and objects/arrays where messages/lists belong,
// located exactly; scalar types are left to protobuf.
absl::Status CheckJsonShape(const JsonValue& object, const Descriptor* descriptor,
                            absl::string_view source) {
  if (object.type != JsonValue::Type::kObject) {
    return ErrorAt(source, object.pos,
                   absl::StrCat("expected a JSON object for ", descriptor->full_name()));
  }
  std::map<const FieldDescriptor*, const JsonMember*> fields;
  std::map<const google::protobuf::OneofDescriptor*, const JsonMember*> oneofs;
  for (const JsonMember& member : object.members) {
    const FieldDescriptor* field = JsonField(descriptor, member.key);
    if (field == nullptr) {
      return ErrorAt(
          source, member.key_pos,
          absl::StrCat("unknown field ", Quoted(member.key), " in ", descriptor->full_name()));
    }
    if (auto [it, inserted] = fields.emplace(field, &member); !inserted) {
      return ErrorAt(
          source, member.key_pos,
          absl::StrCat("field ", Quoted(member.key), " repeats ", Quoted(it->second->key)));
    }
    const JsonValue& value = member.value;
    if (value.type == JsonValue::Type::kLiteral && value.text == "null") continue;  // absent
    if (const google::protobuf::OneofDescriptor* oneof = field->real_containing_oneof()) {
      if (auto [it, inserted] = oneofs.emplace(oneof, &member); !inserted) {
        return ErrorAt(source, member.key_pos,
                       absl::StrCat(Quoted(member.key), " conflicts with ", Quoted(it->second->key),
                                    " (only one of '", oneof->name(), "')"));
      }
    }
    if (field->is_repeated()) {
      if (value.type != JsonValue::Type::kArray) {
        return ErrorAt(source, value.pos,
                       absl::StrCat("field ", Quoted(member.key), " takes an array"));
      }
      if (field->message_type() != nullptr) {
        for (const JsonValue& element : value.elements) {
          VAULT_RETURN_IF_ERROR(CheckJsonShape(element, field->message_type(), source));
        }
      }
    } else if (field->message_type() != nullptr) {
      VAULT_RETURN_IF_ERROR(CheckJsonShape(value, field->message_type(), source));
    }
  }
  return absl::OkStatus();
}

// Where the field at `path` ("grants[0].port") is written; the deepest part found.
Pos ResolveJsonPath(const JsonValue& root, const Descriptor* descriptor, absl::string_view path) {
  Pos pos = root.pos;
  const JsonValue* value = &root;
  for (absl::string_view segment : absl::StrSplit(path, '.', absl::SkipEmpty())) {
    auto [name, index] = PathSegment(segment);
    if (descriptor == nullptr || value->type != JsonValue::Type::kObject) break;
    const FieldDescriptor* field = descriptor->FindFieldByName(name);
    if (field == nullptr) break;
    const JsonMember* found = nullptr;
    for (const JsonMember& member : value->members) {
      if (JsonField(descriptor, member.key) == field) found = &member;
    }
    if (found == nullptr) break;
    pos = found->key_pos;
    value = &found->value;
    if (index >= 0) {
      if (value->type != JsonValue::Type::kArray ||
          static_cast<size_t>(index) >= value->elements.size()) {
        break;
      }
      value = &value->elements[index];
      pos = value->pos;
    }
    descriptor = field->message_type();
  }
  return pos;
}

}  // namespace

absl::Status ParseJsonInto(absl::string_view text, absl::string_view source,
                           google::protobuf::Message* message, const MessageCheck& check) {
  JsonReader reader(text, source);
  VAULT_ASSIGN_OR_RETURN(JsonValue root, reader.ReadDocument());
  const Descriptor* descriptor = message->GetDescriptor();
  VAULT_RETURN_IF_ERROR(CheckJsonShape(root, descriptor, source));
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  google::protobuf::util::Status status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), message, options);
  if (!status.ok()) {
    // protobuf says "(grants[0].port): invalid value ..." or "(grants[0]) bogus: ...".
    absl::string_view what(status.message().data(), status.message().size());
    std::string path;
    if (absl::StartsWith(what, "(")) {
      size_t close = what.find(')');
      if (close != absl::string_view::npos) {
        path = std::string(what.substr(1, close - 1));
        what.remove_prefix(close + 1);
        absl::ConsumePrefix(&what, ":");
        what = absl::StripLeadingAsciiWhitespace(what);
      }
    }
    Pos pos = ResolveJsonPath(root, descriptor, path);
    return ErrorAt(source, pos, path.empty() ? std::string(what) : absl::StrCat(path, ": ", what));
  }
  if (std::optional<Problem> problem = check(*message)) {
    return ErrorAt(source, ResolveJsonPath(root, descriptor, problem->path), ProblemText(*problem));
  }
  return absl::OkStatus();
}

}  // namespace vault::capability::internal
