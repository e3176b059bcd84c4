// capability/internal/sexpr: the RFC's S-expression form: a reader (text -> Sexp, with positions)
// and a mapper (Sexp -> AgentSpec, grants, constraints). Private to capability/; text_form.h is the
// public entry.
#ifndef VAULT_CAPABILITY_INTERNAL_SEXPR_H_
#define VAULT_CAPABILITY_INTERNAL_SEXPR_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capability/text_form.h"
#include "capability/text_syntax.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability::internal {

struct Sexp {
  // kBoolean: #t or #f (text "#t" / "#f"; #true and #false read as these). kCode: a Scheme datum
  // inside (code ...) other than a string, kept as its exact source text (the Scheme runner
  // reads it, with Scheme's full syntax), e.g. "'(lambda () (loop))".
  enum class Type { kList, kString, kSymbol, kInteger, kBoolean, kCode };
  Type type = Type::kList;
  text::Pos pos;
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

// "the string \"x\"", "the symbol x", "(name ...)": for error messages.
std::string Describe(const Sexp& x);

// Exactly one form, with only blanks and comments around it; `expected` names it for the error
// on an empty input.
absl::StatusOr<Sexp> ReadSexpDocument(absl::string_view text, absl::string_view source,
                                      absl::string_view expected);

// (agent ...) or (spawn-agent ...); `options` and `warnings` may be null.
absl::StatusOr<vault::v1::AgentSpec> SexpToAgentSpec(const Sexp& doc, absl::string_view source,
                                                     const SpecOptions* options = nullptr,
                                                     std::vector<std::string>* warnings = nullptr);
// (capabilities ...) or one grant form.
absl::StatusOr<std::vector<vault::v1::Grant>> SexpToGrants(const Sexp& doc,
                                                           absl::string_view source);
// (constraints ...) or one limit form.
absl::Status SexpToConstraints(const Sexp& doc, absl::string_view source,
                               vault::v1::Constraints* out);

}  // namespace vault::capability::internal

#endif  // VAULT_CAPABILITY_INTERNAL_SEXPR_H_
