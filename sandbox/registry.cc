#include "sandbox/registry.h"

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vault::sandbox {

const std::vector<std::string>& KnownSandboxTypes() {
  static const std::vector<std::string>* const kTypes =
      new std::vector<std::string>{"posix", "scheme", "wasm", "container"};
  return *kTypes;
}

absl::StatusOr<std::string> CanonicalSandboxType(absl::string_view name) {
  if (name.empty() || name == "posix-sandbox") return std::string("posix");
  for (const std::string& t : KnownSandboxTypes()) {
    if (name == t) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", absl::CHexEscape(name.substr(0, 64)), "\" is not a sandbox type (known: ",
                   absl::StrJoin(KnownSandboxTypes(), ", "), "; posix-sandbox is posix)"));
}

void SandboxRegistry::Add(Sandbox* sandbox) {
  const std::string type = sandbox->type();
  unavailable_.erase(type);
  sandboxes_[type] = sandbox;
}

void SandboxRegistry::AddUnavailable(absl::string_view type, std::string why) {
  sandboxes_.erase(type);
  unavailable_[type] = std::move(why);
}

std::vector<std::string> SandboxRegistry::Available() const {
  std::vector<std::string> out;
  for (const std::string& t : KnownSandboxTypes()) {
    if (sandboxes_.contains(t)) out.push_back(t);
  }
  return out;
}

absl::StatusOr<Sandbox*> SandboxRegistry::Find(absl::string_view name) const {
  absl::StatusOr<std::string> type = CanonicalSandboxType(name);
  if (!type.ok()) return type.status();
  if (auto it = sandboxes_.find(*type); it != sandboxes_.end()) return it->second;
  std::vector<std::string> available = Available();
  const std::string has =
      available.empty() ? "no sandbox type" : absl::StrCat(absl::StrJoin(available, ", "));
  std::string why = "not built into this vaultd";
  if (auto it = unavailable_.find(*type); it != unavailable_.end()) why = it->second;
  return absl::FailedPreconditionError(absl::StrCat(
      "sandbox type \"", *type, "\" is not available here: ", why, " (this vault has: ", has, ")"));
}

std::vector<std::string> SandboxRegistry::Describe() const {
  std::vector<std::string> out;
  for (const std::string& t : KnownSandboxTypes()) {
    if (sandboxes_.contains(t)) {
      out.push_back(absl::StrCat(t, ": available"));
    } else if (auto it = unavailable_.find(t); it != unavailable_.end()) {
      out.push_back(absl::StrCat(t, ": unavailable (", it->second, ")"));
    } else {
      out.push_back(absl::StrCat(t, ": unavailable (not built into this vaultd)"));
    }
  }
  return out;
}

}  // namespace vault::sandbox
