#include "capability/text_form.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "capability/grant.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"

// Decisions the header leaves open (documented here, tested in text_form_test.cc):
//   - Every format refuses inputs over 1 MiB and nesting deeper than 64 levels (S-expression
//     lists, JSON objects/arrays, text-format messages), reported at 1:1 / the deepest opener.
//   - Lines and columns are 1-based; a column counts bytes (a tab is one column).
//   - S-expression strings also accept \n, \t, \r and \xHH escapes, so that every string a
//     protobuf can hold prints and parses back; the result must be valid UTF-8. Raw newlines in
//     strings are allowed; other raw control characters are not.
//   - (migrate (vaults ...)) names and (send/receive ... (types ...)) message types are sorted and
//     de-duplicated (S-expression and shorthand); JSON and text format are the exact wire form
//     and must already be sorted and unique.
//   - Limits that are not a whole number of seconds print as (max-runtime-ms N), (max-cpu-ms N)
//     and (expires-ms N), which the parser (and the key=value shorthand) also accept.
//   - Names (path, host, agent, from, vault names, message types, sandbox) may be bare symbols or
//     strings; purpose, instructions, code, code-file and hash must be strings.
//   - JSON and text format specs get the same semantic checks as S-expressions (ValidateGrant,
//     a 32-byte code digest, a non-empty code-file, UTF-8 strings); the message is prefixed with
//     the field path ("grants[1]: ...") and located at that field. JSON semantic errors from
//     protobuf (wrong types) are located by the field path protobuf reports, resolved against
//     our own JSON parse; when that fails, at the document's start (best effort).
namespace vault::capability {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using vault::v1::AgentSpec;
using vault::v1::Constraints;
using vault::v1::Grant;

constexpr size_t kMaxInputBytes = size_t{1} << 20;
constexpr int kMaxDepth = 64;

struct Pos {
  int line = 1;
  int col = 1;
};

std::string PosText(Pos pos) { return absl::StrCat(pos.line, ":", pos.col); }

absl::Status ErrorAt(absl::string_view source, Pos pos, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", PosText(pos), ": ", what));
}

// The position of byte `offset` of `text`.
Pos PosAt(absl::string_view text, size_t offset) {
  Pos pos;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++pos.line;
      pos.col = 1;
    } else {
      ++pos.col;
    }
  }
  return pos;
}

absl::Status CheckSize(absl::string_view text, absl::string_view source) {
  if (text.size() > kMaxInputBytes) {
    return ErrorAt(source, Pos{},
                   absl::StrCat("input is ", text.size(), " bytes; at most ", kMaxInputBytes,
                                " are accepted"));
  }
  return absl::OkStatus();
}

// A value quoted for an error message, cut to a readable length.
std::string Quoted(absl::string_view s) {
  constexpr size_t kMax = 80;
  if (s.size() > kMax) return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMax)), "...\"");
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

std::string DescribeByte(char c) {
  unsigned char u = static_cast<unsigned char>(c);
  if (u > 0x20 && u < 0x7f) return absl::StrCat("'", std::string(1, c), "'");
  return absl::StrCat("byte 0x", absl::Hex(u, absl::kZeroPad2));
}

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n;
    unsigned char lo = 0x80, hi = 0xbf;  // the valid range of the second byte
    if (c >= 0xc2 && c <= 0xdf) {
      n = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 2;
      if (c == 0xe0) lo = 0xa0;  // no overlong forms
      if (c == 0xed) hi = 0x9f;  // no surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 3;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;  // at most U+10FFFF
    } else {
      return false;
    }
    if (s.size() - i <= static_cast<size_t>(n)) return false;
    for (int k = 1; k <= n; ++k) {
      unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return false;
    }
    i += n + 1;
  }
  return true;
}

bool IsLowerHex(absl::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool IsDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), absl::ascii_isdigit);
}

// -?[0-9]+
bool IsIntegerLiteral(absl::string_view s) {
  if (absl::StartsWith(s, "-")) s.remove_prefix(1);
  return IsDigits(s);
}

bool IsSymbolChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '*' || c == '.' || c == '_' ||
         c == '/' || c == '-' || c == '+';
}

// "sha256:<64 lowercase hex>" → 32 bytes.
std::optional<std::string> ParseHash(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, "sha256:") || text.size() != 64 || !IsLowerHex(text)) {
    return std::nullopt;
  }
  return absl::HexStringToBytes(text);
}

// "sha256:<64 lowercase hex>/<size>".
std::optional<vault::v1::Digest> ParseDigest(absl::string_view text) {
  size_t slash = text.find('/');
  if (slash == absl::string_view::npos) return std::nullopt;
  std::optional<std::string> hash = ParseHash(text.substr(0, slash));
  absl::string_view size_text = text.substr(slash + 1);
  uint64_t size = 0;
  if (!hash || !IsDigits(size_text) || !absl::SimpleAtoi(size_text, &size)) return std::nullopt;
  vault::v1::Digest digest;
  digest.set_sha256(*std::move(hash));
  digest.set_size(size);
  return digest;
}

constexpr absl::string_view kHashSyntax = "expected \"sha256:<64 lowercase hex digits>\"";
constexpr absl::string_view kDigestSyntax =
    "expected \"sha256:<64 lowercase hex digits>/<size in bytes>\"";

