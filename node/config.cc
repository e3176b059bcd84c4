#include "node/config.h"

#include <arpa/inet.h>
#include <sys/un.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "capability/principal.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace vault::node {
namespace {

class Collector : public google::protobuf::io::ErrorCollector {
 public:
  explicit Collector(absl::string_view source) : source_(source) {}
  void AddError(int line, int column, const std::string& message) override {
    errors_.push_back(absl::StrCat(source_, ":", line + 1, ":", column + 1, ": ", message));
  }
  void AddWarning(int line, int column, const std::string& message) override {
    AddError(line, column, message);
  }
  std::string Text() const { return absl::StrJoin(errors_, "\n"); }

 private:
  std::string source_;
  std::vector<std::string> errors_;
};

absl::Status FieldError(absl::string_view source, absl::string_view field,
                        absl::string_view reason) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": field ", field, ": ", reason));
}

// host:port with a numeric port in 1..65535 (0..65535 with allow_port_zero: a listener's port 0
// picks a free port); host may be [v6].
absl::Status ValidateHostPort(absl::string_view source, absl::string_view field,
                              absl::string_view value, bool allow_port_zero = false) {
  size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) {
    return FieldError(source, field, absl::StrCat("\"", value, "\" is not host:port"));
  }
  uint32_t port = 0;
  if (!absl::SimpleAtoi(value.substr(colon + 1), &port) || (port == 0 && !allow_port_zero) ||
      port > 65535) {
    return FieldError(
        source, field,
        absl::StrCat("\"", value, "\" has no port in ", allow_port_zero ? 0 : 1, "..65535"));
  }
  return absl::OkStatus();
}

// ip:port with a numeric host (IPv4, or IPv6 in brackets) and a port in 0..65535: the metrics
// listener binds exactly this (its HTTP server resolves no names).
absl::Status ValidateNumericHostPort(absl::string_view source, absl::string_view field,
                                     absl::string_view value) {
  VAULT_RETURN_IF_ERROR(ValidateHostPort(source, field, value, /*allow_port_zero=*/true));
  std::string host(value.substr(0, value.rfind(':')));
  unsigned char addr[16];
  bool numeric = false;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    numeric = inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), addr) == 1;
  } else {
    numeric = inet_pton(AF_INET, host.c_str(), addr) == 1;
  }
  if (!numeric) {
    return FieldError(source, field,
                      absl::StrCat("\"", value,
                                   "\" does not start with a numeric address (e.g. "
                                   "127.0.0.1:9701 or [::1]:9701)"));
  }
  return absl::OkStatus();
}

absl::Status CheckReadable(absl::string_view source, absl::string_view field,
                           const std::string& path) {
  if (path.empty()) return FieldError(source, field, "is required");
  if (access(path.c_str(), R_OK) != 0) {
    return FieldError(source, field, common::PosixError(errno, path).message());
  }
  return absl::OkStatus();
}

void ResolveAll(const std::string& base, vault::v1::VaultConfig* c) {
  auto fix = [&](std::string* p) { *p = common::ResolvePath(base, *p); };
  fix(c->mutable_data_dir());
  fix(c->mutable_admin_socket());
  fix(c->mutable_key_file());
  fix(c->mutable_tls()->mutable_cert_file());
  fix(c->mutable_tls()->mutable_key_file());
  fix(c->mutable_tls()->mutable_ca_file());
  if (!c->agents().files_dir().empty()) fix(c->mutable_agents()->mutable_files_dir());
  if (!c->agents().python_sdk_dir().empty()) fix(c->mutable_agents()->mutable_python_sdk_dir());
}

}  // namespace

absl::StatusOr<vault::v1::VaultConfig> ParseConfigText(absl::string_view text,
                                                       absl::string_view source) {
  vault::v1::VaultConfig config;
  google::protobuf::TextFormat::Parser parser;
  Collector errors(source);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(absl::StrCat("parse error: ", errors.Text()));
  }
  return config;
}

absl::StatusOr<vault::v1::VaultConfig> LoadConfigFile(const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat("cannot read config: ", text.status().message()));
  }
  VAULT_ASSIGN_OR_RETURN(vault::v1::VaultConfig config, ParseConfigText(*text, path));
  std::string dir = common::DirName(path);
  char abs[PATH_MAX];
  if (realpath(dir.c_str(), abs) != nullptr) dir = abs;
  ResolveAll(dir, &config);
  return config;
}

