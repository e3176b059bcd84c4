// The S-expression reader: text -> Sexp, every node with its position.
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "capability/internal/sexpr.h"
#include "capability/internal/text_cursor.h"
#include "common/status_macros.h"

namespace vault::capability::internal {

using text::CheckGrant;
using text::DescribeByte;
using text::ErrorAt;
using text::IsIntegerLiteral;
using text::IsSymbolChar;
using text::IsValidUtf8;
using text::kMaxDepth;
using text::Pos;
using text::PosAt;
using text::Quoted;

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

namespace {

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

}  // namespace

absl::StatusOr<Sexp> ReadSexpDocument(absl::string_view text, absl::string_view source,
                                      absl::string_view expected) {
  return SexpReader(text, source).ReadDocument(expected);
}

}  // namespace vault::capability::internal