// A grant as every format must leave it: ValidateGrant, and a port that is a port.
absl::Status CheckGrant(const Grant& grant) {
  VAULT_RETURN_IF_ERROR(ValidateGrant(grant));
  if (grant.port() > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", grant.port(), " is out of range"));
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------------------------------------------
// Constraints: the names shared by the S-expression and the key=value shorthand.

struct ConstraintName {
  absl::string_view name;   // "max-runtime"
  absl::string_view field;  // "max_runtime_ms"
  int scale;                // 1000: the text is in seconds, the field in milliseconds
};

constexpr ConstraintName kConstraintNames[] = {
    {"max-runtime", "max_runtime_ms", 1000}, {"max-runtime-ms", "max_runtime_ms", 1},
    {"max-memory", "max_memory_bytes", 1},   {"max-storage", "max_storage_bytes", 1},
    {"max-cpu", "max_cpu_ms", 1000},         {"max-cpu-ms", "max_cpu_ms", 1},
    {"max-open-files", "max_open_files", 1}, {"max-processes", "max_processes", 1},
    {"max-migrations", "max_migrations", 1}, {"expires", "expires_unix_ms", 1000},
    {"expires-ms", "expires_unix_ms", 1},
};

const ConstraintName* FindConstraintName(absl::string_view name) {
  for (const ConstraintName& c : kConstraintNames) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string ConstraintNameList() {
  std::vector<absl::string_view> names;
  for (const ConstraintName& c : kConstraintNames) names.push_back(c.name);
  return absl::StrJoin(names, ", ");
}

// ------------------------------------------------------------------------------------------------
// S-expressions.

// People write directories with a trailing '/' ("/vault/papers/"); the canonical form has none.
// Only that one character is dropped ("//" stays, and is refused): nothing else is repaired.
void DropDirectorySlash(std::string* path) {
  if (path->size() > 1 && path->back() == '/' && (*path)[path->size() - 2] != '/') {
    path->pop_back();
  }
}

struct Sexp {
  enum class Type { kList, kString, kSymbol, kInteger };
  Type type = Type::kList;
  Pos pos;
  std::string text;         // a string's contents, a symbol, an integer literal
  std::vector<Sexp> items;  // a list's elements

  bool is_list() const { return type == Type::kList; }
  // The name of a form "(name ...)", or "" when this is not one.
  absl::string_view head() const {
    if (!is_list() || items.empty() || items[0].type != Type::kSymbol) return {};
    return items[0].text;
  }
  size_t arg_count() const { return items.empty() ? 0 : items.size() - 1; }
};

std::string Describe(const Sexp& x) {
  switch (x.type) {
    case Sexp::Type::kString:
      return absl::StrCat("the string ", Quoted(x.text));
    case Sexp::Type::kSymbol:
      return absl::StrCat("the symbol ", x.text);
    case Sexp::Type::kInteger:
      return absl::StrCat("the number ", x.text);
    case Sexp::Type::kList:
      break;
  }
  if (x.items.empty()) return "()";
  if (!x.head().empty()) return absl::StrCat("(", x.head(), " ...)");
  return "a list";
}

// A position in a text being read, shared by the S-expression and JSON readers: the byte index
// and its 1-based line and column, for error messages.
class TextCursor {
 protected:
  TextCursor(absl::string_view text, absl::string_view source) : text_(text), source_(source) {}

  bool AtEnd() const { return i_ >= text_.size(); }
  char Peek() const { return text_[i_]; }
  Pos Here() const { return pos_; }
  void Advance() {
    if (text_[i_] == '\n') {
      ++pos_.line;
      pos_.col = 1;
    } else {
      ++pos_.col;
    }
    ++i_;
  }
  absl::Status Error(Pos pos, absl::string_view what) const { return ErrorAt(source_, pos, what); }

  absl::string_view text_;
  absl::string_view source_;
  size_t i_ = 0;
  Pos pos_;
};

class SexpReader : private TextCursor {
 public:
  SexpReader(absl::string_view text, absl::string_view source) : TextCursor(text, source) {}

  // Exactly one form, with only blanks and comments around it.
  absl::StatusOr<Sexp> ReadDocument(absl::string_view expected) {
    SkipBlank();
    if (AtEnd()) return Error(Here(), absl::StrCat("empty input; expected ", expected));
    VAULT_ASSIGN_OR_RETURN(Sexp form, ReadForm(0));
    SkipBlank();
    if (!AtEnd()) {
      if (Peek() == ')') return Error(Here(), "unexpected ')'");
      return Error(Here(), "unexpected text after the first form");
    }
    return form;
  }

 private:
  static bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
  static bool IsDelimiter(char c) {
    return IsBlank(c) || c == '(' || c == ')' || c == '"' || c == ';';
  }

  void SkipBlank() {
    while (!AtEnd()) {
      if (IsBlank(Peek())) {
        Advance();
      } else if (Peek() == ';') {
        while (!AtEnd() && Peek() != '\n') Advance();
      } else {
        return;
      }
    }
  }

  // Called with !AtEnd() after SkipBlank().
  absl::StatusOr<Sexp> ReadForm(int depth) {
    char c = Peek();
    if (c == ')') return Error(Here(), "unexpected ')'");
    if (c == '"') return ReadString();
    if (c != '(') return ReadAtom();
    Sexp list;
    list.pos = Here();
    if (depth >= kMaxDepth) {
      return Error(list.pos, absl::StrCat("forms nested deeper than ", kMaxDepth, " levels"));
    }
    Advance();
    for (;;) {
      SkipBlank();
      if (AtEnd()) return Error(list.pos, "'(' is never closed");
      if (Peek() == ')') {
        Advance();
        return list;
      }
      VAULT_ASSIGN_OR_RETURN(Sexp item, ReadForm(depth + 1));
      list.items.push_back(std::move(item));
    }
  }

  absl::StatusOr<Sexp> ReadString() {
    Sexp s;
    s.type = Sexp::Type::kString;
    s.pos = Here();
    Advance();  // '"'
    for (;;) {
      if (AtEnd()) return Error(s.pos, "unterminated string");
      char c = Peek();
      if (c == '"') {
        Advance();
        break;
      }
      if (c == '\\') {
        Pos escape = Here();
        Advance();
        if (AtEnd()) return Error(s.pos, "unterminated string");
        char e = Peek();
        switch (e) {
          case '"':
          case '\\':
            s.text.push_back(e);
            break;
          case 'n':
            s.text.push_back('\n');
            break;
          case 't':
            s.text.push_back('\t');
            break;
          case 'r':
            s.text.push_back('\r');
            break;
          case 'x': {
            if (text_.size() - i_ < 3 || !absl::ascii_isxdigit(text_[i_ + 1]) ||
                !absl::ascii_isxdigit(text_[i_ + 2])) {
              return Error(escape, "\\x needs two hex digits");
            }
            s.text += absl::HexStringToBytes(text_.substr(i_ + 1, 2));
            Advance();
            Advance();
            break;
          }
          default:
            return Error(escape, absl::StrCat("unknown escape \\", DescribeByte(e),
                                              " (use \\\", \\\\, \\n, \\t, \\r or \\xHH)"));
        }
        Advance();
        continue;
      }
      unsigned char u = static_cast<unsigned char>(c);
      if ((u < 0x20 && c != '\n' && c != '\t' && c != '\r') || u == 0x7f) {
        return Error(Here(), absl::StrCat("control character ", DescribeByte(c),
                                          " in a string; write it as \\xHH"));
      }
      s.text.push_back(c);
      Advance();
    }
    if (!IsValidUtf8(s.text)) return Error(s.pos, "string is not valid UTF-8");
    return s;
  }

  absl::StatusOr<Sexp> ReadAtom() {
    Sexp atom;
    atom.pos = Here();
    size_t start = i_;
    while (!AtEnd() && !IsDelimiter(Peek())) {
      if (!IsSymbolChar(Peek())) {
        return Error(Here(), absl::StrCat("unexpected character ", DescribeByte(Peek()),
                                          " (bare symbols are [a-z0-9*._/+-]; quote other text)"));
      }
      Advance();
    }
    atom.text = std::string(text_.substr(start, i_ - start));
    atom.type = IsIntegerLiteral(atom.text) ? Sexp::Type::kInteger : Sexp::Type::kSymbol;
    return atom;
  }
};

// From S-expressions to messages.
class SexpMapper {
 public:
  explicit SexpMapper(absl::string_view source) : source_(source) {}

  absl::Status Error(const Sexp& at, absl::string_view what) const {
    return ErrorAt(source_, at.pos, what);
  }

  absl::StatusOr<AgentSpec> Agent(const Sexp& doc) const {
    if (doc.head() != "agent") {
      return Error(doc, absl::StrCat("expected (agent ...), found ", Describe(doc)));
    }
    AgentSpec spec;
    std::map<std::string, const Sexp*> seen;  // singleton slot → the form that filled it
    for (size_t i = 1; i < doc.items.size(); ++i) {
      const Sexp& form = doc.items[i];
      VAULT_RETURN_IF_ERROR(CheckForm(form, "agent"));
      absl::string_view head = form.head();
      std::string slot(head == "code-file" ? "code" : head);
      static constexpr absl::string_view kForms[] = {
          "purpose", "instructions", "code", "code-file", "capabilities", "constraints", "sandbox"};
      if (std::find(std::begin(kForms), std::end(kForms), head) == std::end(kForms)) {
        return Error(form, absl::StrCat("unknown form (", head, " ...) in (agent ...)"));
      }
      auto [it, inserted] = seen.emplace(slot, &form);
      if (!inserted) return Repeated(form, *it->second);

      if (head == "purpose") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_purpose(), OneString(form));
      } else if (head == "instructions") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_instructions(), OneString(form));
      } else if (head == "code") {
        VAULT_ASSIGN_OR_RETURN(std::string text, OneString(form));
        std::optional<vault::v1::Digest> digest = ParseDigest(text);
        if (!digest) {
          return Error(form.items[1],
                       absl::StrCat("bad digest ", Quoted(text), ": ", kDigestSyntax));
        }
        *spec.mutable_code_digest() = *std::move(digest);
      } else if (head == "code-file") {
        VAULT_ASSIGN_OR_RETURN(std::string file, OneString(form));
        if (file.empty()) return Error(form.items[1], "(code-file ...) is empty");
        spec.set_code_file(std::move(file));
      } else if (head == "capabilities") {
        for (size_t g = 1; g < form.items.size(); ++g) {
          VAULT_RETURN_IF_ERROR(CheckForm(form.items[g], "capabilities"));
          VAULT_ASSIGN_OR_RETURN(*spec.add_grants(), GrantForm(form.items[g]));
        }
        absl::Status all = ValidateGrants(spec.grants());  // the list's own limits
        if (!all.ok()) return Error(form, all.message());
      } else if (head == "constraints") {
        VAULT_RETURN_IF_ERROR(ConstraintsForm(form, spec.mutable_constraints()));
      } else {  // sandbox
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_sandbox(), OneName(form));
      }
    }
    return spec;
  }

  absl::StatusOr<std::vector<Grant>> Grants(const Sexp& doc) const {
    std::vector<Grant> grants;
    if (doc.head() == "capabilities") {
      for (size_t i = 1; i < doc.items.size(); ++i) {
        VAULT_RETURN_IF_ERROR(CheckForm(doc.items[i], "capabilities"));
        VAULT_ASSIGN_OR_RETURN(Grant grant, GrantForm(doc.items[i]));
        grants.push_back(std::move(grant));
      }
      absl::Status all = ValidateGrants(capability::Grants(grants.begin(), grants.end()));
      if (!all.ok()) return Error(doc, all.message());
      return grants;
    }
    if (IsGrantKind(doc.head())) {
      VAULT_ASSIGN_OR_RETURN(Grant grant, GrantForm(doc));
      grants.push_back(std::move(grant));
      return grants;
    }
    return Error(doc, absl::StrCat("expected (capabilities ...) or a grant such as "
                                   "(read (path \"/a\")), found ",
                                   Describe(doc)));
  }

  absl::Status ConstraintsDocument(const Sexp& doc, Constraints* out) const {
    if (doc.head() != "constraints" && FindConstraintName(doc.head()) != nullptr) {
      // A single limit, as vaultctl --constraints '(max-migrations 3)' gives it.
      Sexp wrapped;
      wrapped.pos = doc.pos;
      wrapped.items.push_back(doc.items[0]);
      wrapped.items[0].text = "constraints";
      wrapped.items.push_back(doc);
      return ConstraintsForm(wrapped, out);
    }
    if (doc.head() != "constraints") {
      return Error(doc, absl::StrCat("expected (constraints ...), found ", Describe(doc)));
    }
    return ConstraintsForm(doc, out);
  }

  // Sets one limit from `value` (a number or arithmetic), checking its range and the unit
  // conversion.
  absl::Status SetConstraint(const ConstraintName& name, const Sexp& value,
                             Constraints* out) const {
    const FieldDescriptor* field =
        Constraints::descriptor()->FindFieldByName(std::string(name.field));
    const Reflection* reflection = out->GetReflection();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT64: {
        VAULT_ASSIGN_OR_RETURN(uint64_t v, Eval<uint64_t>(value));
        uint64_t scaled;
        if (__builtin_mul_overflow(v, static_cast<uint64_t>(name.scale), &scaled)) {
          return Error(value,
                       absl::StrCat(name.name, " of ", v, " seconds overflows in milliseconds"));
        }
        reflection->SetUInt64(out, field, scaled);
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_UINT32: {
        VAULT_ASSIGN_OR_RETURN(uint64_t v, Eval<uint64_t>(value));
        if (v > std::numeric_limits<uint32_t>::max()) {
          return Error(value, absl::StrCat(name.name, " ", v, " is out of range (at most ",
                                           std::numeric_limits<uint32_t>::max(), ")"));
        }
        reflection->SetUInt32(out, field, static_cast<uint32_t>(v));
        return absl::OkStatus();
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        VAULT_ASSIGN_OR_RETURN(int64_t v, Eval<int64_t>(value));
        int64_t scaled;
        if (__builtin_mul_overflow(v, static_cast<int64_t>(name.scale), &scaled)) {
          return Error(value,
                       absl::StrCat(name.name, " of ", v, " seconds overflows in milliseconds"));
        }
        reflection->SetInt64(out, field, scaled);
        return absl::OkStatus();
      }
      default:
        return Error(value, absl::StrCat("internal: unexpected type of ", name.field));
    }
  }

  // A decimal literal, or (+ a b ...), (- a b), (* a b ...) on them; unsigned T refuses negative
  // values at every step.
  template <typename T>
  absl::StatusOr<T> Eval(const Sexp& e) const {
    if (e.type == Sexp::Type::kInteger) return Literal<T>(e);
    absl::string_view op = e.head();
    if (op.empty()) return Error(e, absl::StrCat("expected a number, found ", Describe(e)));
    if (op != "+" && op != "-" && op != "*") {
      return Error(e, absl::StrCat("unknown operator (", op,
                                   " ...); numbers combine with (+ ...), (- ...) and (* ...)"));
    }
    if (op == "-" ? e.arg_count() != 2 : e.arg_count() < 2) {
      return Error(e, op == "-" ? std::string("(- ...) takes two numbers")
                                : absl::StrCat("(", op, " ...) takes two or more numbers"));
    }
    VAULT_ASSIGN_OR_RETURN(T acc, Eval<T>(e.items[1]));
    for (size_t i = 2; i < e.items.size(); ++i) {
      VAULT_ASSIGN_OR_RETURN(T v, Eval<T>(e.items[i]));
      bool overflow = op == "+"   ? __builtin_add_overflow(acc, v, &acc)
                      : op == "-" ? __builtin_sub_overflow(acc, v, &acc)
                                  : __builtin_mul_overflow(acc, v, &acc);
      if (overflow) {
        if (std::is_unsigned_v<T> && op == "-") return Error(e, "(- ...) is negative");
        return Error(e, absl::StrCat("(", op, " ...) overflows"));
      }
    }
    return acc;
  }

 private:
  static bool IsGrantKind(absl::string_view head) {
    static constexpr absl::string_view kKinds[] = {
        "read", "write", "cas-read", "cas-write", "spawn", "network", "send", "receive", "migrate"};
    return std::find(std::begin(kKinds), std::end(kKinds), head) != std::end(kKinds);
  }

  // `x` is a form "(name ...)" inside (`where` ...).
  absl::Status CheckForm(const Sexp& x, absl::string_view where) const {
    if (!x.head().empty()) return absl::OkStatus();
    if (!x.is_list()) {
      return Error(
          x, absl::StrCat("expected a form (name ...) in (", where, " ...), found ", Describe(x)));
    }
    if (x.items.empty()) return Error(x, absl::StrCat("empty form () in (", where, " ...)"));
    return Error(x, absl::StrCat("a form starts with a name; found ", Describe(x.items[0])));
  }

  absl::Status Repeated(const Sexp& form, const Sexp& first) const {
    if (form.head() == first.head()) {
      return Error(form, absl::StrCat("repeated (", form.head(), " ...); the first is at ",
                                      PosText(first.pos)));
    }
    return Error(form, absl::StrCat("(", form.head(), " ...) conflicts with (", first.head(),
                                    " ...) at ", PosText(first.pos)));
  }

  absl::StatusOr<std::string> OneString(const Sexp& form) const {
    if (form.arg_count() != 1 || form.items[1].type != Sexp::Type::kString) {
      return Error(form, absl::StrCat("(", form.head(), " ...) takes one quoted string"));
    }
    return form.items[1].text;
  }

  absl::StatusOr<std::string> Name(const Sexp& x, absl::string_view form) const {
    if (x.type != Sexp::Type::kString && x.type != Sexp::Type::kSymbol) {
      return Error(x, absl::StrCat("(", form, " ...) takes names (strings or symbols), found ",
                                   Describe(x)));
    }
    return x.text;
  }

  absl::StatusOr<std::string> OneName(const Sexp& form) const {
    if (form.arg_count() != 1) {
      return Error(form, absl::StrCat("(", form.head(), " ...) takes one name"));
    }
    return Name(form.items[1], form.head());
  }

  template <typename T>
  absl::StatusOr<T> Literal(const Sexp& e) const {
    absl::string_view digits = e.text;
    bool negative = absl::ConsumePrefix(&digits, "-");
    uint64_t magnitude = 0;
    for (char c : digits) {
      if (__builtin_mul_overflow(magnitude, uint64_t{10}, &magnitude) ||
          __builtin_add_overflow(magnitude, static_cast<uint64_t>(c - '0'), &magnitude)) {
        return Error(e, absl::StrCat(Quoted(e.text), " is out of range"));
      }
    }
    if constexpr (std::is_unsigned_v<T>) {
      if (negative && magnitude != 0) return Error(e, absl::StrCat(e.text, " is negative"));
      return magnitude;
    } else {
      constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (!negative) {
        if (magnitude > kMax) return Error(e, absl::StrCat(Quoted(e.text), " is out of range"));
        return static_cast<int64_t>(magnitude);
      }
      if (magnitude > kMax + 1) return Error(e, absl::StrCat(Quoted(e.text), " is out of range"));
      if (magnitude == kMax + 1) return std::numeric_limits<int64_t>::min();
      return -static_cast<int64_t>(magnitude);
    }
  }

  absl::StatusOr<Grant> GrantForm(const Sexp& form) const {
    absl::string_view kind = form.head();
    Grant grant;
    std::vector<absl::string_view> allowed;
    if (kind == "read") {
      grant.set_kind(Grant::READ);
      allowed = {"path", "hash"};
    } else if (kind == "write") {
      grant.set_kind(Grant::WRITE);
      allowed = {"path"};
    } else if (kind == "cas-read") {
      grant.set_kind(Grant::CAS_READ);
    } else if (kind == "cas-write") {
      grant.set_kind(Grant::CAS_WRITE);
    } else if (kind == "spawn") {
      grant.set_kind(Grant::SPAWN);
    } else if (kind == "network") {
      grant.set_kind(Grant::NETWORK);
      allowed = {"host", "port"};
    } else if (kind == "send") {
      grant.set_kind(Grant::SEND);
      allowed = {"agent", "types"};
    } else if (kind == "receive") {
      grant.set_kind(Grant::RECEIVE);
      allowed = {"from", "types"};
    } else if (kind == "migrate") {
      grant.set_kind(Grant::MIGRATE);
      allowed = {"vaults"};
    } else {
      return Error(form, absl::StrCat("unknown grant (", kind,
                                      " ...); expected read, write, cas-read, cas-write, spawn, "
                                      "network, send, receive or migrate"));
    }
    if (allowed.empty() && form.arg_count() != 0) {
      return Error(form.items[1], absl::StrCat("(", kind, ") takes no arguments"));
    }

    std::map<std::string, const Sexp*> seen;
    for (size_t i = 1; i < form.items.size(); ++i) {
      const Sexp& sub = form.items[i];
      VAULT_RETURN_IF_ERROR(CheckForm(sub, kind));
      absl::string_view head = sub.head();
      if (std::find(allowed.begin(), allowed.end(), head) == allowed.end()) {
        return Error(sub, absl::StrCat("unknown form (", head, " ...) in (", kind, " ...)"));
      }
      auto [it, inserted] = seen.emplace(std::string(head), &sub);
      if (!inserted) return Repeated(sub, *it->second);
      if (head == "path") {
        VAULT_ASSIGN_OR_RETURN(*grant.mutable_path(), OneName(sub));
        // People write directories with a trailing '/' ("/vault/papers/"); the canonical form
        // has none. Only that one character is dropped: everything else is refused, not fixed.
        DropDirectorySlash(grant.mutable_path());
      } else if (head == "hash") {
        VAULT_ASSIGN_OR_RETURN(std::string text, OneString(sub));
        std::optional<std::string> hash = ParseHash(text);
        if (!hash)
          return Error(sub.items[1], absl::StrCat("bad hash ", Quoted(text), ": ", kHashSyntax));
        grant.set_hash(*std::move(hash));
      } else if (head == "host") {
        VAULT_ASSIGN_OR_RETURN(*grant.mutable_host(), OneName(sub));
      } else if (head == "port") {
        if (sub.arg_count() != 1) return Error(sub, "(port ...) takes one number");
        VAULT_ASSIGN_OR_RETURN(uint64_t port, Eval<uint64_t>(sub.items[1]));
        if (port > 65535) {
          return Error(sub.items[1],
                       absl::StrCat("port ", port, " is out of range (0-65535; 0 is any port)"));
        }
        grant.set_port(static_cast<uint32_t>(port));
      } else if (head == "agent" || head == "from") {
        VAULT_ASSIGN_OR_RETURN(*grant.mutable_agent(), OneName(sub));
      } else {  // vaults, types: a set of names
        if (head == "types" && sub.arg_count() == 0) {
          return Error(sub, "(types ...) takes one or more message types (omit it for any type)");
        }
        std::vector<std::string> names;
        for (size_t v = 1; v < sub.items.size(); ++v) {
          VAULT_ASSIGN_OR_RETURN(std::string name, Name(sub.items[v], head));
          names.push_back(std::move(name));
        }
        std::sort(names.begin(), names.end());
        names.erase(std::unique(names.begin(), names.end()), names.end());
        for (std::string& name : names) {
          if (head == "types") {
            grant.add_message_types(std::move(name));
          } else {
            grant.add_vaults(std::move(name));
          }
        }
      }
    }

    absl::string_view needs;
    if (kind == "read" && !seen.count("path") && !seen.count("hash"))
      needs = "(path ...) or (hash ...)";
    if (kind == "write" && !seen.count("path")) needs = "(path ...)";
    if (kind == "network" && !seen.count("host")) needs = "(host ...)";
    if (kind == "send" && !seen.count("agent")) needs = "(agent ...)";
    if (kind == "receive" && !seen.count("from")) needs = "(from ...)";
    if (kind == "migrate" && !seen.count("vaults")) needs = "(vaults ...)";
    if (!needs.empty()) return Error(form, absl::StrCat("(", kind, " ...) needs ", needs));

    absl::Status valid = CheckGrant(grant);
    if (!valid.ok()) return Error(form, valid.message());
    return grant;
  }

  absl::Status ConstraintsForm(const Sexp& form, Constraints* out) const {
    std::map<std::string, const Sexp*> seen;  // field → the form that set it
    for (size_t i = 1; i < form.items.size(); ++i) {
      const Sexp& item = form.items[i];
      VAULT_RETURN_IF_ERROR(CheckForm(item, "constraints"));
      const ConstraintName* name = FindConstraintName(item.head());
      if (name == nullptr) {
        return Error(item,
                     absl::StrCat("unknown form (", item.head(), " ...) in (constraints ...)"));
      }
      auto [it, inserted] = seen.emplace(std::string(name->field), &item);
      if (!inserted) return Repeated(item, *it->second);
      if (item.arg_count() != 1) {
        return Error(item, absl::StrCat("(", item.head(), " ...) takes one number"));
      }
      VAULT_RETURN_IF_ERROR(SetConstraint(*name, item.items[1], out));
    }
    return absl::OkStatus();
  }

  absl::string_view source_;
};