absl::Status ValidateVaultName(absl::string_view name) {
  if (name.empty() || name.size() > 63) {
    return absl::InvalidArgumentError(
        absl::StrCat("vault name \"", name, "\" must be 1 to 63 characters"));
  }
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vault name \"", name, "\" may contain only lowercase letters, digits and '-'"));
    }
  }
  if (name.front() == '-' || name.back() == '-') {
    return absl::InvalidArgumentError(
        absl::StrCat("vault name \"", name, "\" must not start or end with '-'"));
  }
  return absl::OkStatus();
}

absl::Status FinalizeConfig(absl::string_view source, vault::v1::VaultConfig* c, bool check_files) {
  // Defaults.
  if (c->admin_socket().empty() && !c->data_dir().empty()) {
    c->set_admin_socket(absl::StrCat(c->data_dir(), "/vault.sock"));
  }
  if (c->log_level().empty()) c->set_log_level("info");
  if (c->log_format().empty()) c->set_log_format("text");
  auto* st = c->mutable_storage();
  if (!st->has_sync_writes()) st->set_sync_writes(true);
  if (!st->has_direct_chunk_writes()) st->set_direct_chunk_writes(true);
  if (st->block_cache_mb() == 0) st->set_block_cache_mb(256);
  auto* cas = c->mutable_cas();
  if (cas->max_object_bytes() == 0) cas->set_max_object_bytes(uint64_t{64} << 30);
  if (cas->chunking_threshold_bytes() == 0) cas->set_chunking_threshold_bytes(4 << 20);
  if (cas->chunk_avg_bytes() == 0) cas->set_chunk_avg_bytes(512 << 10);
  if (cas->max_batch_bytes() == 0) cas->set_max_batch_bytes(4 << 20);
  if (cas->max_find_missing() == 0) cas->set_max_find_missing(100000);
  if (cas->upload_ttl_hours() == 0) cas->set_upload_ttl_hours(24);
  if (cas->max_batch_items() == 0) cas->set_max_batch_items(10000);
  if (cas->max_upload_buffer_bytes() == 0) cas->set_max_upload_buffer_bytes(256 << 20);
  auto* gc = cas->mutable_gc();
  if (gc->keep_unheld_seconds() == 0) gc->set_keep_unheld_seconds(7 * 86400);
  if (!gc->has_keep_ended_agents_seconds()) gc->set_keep_ended_agents_seconds(7 * 86400);
  if (!gc->has_interval_seconds()) gc->set_interval_seconds(0);
  if (gc->compact_below_live_percent() == 0) gc->set_compact_below_live_percent(50);
  auto* srv = c->mutable_server();
  if (srv->worker_threads() == 0) {
    srv->set_worker_threads(std::max(4u, 2 * std::thread::hardware_concurrency()));
  }
  if (srv->drain_timeout_ms() == 0) srv->set_drain_timeout_ms(10000);
  if (srv->max_message_bytes() == 0) srv->set_max_message_bytes(8 << 20);
  if (srv->memory_quota_mb() == 0) srv->set_memory_quota_mb(1024);
  if (srv->max_concurrent_streams() == 0) srv->set_max_concurrent_streams(128);
  auto* audit = c->mutable_audit();
  auto* sandbox = c->mutable_sandbox();
  if (!sandbox->has_require_landlock()) sandbox->set_require_landlock(true);
  if (!sandbox->has_require_cgroups()) sandbox->set_require_cgroups(true);
  if (sandbox->host_id_base() == 0) sandbox->set_host_id_base(200000);
  if (sandbox->host_id_count() == 0) sandbox->set_host_id_count(65536);
  if (sandbox->cgroup_folder().empty()) sandbox->set_cgroup_folder("vault-sandbox");
  auto* containers = c->mutable_containers();
  if (containers->rootfs_dir().empty() && !c->data_dir().empty()) {
    containers->set_rootfs_dir(absl::StrCat(c->data_dir(), "/rootfs"));
  }
  if (containers->max_image_bytes() == 0) containers->set_max_image_bytes(uint64_t{8} << 30);
  if (containers->max_image_entries() == 0) containers->set_max_image_entries(500000);
  if (containers->max_import_bytes() == 0) containers->set_max_import_bytes(uint64_t{16} << 30);
  if (containers->max_import_seconds() == 0) containers->set_max_import_seconds(3600);
  if (containers->runtime().empty()) containers->set_runtime("runc");
  if (containers->state_dir().empty() && !c->data_dir().empty()) {
    containers->set_state_dir(absl::StrCat(c->data_dir(), "/containers"));
  }
  auto* agents = c->mutable_agents();
  if (agents->files_dir().empty() && !c->data_dir().empty()) {
    agents->set_files_dir(absl::StrCat(c->data_dir(), "/files"));
  }
  if (agents->max_frame_bytes() == 0) agents->set_max_frame_bytes(1 << 20);
  if (agents->read_timeout_ms() == 0) agents->set_read_timeout_ms(5000);
  if (agents->call_deadline_ms() == 0) agents->set_call_deadline_ms(10000);
  if (agents->flag_after_denials() == 0) agents->set_flag_after_denials(10);
  if (agents->terminate_after_denials() == 0) agents->set_terminate_after_denials(100);
  if (agents->mailbox_capacity() == 0) agents->set_mailbox_capacity(256);
  if (agents->default_memory_bytes() == 0) agents->set_default_memory_bytes(256 << 20);
  if (agents->default_cpu_ms() == 0) agents->set_default_cpu_ms(60000);
  if (agents->default_runtime_ms() == 0) agents->set_default_runtime_ms(600000);
  if (agents->default_storage_bytes() == 0) agents->set_default_storage_bytes(64 << 20);
  if (agents->default_max_agents() == 0) agents->set_default_max_agents(100);
  if (agents->default_max_storage_bytes() == 0) {
    agents->set_default_max_storage_bytes(uint64_t{1} << 30);
  }
  if (agents->default_max_calls_per_second() == 0) agents->set_default_max_calls_per_second(1000);
  if (agents->stop_checkpoint_ms() == 0) agents->set_stop_checkpoint_ms(5000);
  if (agents->worker_threads() == 0) agents->set_worker_threads(4);
  if (audit->checkpoint_every_entries() == 0) audit->set_checkpoint_every_entries(1000);
  if (audit->checkpoint_interval_ms() == 0) audit->set_checkpoint_interval_ms(1000);
  if (audit->mirror_interval_ms() == 0) audit->set_mirror_interval_ms(2000);
  if (audit->mirror_rpc_timeout_ms() == 0) audit->set_mirror_rpc_timeout_ms(10000);

  // Validation.
  if (c->name().empty()) return FieldError(source, "name", "is required");
  if (absl::Status s = ValidateVaultName(c->name()); !s.ok()) {
    return FieldError(source, "name", s.message());
  }
  if (c->data_dir().empty()) return FieldError(source, "data_dir", "is required");
  if (c->admin_socket().size() >= sizeof(sockaddr_un::sun_path)) {
    return FieldError(source, "admin_socket",
                      absl::StrCat("path is ", c->admin_socket().size(),
                                   " bytes; Unix socket paths must be shorter than ",
                                   sizeof(sockaddr_un::sun_path)));
  }
  if (c->key_file().empty()) return FieldError(source, "key_file", "is required");
  const absl::flat_hash_set<std::string> levels = {"trace", "debug", "info",
                                                   "warn",  "error", "off"};
  if (!levels.contains(c->log_level())) {
    return FieldError(source, "log_level",
                      absl::StrCat("\"", c->log_level(),
                                   "\" is not one of trace, debug, info, warn, error, off"));
  }
  if (c->log_format() != "text" && c->log_format() != "json") {
    return FieldError(source, "log_format",
                      absl::StrCat("\"", c->log_format(), "\" is not one of text, json"));
  }
  if (!c->metrics_listen().empty()) {
    VAULT_RETURN_IF_ERROR(ValidateNumericHostPort(source, "metrics_listen", c->metrics_listen()));
  }
  if (!c->listen_address().empty()) {
    VAULT_RETURN_IF_ERROR(ValidateHostPort(source, "listen_address", c->listen_address(),
                                           /*allow_port_zero=*/true));
    if (c->tls().cert_file().empty() || c->tls().key_file().empty() || c->tls().ca_file().empty()) {
      return FieldError(source, "tls",
                        "cert_file, key_file and ca_file are required with listen_address");
    }
  }
  absl::flat_hash_set<std::string> names;
  bool self_listed = false;
  for (int i = 0; i < c->members_size(); ++i) {
    const vault::v1::Member& m = c->members(i);
    std::string field = absl::StrCat("members[", i, "]");
    if (absl::Status s = ValidateVaultName(m.name()); !s.ok()) {
      return FieldError(source, absl::StrCat(field, ".name"), s.message());
    }
    if (!names.insert(m.name()).second) {
      return FieldError(source, absl::StrCat(field, ".name"),
                        absl::StrCat("member \"", m.name(), "\" is listed twice"));
    }
    VAULT_RETURN_IF_ERROR(ValidateHostPort(source, absl::StrCat(field, ".address"), m.address()));
    const std::string& key = m.public_key();
    bool hex_ok = key.size() == 8 + 64 && key.rfind("ed25519:", 0) == 0;
    for (size_t k = 8; hex_ok && k < key.size(); ++k) {
      hex_ok = (key[k] >= '0' && key[k] <= '9') || (key[k] >= 'a' && key[k] <= 'f');
    }
    if (!hex_ok) {
      return FieldError(source, absl::StrCat(field, ".public_key"),
                        absl::StrCat("\"", key, "\" is not ed25519:<64 lowercase hex>"));
    }
    if (m.name() == c->name()) self_listed = true;
  }
  if (c->members_size() > 0 && !self_listed) {
    return FieldError(source, "members",
                      absl::StrCat("this vault (\"", c->name(), "\") is not among the members"));
  }
  absl::flat_hash_set<std::string> followed;
  for (int i = 0; i < c->follow_size(); ++i) {
    vault::v1::FollowConfig* f = c->mutable_follow(i);
    std::string field = absl::StrCat("follow[", i, "]");
    if (f->interval_ms() == 0) f->set_interval_ms(2000);
    if (f->peer() == c->name()) {
      return FieldError(source, absl::StrCat(field, ".peer"), "a vault cannot follow itself");
    }
    if (!names.contains(f->peer())) {
      return FieldError(source, absl::StrCat(field, ".peer"),
                        absl::StrCat("\"", f->peer(), "\" is not among the members"));
    }
    if (!followed.insert(f->peer()).second) {
      return FieldError(source, absl::StrCat(field, ".peer"),
                        absl::StrCat("\"", f->peer(), "\" is followed twice"));
    }
    if (f->interval_ms() < 100) {
      return FieldError(source, absl::StrCat(field, ".interval_ms"), "must be at least 100");
    }
    if (f->selection().max_bytes() != 0 &&
        f->selection().max_bytes() < f->selection().min_bytes()) {
      return FieldError(source, absl::StrCat(field, ".selection"), "max_bytes is below min_bytes");
    }
    if (c->tls().cert_file().empty() || c->tls().key_file().empty() || c->tls().ca_file().empty()) {
      return FieldError(source, field, "following a peer needs the tls section");
    }
  }
  {
    if (c->scrub().bytes_per_second() == 0) {
      if (c->scrub().interval_ms() != 0 || c->scrub().repair_from_size() > 0) {
        return FieldError(source, "scrub.bytes_per_second",
                          "is 0 (the scrub is off), yet other scrub fields are set; set a rate "
                          "(at least 65536) or remove the scrub section");
      }
    } else {
      vault::v1::ScrubConfig* scrub = c->mutable_scrub();
      if (scrub->interval_ms() == 0) scrub->set_interval_ms(86400000);
      if (scrub->bytes_per_second() < (64u << 10)) {
        return FieldError(source, "scrub.bytes_per_second",
                          absl::StrCat(scrub->bytes_per_second(),
                                       " is below the least rate of 65536 bytes per second"));
      }
      if (scrub->interval_ms() < 100) {
        return FieldError(source, "scrub.interval_ms", "must be at least 100");
      }
      absl::flat_hash_set<std::string> repair_from;
      for (int i = 0; i < scrub->repair_from_size(); ++i) {
        const std::string& peer = scrub->repair_from(i);
        const std::string field = absl::StrCat("scrub.repair_from[", i, "]");
        if (peer == c->name()) {
          return FieldError(source, field, "a vault cannot repair from itself");
        }
        if (!names.contains(peer)) {
          return FieldError(source, field, absl::StrCat("\"", peer, "\" is not among the members"));
        }
        if (!repair_from.insert(peer).second) {
          return FieldError(source, field, absl::StrCat("\"", peer, "\" is listed twice"));
        }
      }
      if (scrub->repair_from_size() > 0 &&
          (c->tls().cert_file().empty() || c->tls().key_file().empty() ||
           c->tls().ca_file().empty())) {
        return FieldError(source, "scrub.repair_from",
                          "repairing from members needs the tls section");
      }
    }
  }
  uint64_t avg = cas->chunk_avg_bytes();
  if (avg < (64u << 10) || avg > (4u << 20) || (avg & (avg - 1)) != 0) {
    return FieldError(source, "cas.chunk_avg_bytes",
                      "must be a power of two between 65536 and 4194304");
  }
  if (cas->chunking_threshold_bytes() > (64u << 20)) {
    return FieldError(source, "cas.chunking_threshold_bytes",
                      "must be at most 64 MiB (smaller objects are held in memory whole)");
  }
  if (cas->gc().compact_below_live_percent() > 100) {
    return FieldError(source, "cas.gc.compact_below_live_percent", "must be between 1 and 100");
  }
  if (cas->max_upload_buffer_bytes() < cas->chunking_threshold_bytes()) {
    return FieldError(source, "cas.max_upload_buffer_bytes",
                      "must be at least cas.chunking_threshold_bytes");
  }
  if (cas->chunking_threshold_bytes() < 4 * avg) {
    return FieldError(source, "cas.chunking_threshold_bytes",
                      absl::StrCat("must be at least 4 x cas.chunk_avg_bytes (", 4 * avg, ")"));
  }
  if (cas->max_batch_bytes() + (64 << 10) > srv->max_message_bytes()) {
    return FieldError(source, "cas.max_batch_bytes",
                      "must be at least 64 KiB below server.max_message_bytes");
  }
  // (At least 2 MiB: a member's Commit may carry an agent state of up to 1 MiB.)
  if (srv->max_message_bytes() < (2 << 20) || srv->max_message_bytes() > (64u << 20)) {
    return FieldError(source, "server.max_message_bytes", "must be between 2 MiB and 64 MiB");
  }
  if (audit->checkpoint_interval_ms() < 10) {
    return FieldError(source, "audit.checkpoint_interval_ms", "must be at least 10");
  }
  if (audit->mirror_interval_ms() < 10) {
    return FieldError(source, "audit.mirror_interval_ms", "must be at least 10");
  }
  if (audit->mirror_rpc_timeout_ms() < 100) {
    return FieldError(source, "audit.mirror_rpc_timeout_ms", "must be at least 100");
  }
  if (c->sandbox().host_id_base() < 1000) {
    return FieldError(source, "sandbox.host_id_base", "must be at least 1000 (not a system id)");
  }
  if (uint64_t{c->sandbox().host_id_base()} + c->sandbox().host_id_count() > 0xFFFFFFFEull) {
    return FieldError(source, "sandbox.host_id_count", "the range must end below 4294967294");
  }
  {
    const std::string& folder = c->sandbox().cgroup_folder();
    bool valid = folder.size() <= 64 && folder != "." && folder != "..";
    for (char ch : folder) {
      valid = valid && (absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '.' ||
                        ch == '_' || ch == '-');
    }
    if (!valid)
      return FieldError(source, "sandbox.cgroup_folder", "must match [A-Za-z0-9._-]{1,64}");
  }
  if (agents->max_frame_bytes() < 4096 || agents->max_frame_bytes() > (16u << 20)) {
    return FieldError(source, "agents.max_frame_bytes", "must be between 4096 and 16 MiB");
  }
  if (agents->read_timeout_ms() < 10) {
    return FieldError(source, "agents.read_timeout_ms", "must be at least 10");
  }
  if (agents->terminate_after_denials() < agents->flag_after_denials()) {
    return FieldError(source, "agents.terminate_after_denials",
                      "must be at least agents.flag_after_denials");
  }
  for (int i = 0; i < agents->admins_size(); ++i) {
    if (absl::Status s = capability::PublicKey::FromText(agents->admins(i)).status(); !s.ok()) {
      return FieldError(source, absl::StrCat("agents.admins[", i, "]"), s.message());
    }
  }
  if (agents->worker_threads() > 256) {
    return FieldError(source, "agents.worker_threads", "must be at most 256");
  }
  if (check_files) {
    VAULT_RETURN_IF_ERROR(CheckReadable(source, "key_file", c->key_file()));
    if (absl::Status s = common::ReadPrivateFile(c->key_file()).status(); !s.ok()) {
      return FieldError(source, "key_file", s.message());
    }
    if (!c->listen_address().empty()) {
      VAULT_RETURN_IF_ERROR(CheckReadable(source, "tls.cert_file", c->tls().cert_file()));
      VAULT_RETURN_IF_ERROR(CheckReadable(source, "tls.key_file", c->tls().key_file()));
      if (absl::Status s = common::ReadPrivateFile(c->tls().key_file()).status(); !s.ok()) {
        return FieldError(source, "tls.key_file", s.message());
      }
      VAULT_RETURN_IF_ERROR(CheckReadable(source, "tls.ca_file", c->tls().ca_file()));
    }
  }
  return absl::OkStatus();
}

std::string ConfigToText(const vault::v1::VaultConfig& config) {
  std::string out;
  google::protobuf::TextFormat::Printer printer;
  printer.PrintToString(config, &out);
  return out;
}

}  // namespace vault::node
