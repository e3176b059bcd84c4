// bench/agent_bench_vault: the real vault agent_bench measures (vaultctl init, vaultd, agents
// spawned and terminated with links signed as vaultctl signs them) and what its processes cost.
#ifndef VAULT_BENCH_AGENT_BENCH_VAULT_H_
#define VAULT_BENCH_AGENT_BENCH_VAULT_H_

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "capability/principal.h"
#include "vault/v1/admin.grpc.pb.h"
#include "vault/v1/agent.grpc.pb.h"

namespace vault::bench {

// The vaultd and vaultctl the bench runs: those built with it (AGENT_BENCH_VAULTD,
// AGENT_BENCH_VAULTCTL), or copies elsewhere given with --vaultd / --vaultctl (vaultd finds
// vault-sandbox-init beside itself). Set before any thread starts.
struct VaultBinaries {
  std::string vaultd;
  std::string vaultctl;
};
VaultBinaries& Binaries();

// --- processes ------------------------------------------------------------------------------

// VmRSS / VmHWM of a process, in KiB; -1 when unreadable.
int64_t StatusKiB(pid_t pid, absl::string_view field);

// CPU time a process's threads have used, in ns (/proc/PID/task/*/schedstat); -1 when unreadable.
int64_t ProcessCpuNs(pid_t pid);

// What vaultd spent during a phase of `calls` host calls: its threads' CPU time and how often
// they went to sleep (the reactor sleeps between two requests unless it busy-polls).
struct VaultdCost {
  pid_t pid;
  int64_t cpu0, switches0;
  explicit VaultdCost(pid_t p);
  std::string Per(int64_t calls) const;
};

struct Descendants {
  std::map<std::string, std::pair<int, int64_t>> by_comm;  // comm -> (processes, RSS KiB)
  int processes = 0;
  int64_t rss_kib = 0;
  int64_t pss_kib = 0;  // proportional: shared pages (libraries) divided among their users
};

// Every process below `root` (not root itself), by comm.
Descendants DescendantsOf(pid_t root);

// --- the vault ------------------------------------------------------------------------------

class Vault {
 public:
  ~Vault() { Stop(); }

  absl::Status Init(const std::string& tmp, bool sync_writes);

  absl::Status Start();

  // SIGTERM, then SIGKILL after 30 s; returns vaultd's exit status text.
  std::string Stop();

  pid_t pid() const { return pid_; }
  const std::string& log() const { return log_; }

  // The spec the next spawns use (by default agent_bench's, for its guest); the code is learnt
  // from the next SpawnWithVaultctl.
  absl::Status SetSpec(const std::string& spec_text);

  // `vaultctl agent spawn` with the given initial state; returns the id.
  absl::StatusOr<std::string> SpawnWithVaultctl(const std::string& guest, const std::string& state);

  absl::StatusOr<vault::v1::AgentStatus> Get(const std::string& id);

  absl::StatusOr<vault::v1::ListAgentsResponse> List();

  static bool Ended(vault::v1::AgentState s) {
    return s == vault::v1::TERMINATED || s == vault::v1::COMPLETED || s == vault::v1::FAILED ||
           s == vault::v1::DEPARTED;
  }

  absl::StatusOr<vault::v1::AgentStatus> WaitEnded(const std::string& id, absl::Duration limit);

  // `vaultctl -o json agent logs ID`: the message of every line.
  absl::StatusOr<std::vector<std::string>> Logs(const std::string& id);

  // A SpawnRequest for Agents.Spawn with a SPAWN link signed as vaultctl signs it.
  absl::StatusOr<vault::v1::SpawnRequest> SpawnRequest(const std::string& state);

  // A ControlRequest TERMINATE, signed as vaultctl signs it.
  absl::StatusOr<vault::v1::ControlRequest> TerminateRequest(const std::string& id);

  // A stub on a connection of its own (for concurrent clients).
  std::unique_ptr<vault::v1::Agents::Stub> NewAgentsStub() const;

 private:
  std::string tmp_, dir_, socket_, log_, spec_path_;
  pid_t pid_ = -1;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<vault::v1::Agents::Stub> agents_;
  std::string vault_key_;
  std::optional<capability::PrivateKey> admin_key_;
  vault::v1::AgentSpec spec_;
  vault::v1::Digest code_;
};

}  // namespace vault::bench

#endif  // VAULT_BENCH_AGENT_BENCH_VAULT_H_
