// The S-expression mapper: Sexp -> AgentSpec, grants and constraints, with the RFC's forms and
// the checks every format shares.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "capability/grant.h"
#include "capability/internal/sexpr.h"
#include "capability/text_form.h"
#include "common/status_macros.h"
#include "google/protobuf/descriptor.h"

namespace vault::capability::internal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Reflection;
using text::CheckGrant;
using text::ConstraintName;
using text::ConstraintNameList;
using text::DescribeByte;
using text::DropDirectorySlash;
using text::ErrorAt;
using text::FindConstraintName;
using text::IsIntegerLiteral;
using text::IsSymbolChar;
using text::IsValidUtf8;
using text::kDigestSyntax;
using text::kHashSyntax;
using text::kMaxDepth;
using text::ParseDigest;
using text::ParseHash;
using text::Pos;
using text::PosAt;
using text::Quoted;
using vault::v1::AgentSpec;
using vault::v1::Constraints;
using vault::v1::Grant;

// From S-expressions to messages.
class SexpMapper {
 public:
  explicit SexpMapper(absl::string_view source, const SpecOptions* options = nullptr,
                      std::vector<std::string>* warnings = nullptr)
      : source_(source), options_(options), warnings_(warnings) {}

  absl::Status Error(const Sexp& at, absl::string_view what) const {
    return ErrorAt(source_, at.pos, what);
  }
  void Warn(const Sexp& at, absl::string_view what) const {
    if (warnings_ != nullptr) {
      warnings_->push_back(std::string(ErrorAt(source_, at.pos, what).message()));
    }
  }