// ------------------------------------------------------------------------------------------------
// Printing S-expressions.

std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
        } else {
          out.push_back(c);
        }
    }
  }
  out += "\"";
  return out;
}

// A bare symbol when it reads back as the same symbol, else a string.
std::string NameText(absl::string_view s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), IsSymbolChar) && !IsIntegerLiteral(s)) {
    return std::string(s);
  }
  return Quote(s);
}

std::string HashText(absl::string_view hash) {
  return absl::StrCat("sha256:", absl::BytesToHexString(hash));
}

// "(head\n  item\n  item)" with items indented by `indent` + 2.
std::string Block(absl::string_view head, const std::vector<std::string>& items, int indent) {
  std::string out = absl::StrCat("(", head);
  for (const std::string& item : items) {
    absl::StrAppend(&out, "\n", std::string(indent + 2, ' '), item);
  }
  out += ")";
  return out;
}

std::string GrantText(const Grant& g) {
  switch (g.kind()) {
    case Grant::READ: {
      std::string out = "(read";
      if (!g.path().empty() || g.hash().empty())
        absl::StrAppend(&out, " (path ", Quote(g.path()), ")");
      if (!g.hash().empty()) absl::StrAppend(&out, " (hash ", Quote(HashText(g.hash())), ")");
      return out + ")";
    }
    case Grant::WRITE:
      return absl::StrCat("(write (path ", Quote(g.path()), "))");
    case Grant::CAS_READ:
      return "(cas-read)";
    case Grant::CAS_WRITE:
      return "(cas-write)";
    case Grant::SPAWN:
      return "(spawn)";
    case Grant::NETWORK: {
      std::string out = absl::StrCat("(network (host ", Quote(g.host()), ")");
      if (g.port() != 0) absl::StrAppend(&out, " (port ", g.port(), ")");
      return out + ")";
    }
    case Grant::SEND:
    case Grant::RECEIVE: {
      std::string out = g.kind() == Grant::SEND ? absl::StrCat("(send (agent ", Quote(g.agent()))
                                                : absl::StrCat("(receive (from ", Quote(g.agent()));
      out += ")";
      if (g.message_types_size() > 0) {
        out += " (types";
        for (const std::string& t : g.message_types()) absl::StrAppend(&out, " ", NameText(t));
        out += ")";
      }
      return out + ")";
    }
    case Grant::MIGRATE: {
      std::string out = "(migrate (vaults";
      for (const std::string& v : g.vaults()) absl::StrAppend(&out, " ", NameText(v));
      return out + "))";
    }
    default:
      // Not a valid grant: printed for a human, does not parse.
      return absl::StrCat("(invalid-grant-kind ", static_cast<int>(g.kind()), ")");
  }
}

