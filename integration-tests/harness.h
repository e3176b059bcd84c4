// integration-tests: a harness for multi-process tests of the real vaultd and vaultctl binaries
// over real sockets. Every test gets a fresh temporary directory (removed at the end), and every
// process it starts is killed and reaped in TearDown — by its pid, nothing else.
//
//   class CasCliTest : public vault::integration::VaultTest {};
//   TEST_F(CasCliTest, PutsAFile) {
//     std::string ca = CreateCa();                              // vaultctl federation create-ca
//     absl::StatusOr<VaultDir> a = InitVault("a", ca);          // vaultctl init --ca (free port)
//     ASSERT_TRUE(a.ok()) << a.status();
//     absl::StatusOr<Vaultd*> d = StartVaultd(*a);              // waits for vaultd.ready
//     ASSERT_TRUE(d.ok()) << d.status();
//     RunResult r = Vaultctl({"--vault", a->socket, "cas", "ls"});
//     EXPECT_EQ(r.exit_code, 0) << r;
//   }
//
// The binaries' paths are compiled in (VAULT_IT_VAULTD, VAULT_IT_VAULTCTL). Oracles (SHA-256,
// digests) use OpenSSL directly, not the code under test.
//
// Thread-safety: RunProgram, the digest helpers and the gRPC helpers are thread-safe. A fixture,
// its Vaultd objects and ChildProcess objects belong to the test's main thread.
#ifndef VAULT_INTEGRATION_TESTS_HARNESS_H_
#define VAULT_INTEGRATION_TESTS_HARNESS_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::integration {

// vaultctl's exit codes (vaultctl/output.h), restated: the tests pin the contract.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotFound = 3;
inline constexpr int kExitRefused = 4;
inline constexpr int kExitUnavailable = 5;
// vaultd: EX_CONFIG for a bad config.
inline constexpr int kExitConfig = 78;

const std::string& VaultdPath();
const std::string& VaultctlPath();

// A finished program run. exit_code is the exit status, or 128 + signal when killed.
struct RunResult {
  int exit_code = -1;
  bool timed_out = false;
  std::string out;
  std::string err;
};
std::ostream& operator<<(std::ostream& os, const RunResult& r);

// Runs argv[0] (an absolute path) with stdin from /dev/null, capturing stdout and stderr.
// After `timeout` the program is killed (SIGKILL) and timed_out is set. VAULT_ADDR is removed
// from the environment so the caller's shell cannot redirect a test.
RunResult RunProgram(const std::vector<std::string>& argv, absl::Duration timeout);

// A child process whose stdout and stderr are appended to a log file. The destructor kills
// (SIGKILL) and reaps it if it still runs.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv,
                                                             const std::string& log_path);
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // Sends `sig` unless the child has been reaped already.
  void Signal(int sig);
  // The exit code (128 + signal when killed) once the child exits within `timeout`.
  std::optional<int> WaitExit(absl::Duration timeout);
  bool Running();

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  const pid_t pid_;
  bool reaped_ = false;
  int exit_code_ = -1;
};

// A vault created by `vaultctl init`.
struct VaultDir {
  std::string name;
  std::string dir;         // the vault directory
  std::string config;      // <dir>/vault.conf
  std::string data_dir;    // <dir>/data
  std::string socket;      // the admin socket
  std::string address;     // 127.0.0.1:<port>, its mTLS listener as configured
  std::string public_key;  // ed25519:<hex>
};

// One vaultd for one vault directory; it may be started, stopped and started again.
class Vaultd {
 public:
  Vaultd(VaultDir vault, std::string log_path, std::vector<std::string> extra_args)
      : vault_(std::move(vault)),
        log_path_(std::move(log_path)),
        extra_args_(std::move(extra_args)) {}

  // Spawns vaultd --config <vault.conf> <extra args> and waits until <data_dir>/vaultd.ready
  // names its pid. FAILED_PRECONDITION with the log's tail when it exits first.
  absl::Status Start(absl::Duration timeout = absl::Seconds(30));
  // Sends SIGTERM and waits; returns the exit code (nullopt: still running after `timeout`).
  std::optional<int> Stop(absl::Duration timeout = absl::Seconds(30));
  // SIGKILL, then reaps.
  void Kill();
  bool Running() const { return process_ != nullptr && process_->Running(); }
  pid_t pid() const { return process_ == nullptr ? -1 : process_->pid(); }