  // (agent ...), or the RFC's (spawn-agent ...): the same forms.
  absl::StatusOr<AgentSpec> Agent(const Sexp& doc) const {
    if (doc.head() != "agent" && doc.head() != "spawn-agent") {
      return Error(
          doc, absl::StrCat("expected (agent ...) or (spawn-agent ...), found ", Describe(doc)));
    }
    const std::string top(doc.head());
    AgentSpec spec;
    std::map<std::string, const Sexp*> seen;  // singleton slot → the form that filled it
    for (size_t i = 1; i < doc.items.size(); ++i) {
      const Sexp& form = doc.items[i];
      VAULT_RETURN_IF_ERROR(CheckForm(form, top));
      absl::string_view head = form.head();
      std::string slot(head == "code-file" ? "code" : head);
      static constexpr absl::string_view kForms[] = {
          "purpose", "instructions", "code",  "code-file", "capabilities", "constraints",
          "sandbox", "id",           "name",  "groups",    "spawned-by",   "status",
          "args",    "env",          "image", "command"};
      if (std::find(std::begin(kForms), std::end(kForms), head) == std::end(kForms)) {
        return Error(form, absl::StrCat("unknown form (", head, " ...) in (", top,
                                        " ...); the forms are purpose, instructions, code, "
                                        "code-file, capabilities, constraints, sandbox, id, "
                                        "name, groups, spawned-by, status, args, env, image, "
                                        "command"));
      }
      auto [it, inserted] = seen.emplace(slot, &form);
      if (!inserted) return Repeated(form, *it->second);

      if (head == "purpose") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_purpose(), OneString(form));
      } else if (head == "instructions") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_instructions(), OneString(form));
      } else if (head == "code") {
        VAULT_RETURN_IF_ERROR(CodeForm(form, &spec));
      } else if (head == "code-file") {
        VAULT_ASSIGN_OR_RETURN(std::string file, OneString(form));
        if (file.empty()) return Error(form.items[1], "(code-file ...) is empty");
        spec.set_code_file(std::move(file));
      } else if (head == "capabilities") {
        for (size_t g = 1; g < form.items.size(); ++g) {
          VAULT_RETURN_IF_ERROR(CheckForm(form.items[g], "capabilities"));
          VAULT_ASSIGN_OR_RETURN(std::vector<Grant> grants, GrantForms(form.items[g]));
          for (Grant& grant : grants) *spec.add_grants() = std::move(grant);
        }
        absl::Status all = ValidateGrants(spec.grants());  // the list's own limits
        if (!all.ok()) return Error(form, all.message());
      } else if (head == "constraints") {
        VAULT_RETURN_IF_ERROR(ConstraintsForm(form, spec.mutable_constraints()));
      } else if (head == "sandbox") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_sandbox(), SandboxForm(form));
      } else if (head == "id") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_id(), OneName(form));
      } else if (head == "name") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_name(), OneName(form));
      } else if (head == "groups") {
        VAULT_ASSIGN_OR_RETURN(std::vector<std::string> groups, Names(form, 1));
        if (groups.empty()) return Error(form, "(groups ...) names one or more groups");
        for (std::string& g : groups) spec.add_groups(std::move(g));
      } else if (head == "args" || head == "command") {
        for (size_t a = 1; a < form.items.size(); ++a) {
          const Sexp& arg = form.items[a];
          if (arg.type != Sexp::Type::kString && arg.type != Sexp::Type::kSymbol &&
              arg.type != Sexp::Type::kInteger) {
            return Error(arg, absl::StrCat("(", head, " ...) takes strings: (", head,
                                           head == "args" ? " \"--n\" \"3\")"
                                                          : " \"/bin/agent\" \"--serve\")"));
          }
          if (head == "args") {
            spec.add_args(arg.text);
          } else {
            spec.add_command(arg.text);
          }
        }
        if (head == "command" && spec.command_size() == 0) {
          return Error(form, "(command ...) names the program to run: (command \"/bin/agent\")");
        }
      } else if (head == "image") {
        VAULT_ASSIGN_OR_RETURN(*spec.mutable_image(), OneString(form));
        if (spec.image().empty()) return Error(form.items[1], "(image ...) is empty");
      } else if (head == "env") {
        // (env ("KEY" "VALUE") ...) or (env "KEY=VALUE" ...)
        for (size_t e = 1; e < form.items.size(); ++e) {
          const Sexp& entry = form.items[e];
          if (entry.type == Sexp::Type::kString && entry.text.find('=') != std::string::npos) {
            spec.add_env(entry.text);
          } else if (entry.is_list() && entry.items.size() == 2 && !entry.items[0].is_list() &&
                     !entry.items[1].is_list()) {
            spec.add_env(absl::StrCat(entry.items[0].text, "=", entry.items[1].text));
          } else {
            return Error(entry, "(env ...) takes (\"KEY\" \"VALUE\") pairs or \"KEY=VALUE\"");
          }
        }
      } else if (head == "spawned-by") {
        VAULT_ASSIGN_OR_RETURN(std::string who, OneName(form));
        // A symbol may stand for a key the caller names (vaultctl --bind NAME=KEY).
        if (form.items[1].type == Sexp::Type::kSymbol) who = Bound(who).value_or(who);
        spec.set_spawned_by(std::move(who));
      } else {  // status
        VAULT_ASSIGN_OR_RETURN(std::string status, OneName(form));
        Warn(form, absl::StrCat("(status ", status,
                                ") ignored: an agent's status is the vault's to set"));
      }
    }
    if (!spec.image().empty() && (spec.has_code_file() || spec.has_code_source())) {
      return Error(*seen["image"],
                   "(image ...) is a container agent's code: drop (code-file ...) or the inline "
                   "(code ...)");
    }
    if (!spec.image().empty() && spec.sandbox().empty()) spec.set_sandbox("container");
    if (spec.purpose().empty()) {
      Warn(doc, absl::StrCat("(", top,
                             " ...) has no (purpose \"...\"); the vault records a default, "
                             "and the purpose is the motivation of the agent's audit entries"));
    }
    return spec;
  }

  // (code "sha256:<hex>/<size>"), or inline Scheme: (code '(lambda () ...)).
  absl::Status CodeForm(const Sexp& form, AgentSpec* spec) const {
    if (form.arg_count() != 1) {
      return Error(form, "(code ...) takes one digest \"sha256:<hex>/<size>\" or Scheme code");
    }
    const Sexp& arg = form.items[1];
    if (arg.type == Sexp::Type::kCode) {
      absl::string_view code = arg.text;
      // '(lambda ...) and (lambda ...) are the same program: the quote only keeps the RFC's
      // spawn-agent from evaluating it.
      if (absl::ConsumePrefix(&code, "'")) code = absl::StripLeadingAsciiWhitespace(code);
      // (quote (lambda ...)), as Scheme's write prints a quoted datum (a Scheme agent's
      // spawn-child writes its child's spec so): the same.
      if (absl::string_view q = code; absl::ConsumePrefix(&q, "(quote") && !q.empty() &&
                                      absl::ascii_isspace(static_cast<unsigned char>(q.front()))) {
        q = absl::StripAsciiWhitespace(q);
        if (absl::ConsumeSuffix(&q, ")")) code = absl::StripTrailingAsciiWhitespace(q);
      }
      if (code.empty() || (code.front() != '(' && code.front() != '[')) {
        return Error(arg,
                     "(code ...) takes a digest string or a Scheme expression such as "
                     "'(lambda () ...)");
      }
      spec->set_code_source(std::string(code));
      return absl::OkStatus();
    }
    VAULT_ASSIGN_OR_RETURN(std::string text, OneString(form));
    std::optional<vault::v1::Digest> digest = ParseDigest(text);
    if (!digest) {
      return Error(arg, absl::StrCat("bad digest ", Quoted(text), ": ", kDigestSyntax));
    }
    *spec->mutable_code_digest() = *std::move(digest);
    return absl::OkStatus();
  }

  // (sandbox posix), or (sandbox (type scheme)) as the RFC writes a sandbox's own description.
  absl::StatusOr<std::string> SandboxForm(const Sexp& form) const {
    if (form.arg_count() == 1 && form.items[1].head() == "type") {
      return OneName(form.items[1]);
    }
    if (form.arg_count() != 1 || form.items[1].is_list()) {
      return Error(form,
                   "(sandbox ...) takes one type: posix, scheme, wasm or container; its "
                   "limits come from (constraints ...)");
    }
    return OneName(form);
  }

  absl::StatusOr<std::vector<Grant>> Grants(const Sexp& doc) const {
    std::vector<Grant> grants;
    if (doc.head() == "capabilities") {
      for (size_t i = 1; i < doc.items.size(); ++i) {
        VAULT_RETURN_IF_ERROR(CheckForm(doc.items[i], "capabilities"));
        VAULT_ASSIGN_OR_RETURN(std::vector<Grant> some, GrantForms(doc.items[i]));
        for (Grant& grant : some) grants.push_back(std::move(grant));
      }
      absl::Status all = ValidateGrants(capability::Grants(grants.begin(), grants.end()));
      if (!all.ok()) return Error(doc, all.message());
      return grants;
    }
    if (IsGrantKind(doc.head())) return GrantForms(doc);
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

  // The value a symbol stands for (SpecOptions::bindings), if the caller bound it.
  std::optional<std::string> Bound(const std::string& symbol) const {
    if (options_ == nullptr) return std::nullopt;
    auto it = options_->bindings.find(symbol);
    if (it == options_->bindings.end()) return std::nullopt;
    return it->second;
  }

  // (name x) for an atom x, positioned at x.
  static Sexp Wrap(absl::string_view name, const Sexp& x) {
    Sexp head;
    head.type = Sexp::Type::kSymbol;
    head.pos = x.pos;
    head.text = std::string(name);
    Sexp form;
    form.pos = x.pos;
    form.items = {std::move(head), x};
    return form;
  }

  static bool IsAtomName(const Sexp& x) {
    return x.type == Sexp::Type::kString || x.type == Sexp::Type::kSymbol;
  }

  // A grant form as people write it, with the RFC's shorthands, as one or more grants:
  //   (read "/vault/feeds/")               (read (path "/vault/feeds"))
  //   (read "https://arxiv.org/rss/*")     (read (url "https://arxiv.org:443/rss/*"))
  //   (network "rss.example.com")          (network (host "rss.example.com"))
  //   (network ("a.org" "b.org")), (network (hosts ("a.org" "b.org"))), (network (hosts a b))
  //                                        one network grant per host, each with the port given
  //   (send (to worker-agents))            (send (agent worker-agents))
  // A string with "://" is a URL; several scopes give several grants.
  absl::StatusOr<std::vector<Grant>> GrantForms(const Sexp& form) const {
    const absl::string_view kind = form.head();
    const bool paths = kind == "read" || kind == "write";
    const bool network = kind == "network";
    std::vector<Sexp> alternatives;  // scope forms, one grant each
    Sexp common;                     // (kind forms every grant shares...)
    common.pos = form.pos;
    common.items.push_back(form.items[0]);
    auto add_host = [&](const Sexp& x) -> absl::Status {
      if (!IsAtomName(x)) {
        return Error(x, absl::StrCat("(network ...) takes host names (strings or symbols), found ",
                                     Describe(x)));
      }
      alternatives.push_back(Wrap(absl::StrContains(x.text, "://") ? "url" : "host", x));
      return absl::OkStatus();
    };
    for (size_t i = 1; i < form.items.size(); ++i) {
      const Sexp& arg = form.items[i];
      if (IsAtomName(arg) && (paths || network)) {
        if (network) {
          VAULT_RETURN_IF_ERROR(add_host(arg));
        } else {
          alternatives.push_back(Wrap(absl::StrContains(arg.text, "://") ? "url" : "path", arg));
        }
      } else if (network && arg.is_list() && !arg.items.empty() && arg.head().empty()) {
        for (const Sexp& host : arg.items) VAULT_RETURN_IF_ERROR(add_host(host));
      } else if (network && arg.head() == "hosts") {
        if (arg.arg_count() == 0) return Error(arg, "(hosts ...) names one or more hosts");
        for (size_t h = 1; h < arg.items.size(); ++h) {
          const Sexp& x = arg.items[h];
          if (x.is_list() && x.head().empty()) {
            for (const Sexp& host : x.items) VAULT_RETURN_IF_ERROR(add_host(host));
          } else {
            VAULT_RETURN_IF_ERROR(add_host(x));
          }
        }
      } else if (kind == "send" && arg.head() == "to") {
        Sexp renamed = arg;
        renamed.items[0].text = "agent";
        common.items.push_back(std::move(renamed));
      } else {
        common.items.push_back(arg);
      }
    }
    std::vector<Grant> grants;
    if (alternatives.empty()) {
      VAULT_ASSIGN_OR_RETURN(Grant grant, GrantForm(common));
      grants.push_back(std::move(grant));
      return grants;
    }
    for (const Sexp& scope : alternatives) {
      Sexp one = common;
      one.items.insert(one.items.begin() + 1, scope);
      VAULT_ASSIGN_OR_RETURN(Grant grant, GrantForm(one));
      grants.push_back(std::move(grant));
    }
    return grants;
  }

  // Names in a form from item `first` on: strings or symbols, or lists of them one level deep
  // ((vaults (vault-a vault-b)) as the RFC writes it); sorted and unique.
  absl::StatusOr<std::vector<std::string>> Names(const Sexp& form, size_t first) const {
    std::vector<std::string> names;
    for (size_t v = first; v < form.items.size(); ++v) {
      const Sexp& x = form.items[v];
      if (x.is_list()) {
        if (x.items.empty()) {
          return Error(x, absl::StrCat("(", form.head(), " ...) takes names, found ()"));
        }
        for (const Sexp& y : x.items) {
          VAULT_ASSIGN_OR_RETURN(std::string name, Name(y, form.head()));
          names.push_back(std::move(name));
        }
        continue;
      }
      VAULT_ASSIGN_OR_RETURN(std::string name, Name(x, form.head()));
      names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
  }

  absl::StatusOr<Grant> GrantForm(const Sexp& form) const {
    absl::string_view kind = form.head();
    Grant grant;
    std::vector<absl::string_view> allowed;
    if (kind == "read") {
      grant.set_kind(Grant::READ);
      allowed = {"path", "hash", "url"};
    } else if (kind == "write") {
      grant.set_kind(Grant::WRITE);
      allowed = {"path", "url"};
    } else if (kind == "cas-read") {
      grant.set_kind(Grant::CAS_READ);
    } else if (kind == "cas-write") {
      grant.set_kind(Grant::CAS_WRITE);
    } else if (kind == "spawn") {
      grant.set_kind(Grant::SPAWN);
    } else if (kind == "network") {
      grant.set_kind(Grant::NETWORK);
      allowed = {"host", "port", "url"};
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
      } else if (head == "url") {
        VAULT_ASSIGN_OR_RETURN(std::string text, OneName(sub));
        absl::StatusOr<std::string> url = CanonicalUrl(text, UrlUse::kPattern);
        if (!url.ok()) return Error(sub.items[1], url.status().message());
        grant.set_url(*std::move(url));
      } else if (head == "hash") {
        if (sub.arg_count() == 1 && sub.items[1].type == Sexp::Type::kSymbol) {
          // (hash input-hash): a placeholder the caller binds (vaultctl --bind NAME=VALUE).
          std::optional<std::string> value = Bound(sub.items[1].text);
          if (!value) {
            return Error(sub.items[1],
                         absl::StrCat("the symbol ", sub.items[1].text,
                                      " stands for a hash that is not bound: give it with "
                                      "--bind ",
                                      sub.items[1].text, "=sha256:<64 hex>"));
          }
          std::optional<std::string> hash = ParseHash(*value);
          if (!hash) {
            return Error(sub.items[1], absl::StrCat(sub.items[1].text, " is bound to ",
                                                    Quoted(*value), ": ", kHashSyntax));
          }
          grant.set_hash(*std::move(hash));
          continue;
        }
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
        VAULT_ASSIGN_OR_RETURN(std::vector<std::string> names, Names(sub, 1));
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
    if (kind == "read" && !seen.count("path") && !seen.count("hash") && !seen.count("url"))
      needs = "(path ...), (hash ...) or (url ...)";
    if (kind == "write" && !seen.count("path") && !seen.count("url"))
      needs = "(path ...) or (url ...)";
    if (kind == "network" && !seen.count("host") && !seen.count("url")) {
      needs = "(host ...) or (url ...)";
    }
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
      if (item.head() == "fuel") {
        // The RFC's (fuel (computation STEPS) (allocation BYTES)).
        for (size_t f = 1; f < item.items.size(); ++f) {
          const Sexp& part = item.items[f];
          VAULT_RETURN_IF_ERROR(CheckForm(part, "fuel"));
          absl::string_view limit = part.head() == "computation"  ? "max-steps"
                                    : part.head() == "allocation" ? "max-allocation"
                                                                  : "";
          if (limit.empty()) {
            return Error(part, absl::StrCat("unknown form (", part.head(),
                                            " ...) in (fuel ...); expected (computation STEPS) "
                                            "or (allocation BYTES)"));
          }
          VAULT_RETURN_IF_ERROR(OneLimit(*FindConstraintName(limit), part, &seen, out));
        }
        continue;
      }
      const ConstraintName* name = FindConstraintName(item.head());
      if (name == nullptr) {
        return Error(item, absl::StrCat("unknown form (", item.head(),
                                        " ...) in (constraints ...); the limits are ",
                                        ConstraintNameList(), ", and (fuel ...)"));
      }
      VAULT_RETURN_IF_ERROR(OneLimit(*name, item, &seen, out));
    }
    return absl::OkStatus();
  }

  // (limit N), or (limit #f) for no limit, as the RFC's (max-runtime #f) says.
  absl::Status OneLimit(const ConstraintName& name, const Sexp& item,
                        std::map<std::string, const Sexp*>* seen, Constraints* out) const {
    auto [it, inserted] = seen->emplace(std::string(name.field), &item);
    if (!inserted) return Repeated(item, *it->second);
    if (item.arg_count() != 1) {
      return Error(item, absl::StrCat("(", item.head(), " ...) takes one number (or #f: none)"));
    }
    if (item.items[1].type == Sexp::Type::kBoolean) {
      if (item.items[1].text == "#f") return absl::OkStatus();  // no limit: the field stays unset
      return Error(item.items[1], absl::StrCat("(", item.head(),
                                               " #t) means nothing: give a number, or #f for no "
                                               "limit"));
    }
    return SetConstraint(name, item.items[1], out);
  }

  absl::string_view source_;
  const SpecOptions* options_;          // may be null
  std::vector<std::string>* warnings_;  // may be null
};

}  // namespace

absl::StatusOr<AgentSpec> SexpToAgentSpec(const Sexp& doc, absl::string_view source,
                                          const SpecOptions* options,
                                          std::vector<std::string>* warnings) {
  return SexpMapper(source, options, warnings).Agent(doc);
}

absl::StatusOr<std::vector<Grant>> SexpToGrants(const Sexp& doc, absl::string_view source) {
  return SexpMapper(source).Grants(doc);
}

absl::Status SexpToConstraints(const Sexp& doc, absl::string_view source, Constraints* out) {
  return SexpMapper(source).ConstraintsDocument(doc, out);
}

}  // namespace vault::capability::internal

namespace vault::capability::text {

absl::Status SetConstraintFromLiteral(const ConstraintName& name, absl::string_view literal,
                                      absl::string_view source, Pos pos,
                                      vault::v1::Constraints* out) {
  internal::Sexp value;
  value.type = internal::Sexp::Type::kInteger;
  value.pos = pos;
  value.text = std::string(literal);
  return internal::SexpMapper(source).SetConstraint(name, value, out);
}

}  // namespace vault::capability::text