std::vector<std::string> GrantItems(const Grants& grants) {
  std::vector<std::string> items;
  for (const Grant& g : grants) items.push_back(GrantText(g));
  return items;
}

std::vector<std::string> ConstraintItems(const Constraints& c) {
  std::vector<std::string> items;
  const Descriptor* descriptor = Constraints::descriptor();
  const Reflection* reflection = c.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (!reflection->HasField(c, field)) continue;
    const ConstraintName* seconds = nullptr;  // the form in seconds, when there is one
    const ConstraintName* exact = nullptr;    // the form in the field's own unit
    for (const ConstraintName& name : kConstraintNames) {
      if (name.field == field->name()) (name.scale == 1000 ? seconds : exact) = &name;
    }
    if (exact == nullptr) continue;
    std::string item;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v = reflection->GetUInt64(c, field);
        item = seconds != nullptr && v % 1000 == 0
                   ? absl::StrCat("(", seconds->name, " ", v / 1000, ")")
                   : absl::StrCat("(", exact->name, " ", v, ")");
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t v = reflection->GetInt64(c, field);
        item = seconds != nullptr && v % 1000 == 0
                   ? absl::StrCat("(", seconds->name, " ", v / 1000, ")")
                   : absl::StrCat("(", exact->name, " ", v, ")");
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT32:
        item = absl::StrCat("(", exact->name, " ", reflection->GetUInt32(c, field), ")");
        break;
      default:
        continue;
    }
    items.push_back(std::move(item));
  }
  return items;
}

