// sandbox/scheme: the "scheme" sandbox type. A Scheme agent's code runs in vault-scheme-runner
// (runner.cc, runner.scm: Guile 3.0, a safe environment, the host calls as procedures, fuel), and
// the runner runs as the program of a posix sandbox, so every posix fence holds around the
// interpreter: the interpreter is defence in depth, not the only wall (docs/sandbox.md).
//
//   ASSIGN_OR_RETURN(auto scheme, SchemeSandbox::Create(posix_sandbox, ""));  // finds the runner
//   types.Add(scheme.get());
//
// Thread safety: as the posix sandbox it wraps.
#ifndef VAULT_SANDBOX_SCHEME_SCHEME_SANDBOX_H_
#define VAULT_SANDBOX_SCHEME_SCHEME_SANDBOX_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sandbox/runner_files.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox {

class SchemeSandbox : public RunnerSandbox {
 public:
  // `posix` runs the runner (not owned; it outlives this). `runner_dir` holds vault-scheme-runner
  // and runner.scm; "" looks in $VAULT_SCHEME_RUNNER_DIR, then beside the executable
  // (../sandbox/scheme, ../../sandbox/scheme, ../libexec/vault/scheme). NOT_FOUND naming the
  // places looked at. Both files are staged under `stage_root` (runner_files.h), whose path is
  // what the sandboxes see.
  static absl::StatusOr<std::unique_ptr<SchemeSandbox>> Create(Sandbox* posix,
                                                               const std::string& runner_dir,
                                                               const std::string& stage_root);

  const char* type() const override { return "scheme"; }
  // Guile here has no clock, randomness or input but the host calls: an agent re-run with its
  // calls answered from its effect log takes the same path.
  bool replays() const override { return true; }
  // The code object is the agent's Scheme source, at /code/agent.
  absl::Status SetProgram(const CodeObject& code, SandboxSpec* spec) const override;
  // A Scheme agent's procedure takes no arguments: args and env are refused.
  absl::Status SetArguments(const std::vector<std::string>& args,
                            const std::vector<std::string>& env, SandboxSpec* spec) const override;

 private:
  SchemeSandbox(Sandbox* posix, StagedRunner staged) : RunnerSandbox(posix, std::move(staged)) {}
};

}  // namespace vault::sandbox

#endif  // VAULT_SANDBOX_SCHEME_SCHEME_SANDBOX_H_