  const VaultDir& vault() const { return vault_; }
  const std::string& socket() const { return vault_.socket; }
  // The listener address vaultd reported in vaultd.ready (resolves port 0).
  const std::string& listen_address() const { return listen_address_; }
  const std::string& log_path() const { return log_path_; }

  // Runs vaultd through `prefix` (the argv before vaultd's own: e.g. `deploy/netns/netns.sh exec
  // --name NAME HOST`, which enters a network namespace). The prefix must exec vaultd, so that
  // the child's pid is vaultd's (vaultd.ready names it; Kill signals it). Takes effect at the
  // next Start.
  void set_command_prefix(std::vector<std::string> prefix) { command_prefix_ = std::move(prefix); }

 private:
  const VaultDir vault_;
  const std::string log_path_;
  const std::vector<std::string> extra_args_;
  std::vector<std::string> command_prefix_;
  std::unique_ptr<ChildProcess> process_;
  std::string listen_address_;
};

// Fixture: a temporary directory, vaultctl and vaultd helpers, and cleanup.
class VaultTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  const std::string& root() const { return root_; }
  // Runs vaultctl with `args`.
  RunResult Vaultctl(const std::vector<std::string>& args,
                     absl::Duration timeout = absl::Seconds(60));
  // `vaultctl federation create-ca --dir <root>/<dir>`; returns the directory ("" on failure,
  // after recording a test failure).
  std::string CreateCa(const std::string& dir = "ca");
  // `vaultctl init --name N --dir <root>/N --listen 127.0.0.1:<free port> [--ca ca_dir]`.
  absl::StatusOr<VaultDir> InitVault(const std::string& name, const std::string& ca_dir);
  // `vaultctl federation add-member --config <config> --peer-config <peer_config>`.
  absl::Status AddMember(const VaultDir& to, const VaultDir& peer);
  // Starts vaultd for `vault`; the fixture owns it and kills it in TearDown.
  absl::StatusOr<Vaultd*> StartVaultd(const VaultDir& vault,
                                      std::vector<std::string> extra_args = {});
  // A vault with a CA of its own, for tests that use only its admin socket: vaultctl init, then
  // vaultd --listen 127.0.0.1:0 (the kernel picks the port; vaultd.ready reports it).
  absl::StatusOr<Vaultd*> StartStandaloneVault(const std::string& name);
  // As StartVaultd, with vaultd run through `prefix` (Vaultd::set_command_prefix).
  absl::StatusOr<Vaultd*> StartVaultdWithPrefix(const VaultDir& vault,
                                                std::vector<std::string> prefix,
                                                std::vector<std::string> extra_args = {});
  // A random 64-bit seed, printed so a failure can be replayed with VAULT_IT_SEED.
  uint64_t Seed();

 private:
  std::string root_;
  std::vector<std::unique_ptr<Vaultd>> daemons_;
};

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> FreeLoopbackPort();

// Files.
absl::Status WriteFile(const std::string& path, absl::string_view data);
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Digests, computed with OpenSSL.
std::string Sha256(absl::string_view data);  // 32 raw bytes
std::string Hex(absl::string_view bytes);
std::string DigestText(absl::string_view data);  // sha256:<hex>/<size>
vault::v1::Digest DigestProto(absl::string_view data);
std::string DigestText(const vault::v1::Digest& d);

// `n` pseudo-random bytes.
std::string RandomBytes(std::mt19937_64& rng, size_t n);

// The value of "key" in a flat JSON object: a string (unescaped only for \" and \\) or a bare
// token (number, true, false). nullopt when absent. Enough for vaultctl's and vaultd's output.
std::optional<std::string> JsonField(absl::string_view json, absl::string_view key);

// gRPC over a vault's admin socket. A channel of its own (no shared subchannel) with quick
// reconnects, so a restarted vaultd is reached at once.
std::shared_ptr<grpc::Channel> UnixChannel(const std::string& socket);
std::unique_ptr<vault::v1::Cas::Stub> CasStub(const std::string& socket);
// Every call gets a deadline.
void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout);

}  // namespace vault::integration

#endif  // VAULT_INTEGRATION_TESTS_HARNESS_H_