// ------------------------------------------------------------------------------------------------
// Semantic checks of messages parsed from JSON or text format. A problem names a field path
// ("grants[1]", "code_digest.sha256") that each format locates in its own text.

struct Problem {
  std::string path;
  std::string what;
};

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

// ------------------------------------------------------------------------------------------------
// JSON: our own syntax check (protobuf's parser reports no positions), then protobuf's.

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

template <typename M>
absl::StatusOr<M> ParseJson(absl::string_view text, absl::string_view source,
                            std::optional<Problem> (*check)(const M&)) {
  JsonReader reader(text, source);
  VAULT_ASSIGN_OR_RETURN(JsonValue root, reader.ReadDocument());
  const Descriptor* descriptor = M::descriptor();
  VAULT_RETURN_IF_ERROR(CheckJsonShape(root, descriptor, source));
  M message;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  google::protobuf::util::Status status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &message, options);
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
  if (std::optional<Problem> problem = check(message)) {
    return ErrorAt(source, ResolveJsonPath(root, descriptor, problem->path), ProblemText(*problem));
  }
  return message;
}

// ------------------------------------------------------------------------------------------------
// Protobuf text format.

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

template <typename M>
absl::StatusOr<M> ParseText(absl::string_view text, absl::string_view source,
                            std::optional<Problem> (*check)(const M&)) {
  M message;
  TextErrors errors;
  google::protobuf::TextFormat::ParseInfoTree tree;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  parser.SetRecursionLimit(kMaxDepth);
  if (!parser.ParseFromString(std::string(text), &message)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", errors.first().value_or("1:1: invalid text format")));
  }
  if (std::optional<Problem> problem = check(message)) {
    // The document's first non-blank byte when the path is not found.
    size_t first = text.find_first_not_of(" \t\r\n");
    Pos start = PosAt(text, first == absl::string_view::npos ? 0 : first);
    return ErrorAt(source, ResolveTextPath(&tree, M::descriptor(), problem->path, start),
                   ProblemText(*problem));
  }
  return message;
}

