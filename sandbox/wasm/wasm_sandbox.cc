#include "sandbox/wasm/wasm_sandbox.h"

#include <fcntl.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "sandbox/runner_files.h"

namespace vault::sandbox {

absl::StatusOr<std::unique_ptr<WasmSandbox>> WasmSandbox::Create(Sandbox* posix,
                                                                 const std::string& runner_dir,
                                                                 const std::string& stage_root,
                                                                 size_t warm_pool) {
  VAULT_ASSIGN_OR_RETURN(StagedRunner staged, StageRunner({.files = {"vault-wasm-runner"},
                                                           .env = "VAULT_WASM_RUNNER_DIR",
                                                           .folder = "wasm"},
                                                          runner_dir, stage_root));
  return std::unique_ptr<WasmSandbox>(new WasmSandbox(posix, std::move(staged), warm_pool));
}

WasmSandbox::WasmSandbox(Sandbox* posix, StagedRunner staged, size_t warm_pool)
    : RunnerSandbox(posix, std::move(staged)) {
  pool_ = std::make_unique<wasm::WarmPool>(
      wasm::WarmPool::Options{.posix = posix,
                              .program = absl::StrCat(runner_dir_, "/vault-wasm-runner"),
                              .argv = {"vault-wasm-runner", "--warm"},
                              .read_only_dirs = {runner_dir_},
                              .size = warm_pool});
}

absl::StatusOr<std::unique_ptr<SandboxHandle>> WasmSandbox::Spawn(const SandboxSpec& spec) {
  std::unique_ptr<SandboxHandle> warm;
  if (!spec.code_dir.empty()) {
    // Read by the runner through this descriptor: a warm sandbox has no /code.
    common::UniqueFd module(
        open(absl::StrCat(spec.code_dir, "/agent").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    warm = pool_->Take(spec, module.get());
  }
  ++(warm != nullptr ? warm_starts_ : cold_starts_);
  absl::StatusOr<std::unique_ptr<SandboxHandle>> handle =
      warm != nullptr ? std::move(warm) : posix_->Spawn(spec);
  pool_->Want(spec.limits);
  return handle;
}

absl::Status WasmSandbox::SetProgram(const CodeObject& code, SandboxSpec* spec) const {
  if (code.kind != CodeObject::Kind::kNative) {
    return absl::InvalidArgumentError(absl::StrCat("a wasm sandbox runs a WebAssembly module, not ",
                                                   CodeKindName(code.kind), " code"));
  }
  spec->program = absl::StrCat(runner_dir_, "/vault-wasm-runner");
  spec->argv = {"vault-wasm-runner", "/code/agent"};
  spec->read_only_dirs.push_back(runner_dir_);
  spec->code_dir = code.dir;
  return absl::OkStatus();
}

absl::Status WasmSandbox::SetArguments(const std::vector<std::string>& args,
                                       const std::vector<std::string>& env,
                                       SandboxSpec* spec) const {
  for (const std::string& e : env) spec->argv.insert(spec->argv.end(), {"--env", e});
  if (!args.empty()) {
    spec->argv.push_back("--");
    spec->argv.insert(spec->argv.end(), args.begin(), args.end());
  }
  return absl::OkStatus();
}

}  // namespace vault::sandbox
