#include "sandbox/scheme/scheme_sandbox.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "sandbox/runner_files.h"

namespace vault::sandbox {

absl::StatusOr<std::unique_ptr<SchemeSandbox>> SchemeSandbox::Create(
    Sandbox* posix, const std::string& runner_dir, const std::string& stage_root) {
  VAULT_ASSIGN_OR_RETURN(StagedRunner staged,
                         StageRunner({.files = {"vault-scheme-runner", "runner.scm"},
                                      .env = "VAULT_SCHEME_RUNNER_DIR",
                                      .folder = "scheme"},
                                     runner_dir, stage_root));
  return std::unique_ptr<SchemeSandbox>(new SchemeSandbox(posix, std::move(staged)));
}

absl::Status SchemeSandbox::SetProgram(const CodeObject& code, SandboxSpec* spec) const {
  if (code.kind != CodeObject::Kind::kNative) {
    return absl::InvalidArgumentError(absl::StrCat("a scheme sandbox runs Scheme source, not ",
                                                   CodeKindName(code.kind), " code"));
  }
  spec->program = absl::StrCat(runner_dir_, "/vault-scheme-runner");
  spec->argv = {"vault-scheme-runner", absl::StrCat(runner_dir_, "/runner.scm"), "/code/agent"};
  spec->read_only_dirs.push_back(runner_dir_);
  spec->code_dir = code.dir;
  return absl::OkStatus();
}

absl::Status SchemeSandbox::SetArguments(const std::vector<std::string>& args,
                                         const std::vector<std::string>& env,
                                         SandboxSpec* spec) const {
  if (args.empty() && env.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError("a scheme agent takes no args or env");
}

}  // namespace vault::sandbox