// ------------------------------------------------------------------------------------------------
// Format detection and the vaultctl shorthand.

// The first byte that is not blank or in a ';' / '#' comment, or 0.
char FirstSignificant(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
    } else if (c == ';' || c == '#') {
      while (i < text.size() && text[i] != '\n') ++i;
    } else {
      return c;
    }
  }
  return 0;
}

TextFormat Detect(absl::string_view text) {
  char c = FirstSignificant(text);
  if (c == '(') return TextFormat::kSexpr;
  if (c == '{') return TextFormat::kJson;
  return TextFormat::kTextproto;
}

bool IsShorthandWord(absl::string_view word) {
  return !word.empty() && absl::ascii_islower(word[0]) &&
         std::all_of(word.begin(), word.end(),
                     [](char c) { return absl::ascii_islower(c) || c == '-'; });
}

// [begin, end) of `text` without surrounding whitespace.
std::pair<size_t, size_t> Trimmed(absl::string_view text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == absl::string_view::npos) return {text.size(), text.size()};
  size_t end = text.find_last_not_of(" \t\r\n") + 1;
  return {begin, end};
}

absl::StatusOr<Grant> GrantFromShorthand(absl::string_view text, absl::string_view source) {
  const std::pair<size_t, size_t> span = Trimmed(text);  // not a structured binding: captured
  const size_t begin = span.first;
  absl::string_view s = text.substr(begin, span.second - begin);
  auto at = [&](size_t offset) { return PosAt(text, begin + offset); };
  size_t colon = s.find(':');
  absl::string_view kind = s.substr(0, colon);
  bool has_arg = colon != absl::string_view::npos;
  absl::string_view arg = has_arg ? s.substr(colon + 1) : absl::string_view();
  size_t arg_offset = has_arg ? colon + 1 : 0;

  Grant grant;
  // "a,b,a" at `offset` of `s`: sorted, without duplicates; an empty name is an error.
  auto name_list = [&](absl::string_view list, absl::string_view what,
                       size_t offset) -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> names;
    for (absl::string_view name : absl::StrSplit(list, ',')) {
      if (name.empty()) return ErrorAt(source, at(offset), absl::StrCat("empty ", what));
      names.emplace_back(name);
      offset += name.size() + 1;
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  };
  auto need = [&](absl::string_view what, absl::string_view example) -> absl::Status {
    if (!arg.empty()) return absl::OkStatus();
    return ErrorAt(source, at(has_arg ? arg_offset : 0),
                   absl::StrCat(kind, " needs ", what, ", e.g. ", example));
  };
  if (kind == "read" || kind == "write") {
    VAULT_RETURN_IF_ERROR(need("a path", absl::StrCat(kind, ":/vault/pub")));
    grant.set_kind(kind == "read" ? Grant::READ : Grant::WRITE);
    grant.set_path(std::string(arg));
    DropDirectorySlash(grant.mutable_path());
  } else if (kind == "read-hash") {
    VAULT_RETURN_IF_ERROR(need("a hash", "read-hash:sha256:<64 hex digits>"));
    std::optional<std::string> hash = ParseHash(arg);
    if (!hash) {
      return ErrorAt(source, at(arg_offset),
                     absl::StrCat("bad hash ", Quoted(arg), ": ", kHashSyntax));
    }
    grant.set_kind(Grant::READ);
    grant.set_hash(*std::move(hash));
  } else if (kind == "cas-read" || kind == "cas-write" || kind == "spawn") {
    if (has_arg) return ErrorAt(source, at(colon), absl::StrCat(kind, " takes no argument"));
    grant.set_kind(kind == "cas-read"    ? Grant::CAS_READ
                   : kind == "cas-write" ? Grant::CAS_WRITE
                                         : Grant::SPAWN);
  } else if (kind == "network") {
    VAULT_RETURN_IF_ERROR(need("a host", "network:*.example.com:443"));
    grant.set_kind(Grant::NETWORK);
    size_t port_colon = arg.rfind(':');
    grant.set_host(std::string(arg.substr(0, port_colon)));
    if (port_colon != absl::string_view::npos) {
      absl::string_view port_text = arg.substr(port_colon + 1);
      uint32_t port = 0;
      if (port_text != "*" &&
          (!IsDigits(port_text) || !absl::SimpleAtoi(port_text, &port) || port > 65535)) {
        return ErrorAt(
            source, at(arg_offset + port_colon + 1),
            absl::StrCat("bad port ", Quoted(port_text), ": expected 0-65535 or * (any)"));
      }
      grant.set_port(port);
    }
  } else if (kind == "send" || kind == "receive") {
    VAULT_RETURN_IF_ERROR(need("an agent id or *", absl::StrCat(kind, ":agent-7")));
    grant.set_kind(kind == "send" ? Grant::SEND : Grant::RECEIVE);
    // "AGENT" or "AGENT:TYPE,TYPE...": agent ids never contain ':'.
    const size_t types_colon = arg.find(':');
    grant.set_agent(std::string(arg.substr(0, types_colon)));
    if (types_colon != absl::string_view::npos) {
      VAULT_ASSIGN_OR_RETURN(
          std::vector<std::string> types,
          name_list(arg.substr(types_colon + 1), "message type", arg_offset + types_colon + 1));
      for (std::string& type : types) grant.add_message_types(std::move(type));
    }
  } else if (kind == "migrate") {
    VAULT_RETURN_IF_ERROR(need("vault names", "migrate:vault-b,vault-c"));
    grant.set_kind(Grant::MIGRATE);
    VAULT_ASSIGN_OR_RETURN(std::vector<std::string> vaults,
                           name_list(arg, "vault name", arg_offset));
    for (std::string& vault : vaults) grant.add_vaults(std::move(vault));
  } else {
    return ErrorAt(source, at(0),
                   absl::StrCat("unknown grant kind ", Quoted(kind),
                                "; expected read, write, read-hash, cas-read, cas-write, spawn, "
                                "network, send, receive or migrate"));
  }
  absl::Status valid = CheckGrant(grant);
  if (!valid.ok()) return ErrorAt(source, at(has_arg ? arg_offset : 0), valid.message());
  return grant;
}

