#include "agent/code_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "spdlog/spdlog.h"

namespace vault::agent {
namespace {

std::string PythonSdkDir(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (const char* env = getenv("VAULT_PYTHON_SDK"); env != nullptr && *env != '\0') return env;
#ifdef VAULT_PYTHON_SDK_DEFAULT
  if (common::PathExists(VAULT_PYTHON_SDK_DEFAULT)) return VAULT_PYTHON_SDK_DEFAULT;
#endif
  return "/usr/lib/vault/python";
}

bool IsPythonScript(absl::string_view code) {
  if (!absl::StartsWith(code, "#!")) return false;
  absl::string_view first = code.substr(0, code.find('\n'));
  return absl::StrContains(first, "python");
}

}  // namespace

absl::StatusOr<std::unique_ptr<CodeCache>> CodeCache::Open(const CodeCacheOptions& options,
                                                           cas::Store* cas) {
  std::string root = options.root;
  std::string shared_parent;  // a folder of every vault's code folders, when root is there
  std::string own;            // root's name in it
  if (root.empty()) {
    if (geteuid() == 0) {
      shared_parent = "/var/lib/vault-sandbox/code";
      own = absl::StrCat(options.vault_name, "-",
                         absl::BytesToHexString(cas::Sha256::Hash(options.data_dir)).substr(0, 8));
      root = absl::StrCat(shared_parent, "/", own);
    } else {
      root = options.data_dir + "/agent-code";
    }
  }
  std::error_code ec;
  absl::StatusOr<common::FolderLease> lease = absl::UnavailableError("not tried");
  for (int attempt = 0; attempt < 8 && !lease.ok(); ++attempt) {
    std::filesystem::remove_all(root, ec);  // code of a previous run
    VAULT_RETURN_IF_ERROR(common::MakeDirs(root, 0711));
    // Held for the vault's life: another vault's sweep leaves this folder alone, and removes it
    // once this vault is gone, however it ended. Retried when such a sweep raced the mkdir.
    lease = common::FolderLease::Take(root, /*exclusive=*/true);
  }
  if (!lease.ok()) return lease.status();
  VAULT_RETURN_IF_ERROR(common::MarkLeased(root));
  if (!shared_parent.empty()) {
    common::RemoveUnleased(shared_parent, [&](absl::string_view name) { return name != own; });
  }
  // The Python SDK, copied beside the code so that its path inside the sandbox is neutral (the
  // build tree may live under /work, which the sandbox uses for itself).
  std::string sdk = PythonSdkDir(options.python_sdk_dir);
  if (common::PathExists(sdk)) {
    std::string copy = root + "/python";
    std::filesystem::copy(
        sdk, copy,
        std::filesystem::copy_options::recursive | std::filesystem::copy_options::skip_symlinks,
        ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("copy the Python SDK from ", sdk, ": ", ec.message()));
    }
    for (const auto& entry : std::filesystem::recursive_directory_iterator(copy, ec)) {
      chmod(entry.path().c_str(), entry.is_directory() ? 0755 : 0644);
    }
    chmod(copy.c_str(), 0755);
    sdk = copy;
  } else {
    spdlog::warn("the Python agent SDK is not at {}: Python agents cannot import vault_agent", sdk);
  }
  for (std::string dir = root; dir.size() > 1 && dir != "/run"; dir = common::DirName(dir)) {
    if (chmod(dir.c_str(), 0711) != 0) break;  // as far as we own the path
    if (dir == "/run/vault-sandbox") break;
  }
  common::Env* env = options.env != nullptr ? options.env : common::Env::Default();
  return std::unique_ptr<CodeCache>(
      new CodeCache(cas, env, std::move(root), std::move(sdk), *std::move(lease)));
}

// Written once, without a sync: the folder is rebuilt from the CAS after a restart.
absl::StatusOr<sandbox::CodeObject> CodeCache::Acquire(const cas::Digest& digest) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(digest.sha256());
  if (it != entries_.end()) {
    ++it->second.refs;
    it->second.idle_since = absl::InfiniteFuture();
    return it->second.layout;
  }
  // The CAS read verifies every byte against the digest.
  VAULT_ASSIGN_OR_RETURN(std::string code, cas_->ReadAll(digest));
  sandbox::CodeObject layout;
  layout.digest = absl::BytesToHexString(digest.sha256());
  layout.size = digest.size();
  if (IsPythonScript(code)) {
    layout.kind = sandbox::CodeObject::Kind::kPython;
    layout.python_sdk_dir = python_sdk_dir_;
  }
  // Readable (not listable) by the sandboxes' host ids, under an unguessable name.
  VAULT_ASSIGN_OR_RETURN(std::string name, common::RandomHex(16));
  layout.dir = absl::StrCat(root_, "/", name);
  if (int err = env_->CreateDir(layout.dir, 0755); err != 0) {
    return common::PosixError(err, "mkdir " + layout.dir);
  }
  chmod(layout.dir.c_str(), 0755);  // whatever the umask took
  const std::string path = absl::StrCat(
      layout.dir, layout.kind == sandbox::CodeObject::Kind::kPython ? "/agent.py" : "/agent");
  absl::Status written = [&]() -> absl::Status {
    absl::WriterMutexLock exec_lock(&exec_mu_);
    int err = 0;
    std::unique_ptr<common::EnvFile> f =
        env_->Open(path, common::OpenMode::kCreateNew, /*direct=*/false, &err, 0755);
    if (f == nullptr) return common::PosixError(err, "create " + path);
    if (!code.empty()) {
      if (int e = f->WriteAt(0, {iovec{code.data(), code.size()}}); e != 0) {
        return common::PosixError(e, "write " + path);
      }
    }
    if (int e = f->Chmod(0755); e != 0) return common::PosixError(e, "chmod " + path);
    return absl::OkStatus();  // closed (so that it can be executed) as `f` goes
  }();
  if (!written.ok()) {
    std::error_code ec;
    std::filesystem::remove_all(layout.dir, ec);
    return written;
  }
  entries_[digest.sha256()] = Entry{.layout = layout, .refs = 1};
  return layout;
}

void CodeCache::Release(const std::string& sha256) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(sha256);
  if (it == entries_.end() || --it->second.refs > 0) return;
  it->second.idle_since = env_->Now();
  for (;;) {
    auto oldest = entries_.end();
    size_t idle = 0;
    for (auto c = entries_.begin(); c != entries_.end(); ++c) {
      if (c->second.refs > 0) continue;
      ++idle;
      if (oldest == entries_.end() || c->second.idle_since < oldest->second.idle_since) oldest = c;
    }
    if (idle <= kIdleKept) return;
    std::error_code ec;
    std::filesystem::remove_all(oldest->second.layout.dir, ec);
    entries_.erase(oldest);
  }
}

void CodeCache::RemoveAll() {
  absl::MutexLock lock(&mu_);
  entries_.clear();
  std::error_code ec;
  std::filesystem::remove_all(root_, ec);
}

}  // namespace vault::agent
