// vaultd: the vault daemon. See `vaultd --help` and docs/operations.md.
#include <grpc/support/log.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/file_util.h"
#include "common/sd_notify.h"
#include "google/protobuf/stubs/logging.h"
#include "node/config.h"
#include "node/json_log.h"
#include "node/vault_node.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr int kExitConfig = 78;  // EX_CONFIG

// Writes <data_dir>/vaultd.ready once serving: pid, bound addresses. Scripts and tests wait for
// it instead of guessing ports.
absl::Status WriteReadyFile(const vault::v1::VaultConfig& config, const vault::node::VaultNode& n) {
  std::string json =
      absl::StrCat("{\"pid\": ", getpid(), ", \"name\": \"", config.name(),
                   "\", \"listen_address\": \"", n.listen_address(), "\", \"admin_socket\": \"",
                   n.admin_socket(), "\", \"metrics_address\": \"", n.metrics_address(), "\"}\n");
  return vault::common::WriteFileAtomic(config.data_dir() + "/vaultd.ready", json, 0600);
}

}  // namespace

int main(int argc, char** argv) {
#ifdef NDEBUG
  // Debian's Abseil is built with Mutex deadlock detection on: a lock-order graph updated on
  // every acquisition. Tests keep it (they do not run this main); the daemon does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
  CLI::App app{
      "vaultd: a vault federation node. Serves the content-addressed store over mutual TLS to\n"
      "federation members and, with administration, over a Unix socket (mode 0600).\n"
      "SIGTERM or SIGINT drains calls in flight and shuts down cleanly.",
      "vaultd"};
  std::string config_path, data_dir, listen, admin_socket, log_level, log_format, metrics_listen;
  bool check_config = false, print_config = false, hold_agents = false;
  app.add_option("-c,--config", config_path, "Config file (protobuf text format)")->required();
  app.add_option("--data-dir", data_dir, "Override data_dir");
  app.add_option("--listen", listen, "Override listen_address (host:port; port 0 picks one)");
  app.add_option("--admin-socket", admin_socket, "Override admin_socket");
  app.add_option("--log-level", log_level, "Override log_level (trace..error, off)");
  app.add_option("--log-format", log_format, "Override log_format (text, json)");
  app.add_option("--metrics-listen", metrics_listen,
                 "Override metrics_listen (ip:port of the Prometheus /metrics listener; port 0 "
                 "picks one)");
  app.add_flag("--hold-agents", hold_agents,
               "Resume no agent at start (after restoring a backup: docs/operations.md)");
  app.add_flag("--check-config", check_config, "Validate the config (and its files) and exit");
  app.add_flag("--print-config", print_config,
               "Print the effective config (defaults filled in) and exit");
  app.set_version_flag("--version", vault::node::kVersion);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }

  absl::StatusOr<vault::v1::VaultConfig> loaded = vault::node::LoadConfigFile(config_path);
  if (!loaded.ok()) {
    std::cerr << "vaultd: " << loaded.status().message() << "\n";
    return kExitConfig;
  }
  vault::v1::VaultConfig config = *std::move(loaded);
  if (!data_dir.empty()) config.set_data_dir(data_dir);
  if (!listen.empty()) config.set_listen_address(listen);
  if (!admin_socket.empty()) config.set_admin_socket(admin_socket);
  if (!log_level.empty()) config.set_log_level(log_level);
  if (!log_format.empty()) config.set_log_format(log_format);
  if (!metrics_listen.empty()) config.set_metrics_listen(metrics_listen);
  if (absl::Status s = vault::node::FinalizeConfig(config_path, &config); !s.ok()) {
    std::cerr << "vaultd: " << s.message() << "\n";
    return kExitConfig;
  }
  if (check_config) {
    std::cout << "vaultd: config " << config_path << " is valid\n";
    return kExitOk;
  }
  if (print_config) {
    std::cout << vault::node::ConfigToText(config);
    return kExitOk;
  }

  auto logger = spdlog::stderr_color_mt("vaultd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(config.log_level()));
  if (config.log_format() == "json") {
    logger->set_formatter(vault::node::NewJsonLogFormatter(config.name()));
    // gRPC's own messages too, so that every line is one JSON object.
    gpr_set_log_function([](gpr_log_func_args* args) {
      const spdlog::level::level_enum level =
          args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::err
          : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                    : spdlog::level::debug;
      spdlog::log(level, "grpc {}:{}: {}", args->file, args->line, args->message);
    });
  }
  // protobuf logs every parse of a peer's message with invalid UTF-8 in a string field (the
  // parse fails and the caller refuses the message): at debug level, so a hostile peer cannot
  // flood the log through it.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel level, const char* file, int line, const std::string& message) {
        if (level >= google::protobuf::LOGLEVEL_FATAL) {
          spdlog::critical("protobuf {}:{}: {}", file, line, message);
        } else {
          spdlog::debug("protobuf {}:{}: {}", file, line, message);
        }
      });
  umask(0077);  // everything vaultd creates is private to its user

  // Signals are taken synchronously by this thread; block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<vault::node::VaultNode>> node =
      vault::node::VaultNode::Start(config, {.hold_agents = hold_agents});
  if (!node.ok()) {
    spdlog::error("cannot start vault {}: {}", config.name(), node.status().ToString());
    return kExitFailure;
  }
  if (absl::Status s = WriteReadyFile(config, **node); !s.ok()) {
    spdlog::error("{}", s.ToString());
    return kExitFailure;
  }
  // systemd (Type=notify): ready now that both listeners accept calls. Not under systemd:
  // nothing is sent.
  if (absl::Status s = vault::common::SdNotify("READY=1"); !s.ok()) {
    spdlog::warn("{}", s.ToString());
  }
  spdlog::info("vault {} serving: federation {} (mTLS), admin unix:{}, metrics {}, {} objects",
               config.name(), (*node)->listen_address().empty() ? "off" : (*node)->listen_address(),
               (*node)->admin_socket(),
               (*node)->metrics_address().empty()
                   ? std::string("off")
                   : absl::StrCat("http://", (*node)->metrics_address(), "/metrics"),
               (*node)->store()->last_seq());

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining (up to {} ms)", sig, config.server().drain_timeout_ms());
  unlink((config.data_dir() + "/vaultd.ready").c_str());
  if (absl::Status s = vault::common::SdNotify("STOPPING=1"); !s.ok()) {
    spdlog::warn("{}", s.ToString());
  }
  (*node)->Shutdown(absl::Milliseconds(config.server().drain_timeout_ms()));
  node->reset();
  spdlog::info("vault {} stopped", config.name());
  return kExitOk;
}