absl::StatusOr<Constraints> ConstraintsFromShorthand(absl::string_view text,
                                                     absl::string_view source) {
  Constraints constraints;
  SexpMapper mapper(source);
  std::map<std::string, std::string> seen;  // field → the key that set it
  size_t offset = 0;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    size_t item_offset = offset;
    offset += item.size() + 1;
    auto [b, e] = Trimmed(item);
    item_offset += b;
    item = item.substr(b, e - b);
    Pos pos = PosAt(text, item_offset);
    if (item.empty()) return ErrorAt(source, pos, "empty item; expected key=value");
    size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      return ErrorAt(source, pos, absl::StrCat("expected key=value, found ", Quoted(item)));
    }
    absl::string_view key = absl::StripTrailingAsciiWhitespace(item.substr(0, eq));
    const ConstraintName* name = FindConstraintName(key);
    if (name == nullptr) {
      return ErrorAt(
          source, pos,
          absl::StrCat("unknown constraint ", Quoted(key), "; expected ", ConstraintNameList()));
    }
    auto [it, inserted] = seen.emplace(std::string(name->field), std::string(key));
    if (!inserted) {
      return ErrorAt(source, pos,
                     it->second == key ? absl::StrCat("repeated ", key)
                                       : absl::StrCat(key, " conflicts with ", it->second));
    }
    size_t value_offset = eq + 1;
    while (value_offset < item.size() &&
           (item[value_offset] == ' ' || item[value_offset] == '\t')) {
      ++value_offset;
    }
    Sexp value;
    value.type = Sexp::Type::kInteger;
    value.pos = PosAt(text, item_offset + value_offset);
    value.text = std::string(item.substr(value_offset));
    if (!IsIntegerLiteral(value.text)) {
      return ErrorAt(source, value.pos,
                     absl::StrCat(key, " takes a decimal number, found ", Quoted(value.text)));
    }
    VAULT_RETURN_IF_ERROR(mapper.SetConstraint(*name, value, &constraints));
  }
  return constraints;
}

}  // namespace

