// bench/agent_bench_fake_vault: agent_bench's baselines without a vault: a fake vault in this
// process serving guests that run outside any sandbox, and a raw socketpair echo between threads.
#ifndef VAULT_BENCH_AGENT_BENCH_FAKE_VAULT_H_
#define VAULT_BENCH_AGENT_BENCH_FAKE_VAULT_H_

#include <sys/types.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "vault/v1/hostcall.pb.h"

namespace vault::bench {

// Answers guests' host calls at once; send/receive through in-memory mailboxes.
class FakeVault {
 public:
  struct Guest {
    std::string id;
    std::string state;
    int fd = -1;  // the vault's end
    pid_t pid = -1;
    std::thread server;
  };

  // Starts `guest_path` with fd 3 = one end of a new socketpair, and a server thread.
  absl::Status Start(const std::string& guest_path, const std::string& id,
                     const std::string& state);

  // Waits for every guest and server thread; NOT OK when a guest failed.
  absl::Status Finish();

  std::vector<std::string> Logs();

 private:
  struct Box {
    std::deque<vault::v1::Message> q;
  };

  void Serve(Guest& g);

  absl::Mutex mu_;
  std::map<std::string, Box> boxes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> logs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Guest>> guests_;
};

// A 64-byte frame echoed over a socketpair by a second thread: `rounds` timed round trips (us).
std::vector<double> RawPingPong(int rounds, int warmup);

}  // namespace vault::bench

#endif  // VAULT_BENCH_AGENT_BENCH_FAKE_VAULT_H_
