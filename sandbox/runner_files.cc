#include "sandbox/runner_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/status_macros.h"

namespace vault::sandbox {
namespace {

bool HasRunner(const RunnerFiles& runner, const std::string& dir) {
  for (size_t i = 0; i < runner.files.size(); ++i) {
    const std::string path = absl::StrCat(dir, "/", runner.files[i]);
    if (access(path.c_str(), i == 0 ? X_OK : R_OK) != 0) return false;
  }
  return !runner.files.empty();
}

}  // namespace

absl::StatusOr<std::string> StageRunner(const RunnerFiles& runner, const std::string& runner_dir,
                                        const std::string& stage_dir) {
  std::vector<std::string> candidates;
  if (!runner_dir.empty()) {
    candidates.push_back(runner_dir);
  } else if (const char* env = getenv(runner.env.c_str()); env != nullptr && *env != '\0') {
    candidates.push_back(env);
  } else {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const std::filesystem::path dir = self.parent_path();
      for (const std::string& rel : {absl::StrCat("../sandbox/", runner.folder),
                                     absl::StrCat("../../sandbox/", runner.folder),
                                     absl::StrCat("../libexec/vault/", runner.folder)}) {
        candidates.push_back(std::filesystem::weakly_canonical(dir / rel, ec).string());
      }
    }
  }
  for (const std::string& candidate : candidates) {
    if (!HasRunner(runner, candidate)) continue;
    std::error_code ec;
    std::filesystem::remove_all(stage_dir, ec);
    VAULT_RETURN_IF_ERROR(common::MakeDirs(stage_dir, 0711));
    for (size_t i = 0; i < runner.files.size(); ++i) {
      const std::string& file = runner.files[i];
      const std::string to = absl::StrCat(stage_dir, "/", file);
      std::filesystem::copy_file(absl::StrCat(candidate, "/", file), to, ec);
      if (ec) {
        return absl::InternalError(
            absl::StrCat("copy ", candidate, "/", file, " to ", to, ": ", ec.message()));
      }
      chmod(to.c_str(), i == 0 ? 0755 : 0644);
    }
    for (std::string dir = stage_dir; dir.size() > 1; dir = common::DirName(dir)) {
      if (chmod(dir.c_str(), 0711) != 0) break;  // as far as this process owns the path
      if (dir == "/var/lib/vault-sandbox") break;
    }
    return stage_dir;
  }
  return absl::NotFoundError(absl::StrCat(
      absl::StrJoin(runner.files, " and "), " not found (looked in: ",
      absl::StrJoin(candidates, ", "), "); set ", runner.env, " or install them beside vaultd"));
}

}  // namespace vault::sandbox
