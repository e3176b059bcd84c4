// vaultctl: the operator's command line for vaults. See `vaultctl --help`.
#include <grpc/support/log.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"
#include "vaultctl/command_groups.h"
#include "vaultctl/command_words.h"
#include "vaultctl/output.h"

int main(int argc, char** argv) {
  using namespace vault::vaultctl;
  std::signal(SIGPIPE, SIG_IGN);
  // Batches of file contents are allocated and freed by the megabyte: keep freed memory in the
  // heap instead of returning it to the kernel and faulting it in again (measured: ~13% of
  // vaultctl's time in page faults when storing 4 KiB files).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // gRPC's own log lines (e.g. a TLS handshake failure) would duplicate the error we report.
  if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
  // Library warnings (e.g. a missing sandbox fence) go to stderr: stdout is for results.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("vaultctl"));
  spdlog::set_pattern("vaultctl: %l: %v");
  CLI::App app{
      "vaultctl: drive a vault (vaultd) and its federation.\n"
      "Exit codes: 0 ok, 1 failure, 2 usage, 3 not found, 4 refused, 5 unavailable.",
      "vaultctl"};
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  GlobalOptions g;
  AddGlobalOptions(app, g);

  Command command;
  AddCommandGroups(app, g, command, argc, argv);
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      g.after_dashes.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  if (std::optional<std::string> unknown = CheckCommandWords(app, argc, argv)) {
    std::cerr << "vaultctl: " << *unknown << "\n";
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  g.connect.timeout = absl::Seconds(g.timeout_seconds);
  if (!command) return kExitUsage;
  const int rc = command();
  // Out without destructors: gRPC's teardown (its thread pools quiescing, an absl timed wait
  // that first measures the CPU's frequency with 1 + 2 ms of sleep) was ~3 ms of every command's
  // ~14. Every result is written by now; files were closed where they were written.
  std::cout.flush();
  std::cerr.flush();
  spdlog::shutdown();
  std::fflush(nullptr);
  _exit(rc);
}
