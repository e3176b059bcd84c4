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
    case Sexp::Type::kBoolean:
      return absl::StrCat("the boolean ", x.text);
    case Sexp::Type::kCode:
      return "Scheme code";
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
      // The arguments of (code ...) in a document's top form are the agent's Scheme code,
      // read by Scheme's rules; only a string (a digest) is read by ours.
      if (depth == 1 && list.items.size() == 1 && list.head() == "code" && Peek() != '"') {
        VAULT_ASSIGN_OR_RETURN(Sexp code, ReadCodeDatum());
        list.items.push_back(std::move(code));
        continue;
      }
      VAULT_ASSIGN_OR_RETURN(Sexp item, ReadForm(depth + 1));
      list.items.push_back(std::move(item));
    }
  }

  // One Scheme datum, by Scheme's lexical rules far enough to find where it ends: prefixes
  // (' ` , ,@ #' #` #, #,@), lists and vectors with (), [] or #( and #u8(, strings with any
  // backslash escape, characters (#\( is not a parenthesis), |symbols|, comments (; #| |# #;).
  absl::StatusOr<Sexp> ReadCodeDatum() {
    Sexp code;
    code.type = Sexp::Type::kCode;
    code.pos = Here();
    const size_t start = i_;
    VAULT_RETURN_IF_ERROR(SkipSchemeDatum(0));
    code.text = std::string(text_.substr(start, i_ - start));
    if (!IsValidUtf8(code.text)) return Error(code.pos, "the code is not valid UTF-8");
    return code;
  }

  // Skips Scheme blanks and comments (; to the end of the line, nested #| |#, #; datum).
  absl::Status SkipSchemeBlank(int depth) {
    while (!AtEnd()) {
      if (IsBlank(Peek())) {
        Advance();
      } else if (Peek() == ';') {
        while (!AtEnd() && Peek() != '\n') Advance();
      } else if (LookingAt("#|")) {
        const Pos open = Here();
        int nesting = 0;
        do {
          if (AtEnd()) return Error(open, "'#|' comment is never closed");
          if (LookingAt("#|")) {
            ++nesting;
            Advance();
          } else if (LookingAt("|#")) {
            --nesting;
            Advance();
          }
          Advance();
        } while (nesting > 0);
      } else if (LookingAt("#;")) {
        Advance();
        Advance();
        VAULT_RETURN_IF_ERROR(SkipSchemeBlank(depth));
        VAULT_RETURN_IF_ERROR(SkipSchemeDatum(depth + 1));
      } else {
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

  bool LookingAt(absl::string_view s) const { return text_.substr(i_, s.size()) == s; }

  // Called at the start of a datum (after blanks).
  absl::Status SkipSchemeDatum(int depth) {
    if (depth >= kMaxDepth) {
      return Error(Here(), absl::StrCat("code nested deeper than ", kMaxDepth, " levels"));
    }
    if (AtEnd()) return Error(Here(), "expected Scheme code, found the end of the input");
    const Pos at = Here();
    const size_t start = i_;
    for (absl::string_view prefix : {",@", "#,@", "#'", "#`", "#,", "'", "`", ","}) {
      if (LookingAt(prefix)) {
        for (size_t k = 0; k < prefix.size(); ++k) Advance();
        VAULT_RETURN_IF_ERROR(SkipSchemeBlank(depth));
        return SkipSchemeDatum(depth + 1);
      }
    }
    char close = 0;
    if (Peek() == '(' || Peek() == '[') {
      close = Peek() == '(' ? ')' : ']';
      Advance();
    } else if (LookingAt("#(")) {
      close = ')';
      Advance();
      Advance();
    } else if (LookingAt("#u8(") || LookingAt("#vu8(")) {
      close = ')';
      while (Peek() != '(') Advance();
      Advance();
    }
    if (close != 0) {
      for (;;) {
        VAULT_RETURN_IF_ERROR(SkipSchemeBlank(depth));
        if (AtEnd()) return Error(at, "'(' in the code is never closed");
        if (Peek() == ')' || Peek() == ']') {
          if (Peek() != close) return Error(Here(), "the code's brackets do not match");
          Advance();
          return absl::OkStatus();
        }
        VAULT_RETURN_IF_ERROR(SkipSchemeDatum(depth + 1));
      }
    }
    if (Peek() == ')' || Peek() == ']') return Error(Here(), "unexpected ')' in the code");
    if (Peek() == '"' || Peek() == '|') {
      const char quote = Peek();
      Advance();
      for (;;) {
        if (AtEnd()) {
          return Error(at, quote == '"' ? "unterminated string in the code"
                                        : "unterminated |symbol| in the code");
        }
        const char c = Peek();
        Advance();
        if (c == quote) return absl::OkStatus();
        if (c == '\\' && !AtEnd()) Advance();
      }
    }
    if (LookingAt("#\\")) {  // a character: #\x, #\(, #\space, #\x41
      Advance();
      Advance();
      if (AtEnd()) return Error(at, "#\\ needs a character");
      Advance();
    }
    // An atom: a symbol, number, boolean, keyword or character name, up to a delimiter.
    while (!AtEnd() && !IsBlank(Peek()) && Peek() != '(' && Peek() != ')' && Peek() != '[' &&
           Peek() != ']' && Peek() != '"' && Peek() != ';') {
      Advance();
    }
    if (i_ == start) return Error(at, "expected Scheme code");
    return absl::OkStatus();
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
    if (Peek() == '#') {  // #t, #f, #true, #false
      Advance();
      while (!AtEnd() && !IsDelimiter(Peek())) Advance();
      const absl::string_view word = text_.substr(start, i_ - start);
      if (word == "#t" || word == "#true" || word == "#f" || word == "#false") {
        atom.type = Sexp::Type::kBoolean;
        atom.text = std::string(word.substr(0, 2));
        return atom;
      }
      return Error(atom.pos, absl::StrCat("unexpected ", Quoted(word),
                                          " (outside (code ...), '#' starts only #t and #f)"));
    }
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