absl::StatusOr<AgentSpec> ParseAgentSpec(absl::string_view text, absl::string_view source,
                                         TextFormat format) {
  VAULT_RETURN_IF_ERROR(CheckSize(text, source));
  if (format == TextFormat::kAuto) format = Detect(text);
  switch (format) {
    case TextFormat::kSexpr: {
      VAULT_ASSIGN_OR_RETURN(Sexp doc, SexpReader(text, source).ReadDocument("(agent ...)"));
      return SexpMapper(source).Agent(doc);
    }
    case TextFormat::kJson:
      return ParseJson<AgentSpec>(text, source, &CheckSpec);
    case TextFormat::kTextproto:
    case TextFormat::kAuto:
      break;
  }
  return ParseText<AgentSpec>(text, source, &CheckSpec);
}

absl::StatusOr<std::vector<Grant>> ParseGrants(absl::string_view text, absl::string_view source) {
  VAULT_RETURN_IF_ERROR(CheckSize(text, source));
  switch (Detect(text)) {
    case TextFormat::kSexpr: {
      VAULT_ASSIGN_OR_RETURN(
          Sexp doc, SexpReader(text, source).ReadDocument("(capabilities ...) or a grant form"));
      return SexpMapper(source).Grants(doc);
    }
    case TextFormat::kJson: {
      VAULT_ASSIGN_OR_RETURN(Grant grant, ParseJson<Grant>(text, source, &CheckOneGrant));
      return std::vector<Grant>{std::move(grant)};
    }
    default:
      break;
  }
  auto [begin, end] = Trimmed(text);
  if (begin == end) {
    return ErrorAt(source, PosAt(text, begin),
                   "empty input; expected a grant such as read:/vault/pub");
  }
  absl::string_view trimmed = text.substr(begin, end - begin);
  absl::string_view word = trimmed.substr(0, trimmed.find(':'));
  if (IsShorthandWord(word) && Grant::descriptor()->FindFieldByName(std::string(word)) == nullptr) {
    VAULT_ASSIGN_OR_RETURN(Grant grant, GrantFromShorthand(text, source));
    return std::vector<Grant>{std::move(grant)};
  }
  VAULT_ASSIGN_OR_RETURN(Grant grant, ParseText<Grant>(text, source, &CheckOneGrant));
  return std::vector<Grant>{std::move(grant)};
}

absl::StatusOr<Constraints> ParseConstraints(absl::string_view text, absl::string_view source) {
  VAULT_RETURN_IF_ERROR(CheckSize(text, source));
  switch (Detect(text)) {
    case TextFormat::kSexpr: {
      VAULT_ASSIGN_OR_RETURN(Sexp doc, SexpReader(text, source).ReadDocument("(constraints ...)"));
      Constraints constraints;
      VAULT_RETURN_IF_ERROR(SexpMapper(source).ConstraintsDocument(doc, &constraints));
      return constraints;
    }
    case TextFormat::kJson:
      return ParseJson<Constraints>(text, source, &CheckNothing);
    default:
      break;
  }
  auto [begin, end] = Trimmed(text);
  absl::string_view trimmed = text.substr(begin, end - begin);
  size_t eq = trimmed.find('=');
  if (eq != absl::string_view::npos &&
      IsShorthandWord(absl::StripTrailingAsciiWhitespace(trimmed.substr(0, eq)))) {
    return ConstraintsFromShorthand(text, source);
  }
  return ParseText<Constraints>(text, source, &CheckNothing);
}

std::string AgentSpecToSexpr(const AgentSpec& spec) {
  std::vector<std::string> items;
  if (!spec.purpose().empty())
    items.push_back(absl::StrCat("(purpose ", Quote(spec.purpose()), ")"));
  if (!spec.instructions().empty()) {
    items.push_back(absl::StrCat("(instructions ", Quote(spec.instructions()), ")"));
  }
  if (spec.has_code_digest()) {
    items.push_back(absl::StrCat("(code \"", HashText(spec.code_digest().sha256()), "/",
                                 spec.code_digest().size(), "\")"));
  } else if (spec.has_code_file()) {
    items.push_back(absl::StrCat("(code-file ", Quote(spec.code_file()), ")"));
  }
  if (spec.grants_size() > 0) items.push_back(Block("capabilities", GrantItems(spec.grants()), 2));
  if (spec.has_constraints()) {
    items.push_back(Block("constraints", ConstraintItems(spec.constraints()), 2));
  }
  if (!spec.sandbox().empty())
    items.push_back(absl::StrCat("(sandbox ", NameText(spec.sandbox()), ")"));
  return Block("agent", items, 0);
}

std::string GrantsToSexpr(const std::vector<Grant>& grants) {
  std::vector<std::string> items;
  for (const Grant& g : grants) items.push_back(GrantText(g));
  return Block("capabilities", items, 0);
}

std::string ConstraintsToSexpr(const Constraints& constraints) {
  return Block("constraints", ConstraintItems(constraints), 0);
}

}  // namespace vault::capability
