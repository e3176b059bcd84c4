// vault-wasm-runner: runs a wasm agent (docs/wasm.md). It is the program of a posix sandbox, so
// every posix fence holds around the interpreter; inside, wabt's interpreter runs the agent's
// module (engine.h) with the vault's host imports (runner_host.h) over the C++ SDK's channel.
//
//   vault-wasm-runner MODULE [--env KEY=VALUE]... [-- ARG...]
//   vault-wasm-runner --warm
//
// With --warm it was started ahead of its agent (warm_pool.h) and waits on its channel (fd 3) for
// the start packet that makes it one: the agent's channel, stdout, stderr and module descriptors,
// and the argv and environment entries it would have been started with (vault.v1.WasmStart). It
// ends quietly when the vault closes the channel instead.
//
// It first asks the vault for the execution state to resume from (the snapshot its effect log
// starts from): with one, the run goes on where it was captured; without, the module's _start
// runs from the beginning. Limits come from the environment the vault sets: VAULT_MAX_STEPS
// (fuel, in instructions), VAULT_MAX_ALLOCATION (linear memory; else a quarter of
// VAULT_MEMORY_BYTES), VAULT_MAX_TABLE_ELEMENTS, VAULT_MAX_CALL_DEPTH.
//
// Exit: the module's own exit code (proc_exit, library.exit, 0 when _start returns); otherwise the
// agent is ended through the exit host call with the reason: 3 for "fuel exhausted" and "stack
// exhausted", 1 for a trap ("trap: integer divide by zero") or a module the vault refuses.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "sandbox/wasm/engine.h"
#include "sandbox/wasm/runner_host.h"
#include "sdk/cpp/vault_agent.h"
#include "vault/v1/hostcall.pb.h"
#include "vault/v1/wasm.pb.h"

namespace {

volatile sig_atomic_t g_interrupted = 0;

void OnInterrupt(int) { g_interrupted = 1; }

using vault::sandbox::wasm::Engine;
using vault::sandbox::wasm::EngineLimits;
using vault::sandbox::wasm::RunnerHost;

uint64_t EnvNumber(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  uint64_t n;
  if (v == nullptr || !absl::SimpleAtoi(v, &n)) return fallback;
  return n;
}

bool ReadModule(int fd, size_t limit, std::string* out) {
  char buf[65536];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > limit) break;  // refused by Load, with the size
  }
  return true;
}

// A warm runner's start packet (warm_pool.h): installs the channel and output descriptors, sets
// the environment entries and returns the argv, with the module's descriptor in `module_fd`.
// nullopt when the vault closed the channel (`closed`: the runner is not needed) or sent something
// else.
std::optional<std::vector<std::string>> ReceiveStart(int* module_fd, bool* closed) {
  constexpr int kFds = 4;  // channel, stdout, stderr, module
  constexpr int kChannel = 3;
  unsigned char head[4];
  size_t got = 0;
  int fds[kFds];
  bool have_fds = false;
  while (got < sizeof head) {
    iovec iov{head + got, sizeof head - got};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(kChannel, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    *closed = n == 0 && got == 0;
    if (n <= 0 || (msg.msg_flags & MSG_CTRUNC) != 0) return std::nullopt;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof fds) && !have_fds) {
        std::memcpy(fds, CMSG_DATA(c), sizeof fds);
        have_fds = true;
      }
    }
    got += static_cast<size_t>(n);
  }
  const uint32_t size = head[0] | (head[1] << 8) | (head[2] << 16) | (uint32_t{head[3]} << 24);
  if (!have_fds || size > (1u << 20)) return std::nullopt;
  std::string body(size, '\0');
  for (size_t at = 0; at < size;) {
    const ssize_t n = read(kChannel, body.data() + at, size - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    at += static_cast<size_t>(n);
  }
  vault::v1::WasmStart start;
  if (!start.ParseFromString(body)) return std::nullopt;
  if (dup2(fds[0], kChannel) < 0 || dup2(fds[1], STDOUT_FILENO) < 0 ||
      dup2(fds[2], STDERR_FILENO) < 0) {
    return std::nullopt;
  }
  for (int i = 0; i < 3; ++i) close(fds[i]);
  *module_fd = fds[3];
  for (const std::string& entry : start.env()) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    setenv(entry.substr(0, eq).c_str(), entry.c_str() + eq + 1, 1);
  }
  return std::vector<std::string>(start.argv().begin(), start.argv().end());
}

