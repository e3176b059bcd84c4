// sandbox/registry: the sandbox types a vault can run, by name, and the one place that reads the
// type an agent's spec asks for.
//
// Type names: "posix" (sandbox/posix/, a native program or a Python script in Linux namespaces
// under every fence), "scheme", "wasm" and "container" (each its own folder).
// The RFC writes the posix type "posix-sandbox": that is another name of "posix". An empty name
// is "posix". A vault registers the types it runs at start; a type it knows of but cannot run
// here (not built, or a fence it needs is missing) is registered as unavailable with the reason,
// so that a spawn or an arrival of that type is refused saying why.
//
//   SandboxRegistry types;
//   types.Add(linux_sandbox.get());                         // "posix"
//   types.AddUnavailable("wasm", "not built into this vaultd");
//   VAULT_ASSIGN_OR_RETURN(Sandbox* sandbox, types.Find(spec.sandbox()));
//
// Thread-safety: Add and AddUnavailable before use; after that Find and the rest are thread-safe
// (const). The registry does not own the sandboxes.
#ifndef VAULT_SANDBOX_REGISTRY_H_
#define VAULT_SANDBOX_REGISTRY_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

// Every type name the project knows, canonical spelling, in the order they are listed.
const std::vector<std::string>& KnownSandboxTypes();

// The canonical name of the type `name` asks for: "" and "posix-sandbox" are "posix".
// INVALID_ARGUMENT for a name that is no sandbox type, listing the known ones.
absl::StatusOr<std::string> CanonicalSandboxType(absl::string_view name);

class SandboxRegistry {
 public:
  // Registers `sandbox` under its type(); a second one of the same type replaces the first.
  void Add(Sandbox* sandbox);
  // A known type this vault cannot run, with the reason ("not built into this vaultd", ...).
  void AddUnavailable(absl::string_view type, std::string why);

  // The sandbox for the type `name` asks for. INVALID_ARGUMENT for an unknown name;
  // FAILED_PRECONDITION for a known type this vault cannot run, naming why and what it has.
  absl::StatusOr<Sandbox*> Find(absl::string_view name) const;
  // The types this vault runs, canonical names, in KnownSandboxTypes' order.
  std::vector<std::string> Available() const;
  bool empty() const { return sandboxes_.empty(); }
  // One line per known type: "posix: available", "wasm: unavailable (not built ...)".
  std::vector<std::string> Describe() const;

 private:
  absl::flat_hash_map<std::string, Sandbox*> sandboxes_;
  absl::flat_hash_map<std::string, std::string> unavailable_;
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_REGISTRY_H_
