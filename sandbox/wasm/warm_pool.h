// sandbox/wasm/warm_pool: wasm sandboxes started ahead of their agents. Starting a posix sandbox
// (namespaces, mounts, Landlock, seccomp, a cgroup) and the runner in it takes most of a wasm
// agent's start; a warm sandbox has done all of that and waits, its runner blocked on its
// channel, with nothing of any agent in it. Taking one hands it the agent's program in one start
// packet (vault.v1.WasmStart with the agent's channel, stdout, stderr and module descriptors):
// from then on it is the sandbox a cold start would have made, every fence the same, with its
// wall clock restarted. A warm sandbox serves one agent and is never reused.
//
// The pool is shaped by limits: a sandbox's limits are set when it starts, so only a spec with
// the same limits can take one. The wall time excepted: a warm sandbox waits under a long one and
// takes its agent's when it is taken (SandboxHandle::SetWallTime). The pool takes the shape of the
// last start it was told of (Want), filling up to `size` in the background.
//
//   WarmPool pool({.posix = posix, .program = runner, .argv = {"vault-wasm-runner", "--warm"},
//                  .read_only_dirs = {runner_dir}, .size = 2});
//   pool.SetCloneLock(&code_cache->exec_mu());
//   std::unique_ptr<SandboxHandle> h = pool.Take(spec, module_fd);  // null: start it cold
//   pool.Want(spec.limits);
//
// Thread-safety: thread-safe.
#ifndef VAULT_SANDBOX_WASM_WARM_POOL_H_
#define VAULT_SANDBOX_WASM_WARM_POOL_H_

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/unique_fd.h"
#include "sandbox/sandbox.h"

namespace vault::sandbox::wasm {

class WarmPool {
 public:
  struct Options {
    Sandbox* posix = nullptr;  // not owned; it outlives the pool
    std::string program;
    std::vector<std::string> argv;
    std::vector<std::string> read_only_dirs;
    size_t size = 0;  // 0: the pool stays empty
  };
  explicit WarmPool(Options options);
  ~WarmPool();  // stops filling; the idle sandboxes are killed
  WarmPool(const WarmPool&) = delete;
  WarmPool& operator=(const WarmPool&) = delete;

  // The lock held shared around every clone (agent/code_cache.h: no code file may be open for
  // writing while a sandbox is cloned). The pool makes no clone before it is set; nullptr stops
  // the filling (waiting for a clone in progress) and kills the idle sandboxes.
  void SetCloneLock(absl::Mutex* mu);

  // A warm sandbox that has become `spec`'s: its program (spec.program and spec.read_only_dirs
  // as the pool's), limits, channel and output are spec's, `module_fd` its module. Null when none
  // fits: the caller starts one cold.
  std::unique_ptr<SandboxHandle> Take(const SandboxSpec& spec, int module_fd);
  // Fills the pool in `shape` (killing the idle sandboxes of another), a moment from now: called
  // after each start, warm or cold, so that the refill does not take CPU from it.
  void Want(const Limits& limits);

  // How many stand ready (for tests and the log).
  size_t idle() const;

 private:
  struct Relay;  // routes a warm sandbox's end to whoever took it
  struct Warm {
    std::unique_ptr<SandboxHandle> handle;
    common::UniqueFd host_end;  // the warm channel, over which the start packet goes
    std::shared_ptr<Relay> relay;
  };

  bool Fits(const SandboxSpec& spec) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  void Fill();
  absl::StatusOr<Warm> StartOne(const Limits& shape, absl::Mutex* clone_lock);

  const Options options_;
  mutable absl::Mutex mu_;
  Limits shape_ ABSL_GUARDED_BY(mu_);
  bool shaped_ ABSL_GUARDED_BY(mu_) = false;  // asked for once: there is a shape to fill
  std::deque<Warm> idle_ ABSL_GUARDED_BY(mu_);
  std::deque<Warm> doomed_ ABSL_GUARDED_BY(mu_);  // to kill, on the filler's thread
  absl::Mutex* clone_lock_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cloning_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;  // the last start failed: wait for the next ask
  absl::Time not_before_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread filler_;
};

}  // namespace vault::sandbox::wasm

#endif  // VAULT_SANDBOX_WASM_WARM_POOL_H_