// (module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))
//   (func (export "_start") (local i32) (loop ... a count to 1000 ... br_if 0)) (memory 1))
constexpr unsigned char kPrewarmModule[] = {
    0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, 0x01, 0x0c, 0x02, 0x60, 0x04, 0x7f, 0x7f,
    0x7f, 0x7f, 0x01, 0x7f, 0x60, 0x00, 0x00, 0x02, 0x23, 0x01, 0x16, 0x77, 0x61, 0x73, 0x69,
    0x5f, 0x73, 0x6e, 0x61, 0x70, 0x73, 0x68, 0x6f, 0x74, 0x5f, 0x70, 0x72, 0x65, 0x76, 0x69,
    0x65, 0x77, 0x31, 0x08, 0x66, 0x64, 0x5f, 0x77, 0x72, 0x69, 0x74, 0x65, 0x00, 0x00, 0x03,
    0x02, 0x01, 0x01, 0x05, 0x03, 0x01, 0x00, 0x01, 0x07, 0x0a, 0x01, 0x06, 0x5f, 0x73, 0x74,
    0x61, 0x72, 0x74, 0x00, 0x01, 0x0a, 0x16, 0x01, 0x14, 0x01, 0x01, 0x7f, 0x03, 0x40, 0x20,
    0x00, 0x41, 0x01, 0x6a, 0x22, 0x00, 0x41, 0xe8, 0x07, 0x49, 0x0d, 0x00, 0x0b, 0x0b};

// A warm runner loads and runs that module once while it waits: its agent then finds the
// loader's and the interpreter's code paged in (a fresh process's first load costs three times a
// later one's).
void Prewarm() {
  RunnerHost host(nullptr, {"prewarm"}, {});
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Load(
      absl::string_view(reinterpret_cast<const char*>(kPrewarmModule), sizeof kPrewarmModule),
      EngineLimits{}, host.Resolver());
  if (engine.ok() && (*engine)->Start("_start").ok()) (void)(*engine)->Run();
  // And the protocol's messages, as the handshake and the first calls will write and read them.
  vault::v1::GuestFrame hello;
  hello.mutable_hello()->set_version(1);
  hello.mutable_request()->mutable_get_state()->set_snapshot(true);
  vault::v1::HostFrame answer;
  answer.mutable_welcome();
  answer.mutable_response()->mutable_get_state()->set_state("prewarm");
  vault::v1::GuestFrame hello_back;
  vault::v1::HostFrame answer_back;
  (void)hello_back.ParseFromString(hello.SerializeAsString());
  (void)answer_back.ParseFromString(answer.SerializeAsString());
}

