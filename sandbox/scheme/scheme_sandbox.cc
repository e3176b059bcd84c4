#include "sandbox/scheme/scheme_sandbox.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace vault::sandbox {
namespace {

bool HasRunner(const std::string& dir) {
  return access(absl::StrCat(dir, "/vault-scheme-runner").c_str(), X_OK) == 0 &&
         access(absl::StrCat(dir, "/runner.scm").c_str(), R_OK) == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SchemeSandbox>> SchemeSandbox::Create(Sandbox* posix,
                                                                     const std::string& runner_dir,
                                                                     const std::string& stage_dir) {
  std::vector<std::string> candidates;
  if (!runner_dir.empty()) {
    candidates.push_back(runner_dir);
  } else if (const char* env = getenv("VAULT_SCHEME_RUNNER_DIR"); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  } else {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const std::filesystem::path dir = self.parent_path();
      for (const char* rel :
           {"../sandbox/scheme", "../../sandbox/scheme", "../libexec/vault/scheme"}) {
        candidates.push_back(std::filesystem::weakly_canonical(dir / rel, ec).string());
      }
    }
  }
  for (const std::string& candidate : candidates) {
    if (!HasRunner(candidate)) continue;
    std::error_code ec;
    std::filesystem::remove_all(stage_dir, ec);
    VAULT_RETURN_IF_ERROR(common::MakeDirs(stage_dir, 0711));
    for (const char* file : {"vault-scheme-runner", "runner.scm"}) {
      const std::string to = absl::StrCat(stage_dir, "/", file);
      std::filesystem::copy_file(absl::StrCat(candidate, "/", file), to, ec);
      if (ec) {
        return absl::InternalError(
            absl::StrCat("copy ", candidate, "/", file, " to ", to, ": ", ec.message()));
      }
      chmod(to.c_str(), std::string(file) == "runner.scm" ? 0644 : 0755);
    }
    for (std::string dir = stage_dir; dir.size() > 1; dir = common::DirName(dir)) {
      if (chmod(dir.c_str(), 0711) != 0) break;  // as far as this process owns the path
      if (dir == "/var/lib/vault-sandbox") break;
    }
    return std::unique_ptr<SchemeSandbox>(new SchemeSandbox(posix, stage_dir));
  }
  return absl::NotFoundError(absl::StrCat(
      "vault-scheme-runner and runner.scm not found (looked in: ", absl::StrJoin(candidates, ", "),
      "); set VAULT_SCHEME_RUNNER_DIR or install them beside vaultd"));
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

}  // namespace vault::sandbox
