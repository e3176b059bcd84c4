// capability/internal/text_cursor: a position in a text being read, shared by the S-expression
// and JSON readers: the byte index and its 1-based line and column, for error messages.
// Private to capability/.
#ifndef VAULT_CAPABILITY_INTERNAL_TEXT_CURSOR_H_
#define VAULT_CAPABILITY_INTERNAL_TEXT_CURSOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "capability/text_syntax.h"

namespace vault::capability::internal {

class TextCursor {
 protected:
  TextCursor(absl::string_view text, absl::string_view source) : text_(text), source_(source) {}

  bool AtEnd() const { return i_ >= text_.size(); }
  char Peek() const { return text_[i_]; }
  text::Pos Here() const { return pos_; }
  void Advance() {
    if (text_[i_] == '\n') {
      ++pos_.line;
      pos_.col = 1;
    } else {
      ++pos_.col;
    }
    ++i_;
  }
  absl::Status Error(text::Pos pos, absl::string_view what) const {
    return text::ErrorAt(source_, pos, what);
  }

  absl::string_view text_;
  absl::string_view source_;
  size_t i_ = 0;
  text::Pos pos_;
};

}  // namespace vault::capability::internal

#endif  // VAULT_CAPABILITY_INTERNAL_TEXT_CURSOR_H_