// Ends the agent with `reason` (the vault records it), or exits if even that fails.
[[noreturn]] void End(vault::sdk::Agent& agent, int code, const std::string& reason) {
  if (!reason.empty()) fprintf(stderr, "vault-wasm-runner: %s\n", reason.c_str());
  (void)agent.Exit(code, reason);
  _exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  // The vault asks for a capture (an operator's hop) with SIGUSR1, taken at the next slice's end:
  // the handler is set first, so that an early one does not end the runner.
  struct sigaction action = {};
  action.sa_handler = &OnInterrupt;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
  std::vector<std::string> argv_list(argv, argv + argc);
  int module_fd = -1;
  if (argc == 2 && argv_list[1] == "--warm") {
    Prewarm();
    bool closed = false;
    std::optional<std::vector<std::string>> start = ReceiveStart(&module_fd, &closed);
    if (!start.has_value()) {
      if (closed) return 0;  // let go before it was needed
      fprintf(stderr, "vault-wasm-runner: the start packet is not one\n");
      return 1;
    }
    argv_list = *std::move(start);
  }
  if (argv_list.size() < 2) {
    fprintf(stderr,
            "usage: vault-wasm-runner MODULE [--env KEY=VALUE]... [-- ARG...]\n"
            "       vault-wasm-runner --warm\n");
    return 2;
  }
  std::vector<std::string> args = {"agent"};
  std::vector<std::string> env;
  for (size_t i = 2; i < argv_list.size(); ++i) {
    const std::string& a = argv_list[i];
    if (a == "--env" && i + 1 < argv_list.size()) {
      env.push_back(argv_list[++i]);
    } else if (a == "--") {
      args.insert(args.end(), argv_list.begin() + static_cast<std::ptrdiff_t>(i) + 1,
                  argv_list.end());
      break;
    } else {
      fprintf(stderr, "vault-wasm-runner: unexpected argument %s\n", a.c_str());
      return 2;
    }
  }
  EngineLimits limits;
  limits.fuel = EnvNumber("VAULT_MAX_STEPS", 0);
  const uint64_t memory = EnvNumber("VAULT_MEMORY_BYTES", 256ull << 20);
  const uint64_t linear = EnvNumber("VAULT_MAX_ALLOCATION", memory / 4);
  limits.max_memory_pages =
      static_cast<uint32_t>(std::min<uint64_t>(std::max<uint64_t>(linear / 65536, 1), 65536));
  limits.max_table_elements =
      static_cast<uint32_t>(EnvNumber("VAULT_MAX_TABLE_ELEMENTS", limits.max_table_elements));
  limits.max_call_depth =
      static_cast<uint32_t>(EnvNumber("VAULT_MAX_CALL_DEPTH", limits.max_call_depth));

  // The module is read and compiled before the handshake, while the vault finishes starting the
  // agent on its side.
  std::string module;
  if (module_fd < 0) module_fd = open(argv_list[1].c_str(), O_RDONLY | O_CLOEXEC);
  const bool read = module_fd >= 0 && ReadModule(module_fd, limits.max_module_bytes, &module);
  if (module_fd >= 0) close(module_fd);
  RunnerHost host(nullptr, std::move(args), std::move(env));
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      read ? Engine::Load(module, limits, host.Resolver())
           : absl::StatusOr<std::unique_ptr<Engine>>(absl::NotFoundError("not read"));
  module.clear();
  module.shrink_to_fit();

  absl::StatusOr<std::unique_ptr<vault::sdk::Agent>> connected = vault::sdk::Agent::Connect();
  if (!connected.ok()) {
    fprintf(stderr, "vault-wasm-runner: %s\n", connected.status().ToString().c_str());
    return 1;
  }
  vault::sdk::Agent& agent = **connected;
  host.set_agent(&agent);
  if (!read) End(agent, 1, absl::StrCat("cannot read the module ", argv_list[1]));
  if (!engine.ok()) End(agent, 1, absl::StrCat("module refused: ", engine.status().message()));

  absl::StatusOr<std::optional<std::string>> snapshot = agent.GetSnapshot();
  if (!snapshot.ok()) {
    End(agent, 1, absl::StrCat("cannot read the snapshot: ", snapshot.status().message()));
  }
  if (snapshot->has_value()) {
    vault::v1::WasmSnapshot snap;
    if (!snap.ParseFromString(**snapshot)) End(agent, 1, "snapshot: does not parse");
    absl::Status loaded = host.LoadState(snap.host());
    if (loaded.ok()) loaded = (*engine)->Restore(snap);
    if (!loaded.ok()) End(agent, 1, std::string(loaded.message()));
    host.set_restored_from(**std::move(snapshot));
    // Taken for a checkpoint the vault asked for: that checkpoint is made again (the log has it
    // first), then the run goes on.
    if (host.state().in_checkpoint()) {
      host.state().set_in_checkpoint(false);
      absl::Status again =
          host.CheckpointWith(host.restored_from(), /*resumed=*/true, /*requested=*/true);
      // One that fails leaves no trace in the log (it was the vault's, not the program's).
      if (!again.ok()) {
        fprintf(stderr, "vault-wasm-runner: the checkpoint made again failed: %s\n",
                std::string(again.message()).c_str());
      }
    }
  } else if (absl::Status started = (*engine)->Start("_start"); !started.ok()) {
    End(agent, 1, std::string(started.message()));
  }

  (*engine)->SetInterrupt(&g_interrupted, [&host](Engine& e) -> absl::Status {
    host.state().set_in_checkpoint(true);
    absl::StatusOr<std::string> snapshot = host.CaptureHere(e);
    host.state().set_in_checkpoint(false);
    absl::Status done = snapshot.ok()
                            ? host.CheckpointWith(*snapshot, /*resumed=*/false, /*requested=*/true)
                            : snapshot.status();
    // A checkpoint that failed (a quota, say) leaves the run as it was, and its log too (the
    // vault keeps no trace of it there): the hop goes with the last one. Said on stderr only
    // (a log call here would be an effect at no point of the program's own).
    if (!done.ok()) {
      fprintf(stderr, "vault-wasm-runner: the checkpoint asked for failed: %s\n",
              std::string(done.message()).c_str());
    }
    return absl::OkStatus();
  });
  const Engine::Outcome outcome = (*engine)->Run();
  host.FlushOutput();
  switch (outcome.kind) {
    case Engine::Outcome::kReturned:
      End(agent, 0, "");
    case Engine::Outcome::kExited:
      End(agent, outcome.exit_code,
          outcome.exit_code == 0 ? "" : absl::StrCat("exit ", outcome.exit_code));
    case Engine::Outcome::kFuelExhausted:
      End(agent, 3, outcome.message);
    case Engine::Outcome::kTrapped:
      End(agent, absl::StartsWith(outcome.message, "stack exhausted") ? 3 : 1, outcome.message);
  }
  return 1;
}
