#include "sandbox/runner_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/random.h"
#include "common/sha256.h"
#include "common/status_macros.h"

namespace vault::sandbox {
namespace {

constexpr absl::string_view kStaging = ".staging-";

bool HasRunner(const RunnerFiles& runner, const std::string& dir) {
  for (size_t i = 0; i < runner.files.size(); ++i) {
    const std::string path = absl::StrCat(dir, "/", runner.files[i]);
    if (access(path.c_str(), i == 0 ? X_OK : R_OK) != 0) return false;
  }
  return !runner.files.empty();
}

}  // namespace

absl::StatusOr<StagedRunner> StageRunner(const RunnerFiles& runner, const std::string& runner_dir,
                                         const std::string& stage_root) {
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
  auto found = std::find_if(candidates.begin(), candidates.end(),
                            [&](const std::string& c) { return HasRunner(runner, c); });
  if (found == candidates.end()) {
    return absl::NotFoundError(absl::StrCat(
        absl::StrJoin(runner.files, " and "), " not found (looked in: ",
        absl::StrJoin(candidates, ", "), "); set ", runner.env, " or install them beside vaultd"));
  }
  // The files' names and bytes name the folder: one copy per build, whichever vault staged it.
  std::vector<std::string> contents;
  common::Sha256 hash;
  for (const std::string& file : runner.files) {
    VAULT_ASSIGN_OR_RETURN(std::string bytes, common::ReadFile(absl::StrCat(*found, "/", file)));
    hash.Update(absl::StrCat(file.size(), ":", file, bytes.size(), ":"));
    hash.Update(bytes);
    contents.push_back(std::move(bytes));
  }
  const std::string prefix = absl::StrCat(runner.folder, "-");
  const std::string name =
      absl::StrCat(prefix, absl::BytesToHexString(hash.Finish()).substr(0, 16));
  VAULT_RETURN_IF_ERROR(common::MakeDirs(stage_root, 0711));
  for (std::string dir = stage_root; dir.size() > 1; dir = common::DirName(dir)) {
    if (chmod(dir.c_str(), 0711) != 0) break;  // as far as this process owns the path
    if (dir == "/var/lib/vault-sandbox") break;
  }
  const std::string dir = absl::StrCat(stage_root, "/", name);
  absl::Status last;
  for (int attempt = 0; attempt < 8; ++attempt) {
    if (!common::PathExists(dir)) {
      // Written whole beside the folder, then renamed into place: a folder under its final name
      // is always complete. Leased while written, so that another vault's sweep leaves it.
      VAULT_ASSIGN_OR_RETURN(std::string suffix, common::RandomHex(8));
      const std::string staging =
          absl::StrCat(stage_root, "/", kStaging, name, "-", getpid(), "-", suffix);
      absl::Status written = common::MakeDirs(staging, 0711);
      absl::StatusOr<common::FolderLease> writing =
          written.ok() ? common::FolderLease::Take(staging, /*exclusive=*/true)
                       : absl::StatusOr<common::FolderLease>(written);
      written = writing.ok() ? common::MarkLeased(staging) : writing.status();
      for (size_t i = 0; written.ok() && i < runner.files.size(); ++i) {
        written = common::WriteFileAtomic(absl::StrCat(staging, "/", runner.files[i]), contents[i],
                                          i == 0 ? 0755 : 0644);
      }
      if (written.ok() &&
          (chmod(staging.c_str(), 0711) != 0 || rename(staging.c_str(), dir.c_str()) != 0)) {
        written = common::PosixError(errno, absl::StrCat("stage ", staging));
      }
      if (!written.ok()) {  // another vault staged it first, or swept this staging away
        std::error_code ec;
        std::filesystem::remove_all(staging, ec);
        last = written;
      }
    }
    absl::StatusOr<common::FolderLease> lease = common::FolderLease::Take(dir, /*exclusive=*/false);
    if (lease.ok()) {
      // Other builds' folders that no vault uses any more, and stagings whose writer died.
      common::RemoveUnleased(stage_root, [&](absl::string_view entry) {
        return (absl::StartsWith(entry, prefix) || absl::StartsWith(entry, kStaging)) &&
               entry != name;
      });
      return StagedRunner{.dir = dir, .lease = *std::move(lease)};
    }
    last = lease.status();
    if (!absl::IsNotFound(last) && !absl::IsAborted(last)) break;  // else removed meanwhile
  }
  return absl::UnavailableError(
      absl::StrCat("stage the ", runner.folder, " runner in ", dir, ": ", last.message()));
}

}  // namespace vault::sandbox
