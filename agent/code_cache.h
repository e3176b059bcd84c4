// agent/code_cache: agents' code laid out where their sandboxes can run it. One folder per code
// object (by SHA-256), shared by every agent running it, with an unguessable name under a root
// that cannot be listed; written once from the CAS (which verifies every byte), kept for a while
// after its last agent ended (an arrival after a hop, a restart: the CAS read and the write are
// off that start's path), removed once it is among the oldest of more than kIdleKept unused ones.
// The Python SDK is copied beside the code, so that its path inside a sandbox is neutral.
//
//   VAULT_ASSIGN_OR_RETURN(auto cache, CodeCache::Open(options, cas));
//   VAULT_ASSIGN_OR_RETURN(sandbox::CodeObject code, cache->Acquire(digest));
//   { absl::ReaderMutexLock no_writes(&cache->exec_mu());  sandbox->Spawn(spec); }
//   cache->Release(digest.sha256());
//
// Thread-safety: thread-safe.
#ifndef VAULT_AGENT_CODE_CACHE_H_
#define VAULT_AGENT_CODE_CACHE_H_

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "common/env.h"
#include "common/folder_lease.h"
#include "sandbox/sandbox.h"

namespace vault::agent {

struct CodeCacheOptions {
  // The root of the folders. Empty: /var/lib/vault-sandbox/code/<vault>-<hash of data_dir> as
  // root (where each sandbox's own host id can reach it: the data directory is 0700), else
  // <data_dir>/agent-code. Whatever it holds is removed at Open (code of a previous run); under
  // /var/lib/vault-sandbox/code, so are the folders of vaults that ended without removing theirs
  // (each vault holds a lease on its own: common/folder_lease.h).
  std::string root;
  std::string vault_name;
  std::string data_dir;
  // Where the Python SDK (the vault_agent package) is. Empty: $VAULT_PYTHON_SDK, the build
  // tree's, else /usr/lib/vault/python.
  std::string python_sdk_dir;
  // The code files' Env (common/env.h). Default: common::Env::Default().
  common::Env* env = nullptr;
};

class CodeCache {
 public:
  static constexpr size_t kIdleKept = 8;

  static absl::StatusOr<std::unique_ptr<CodeCache>> Open(const CodeCacheOptions& options,
                                                         cas::Store* cas);
  CodeCache(const CodeCache&) = delete;
  CodeCache& operator=(const CodeCache&) = delete;

  // The folder of `digest`'s code (mounted at /code), written if it is not there; counted until
  // Release. A Python script ("#!...python" first line) is laid out as agent.py (kind kPython,
  // with the SDK's folder), anything else as agent (kNative).
  absl::StatusOr<sandbox::CodeObject> Acquire(const cas::Digest& digest);
  void Release(const std::string& sha256);
  // Held shared around every sandbox spawn; exclusively while a code file is open for writing (a
  // sandbox cloned meanwhile would hold the descriptor, and the kernel refuses to execute a file
  // open for writing: ETXTBSY).
  absl::Mutex& exec_mu() { return exec_mu_; }
  // The Python SDK's folder (under the root), mounted read-only for Python agents.
  const std::string& python_sdk_dir() const { return python_sdk_dir_; }
  // Removes every folder (the vault is stopping).
  void RemoveAll();

 private:
  CodeCache(cas::Store* cas, common::Env* env, std::string root, std::string python_sdk_dir,
            common::FolderLease lease)
      : cas_(cas),
        env_(env),
        root_(std::move(root)),
        python_sdk_dir_(std::move(python_sdk_dir)),
        lease_(std::move(lease)) {}

  struct Entry {
    sandbox::CodeObject layout;
    int refs = 0;
    absl::Time idle_since = absl::InfiniteFuture();  // when its last agent ended
  };

  // Constant after Open.
  cas::Store* const cas_;
  common::Env* const env_;
  const std::string root_;
  const std::string python_sdk_dir_;
  const common::FolderLease lease_;  // on root_, for the vault's life

  absl::Mutex exec_mu_;
  // Taken before exec_mu_ (Acquire writes a file under both).
  absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(exec_mu_);
  absl::flat_hash_map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_CODE_CACHE_H_
