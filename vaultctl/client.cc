#include "vaultctl/client.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "node/config.h"

namespace vault::vaultctl {

absl::StatusOr<Connection> Connection::Connect(const ConnectOptions& in) {
  ConnectOptions o = in;
  vault::v1::VaultConfig config;
  bool have_config = false;
  if (!o.config.empty()) {
    VAULT_ASSIGN_OR_RETURN(config, node::LoadConfigFile(o.config));
    VAULT_RETURN_IF_ERROR(node::FinalizeConfig(o.config, &config, /*check_files=*/false));
    have_config = true;
  }
  if (o.vault.empty()) {
    if (const char* env = std::getenv("VAULT_ADDR"); env != nullptr) o.vault = env;
  }
  if (o.vault.empty() && have_config) o.vault = config.admin_socket();
  if (o.vault.empty()) {
    return absl::InvalidArgumentError(
        "no vault given: pass --vault SOCKET|HOST:PORT, set VAULT_ADDR, or pass --config");
  }

  Connection c;
  c.timeout_ = o.timeout;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // Reconnect quickly: vaultctl's own retries (cas put) must find a vault that came back.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (absl::StartsWith(o.vault, "unix:") || absl::StrContains(o.vault, "/")) {
    c.target_ = absl::StartsWith(o.vault, "unix:") ? o.vault : absl::StrCat("unix:", o.vault);
    creds = grpc::InsecureChannelCredentials();
  } else {
    c.target_ = o.vault;
    if (have_config) {
      if (o.tls_cert.empty()) o.tls_cert = config.tls().cert_file();
      if (o.tls_key.empty()) o.tls_key = config.tls().key_file();
      if (o.tls_ca.empty()) o.tls_ca = config.tls().ca_file();
      if (o.server_name.empty()) {
        for (const vault::v1::Member& m : config.members()) {
          if (m.address() == o.vault) o.server_name = m.name();
        }
        if (o.server_name.empty() && config.listen_address() == o.vault) {
          o.server_name = config.name();
        }
      }
    }
    if (o.tls_cert.empty() || o.tls_key.empty() || o.tls_ca.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          o.vault, " is a TCP address: mutual TLS needs --tls-cert, --tls-key and --tls-ca ",
          "(or --config of a member vault)"));
    }
    if (o.server_name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("which vault is at ", o.vault,
                       "? pass --server-name NAME (the name in its certificate)"));
    }
    grpc::SslCredentialsOptions ssl;
    VAULT_ASSIGN_OR_RETURN(ssl.pem_cert_chain, common::ReadFile(o.tls_cert));
    VAULT_ASSIGN_OR_RETURN(ssl.pem_private_key, common::ReadPrivateFile(o.tls_key));
    VAULT_ASSIGN_OR_RETURN(ssl.pem_root_certs, common::ReadFile(o.tls_ca));
    creds = grpc::SslCredentials(ssl);
    args.SetSslTargetNameOverride(o.server_name);
  }
  c.channel_ = grpc::CreateCustomChannel(c.target_, creds, args);
  // Kept until the process ends: vaultctl leaves with _exit (main.cc), without gRPC's teardown.
  static auto* const kept = new std::vector<std::shared_ptr<grpc::Channel>>();
  kept->push_back(c.channel_);
  c.cas_ = vault::v1::Cas::NewStub(c.channel_);
  c.admin_ = vault::v1::Admin::NewStub(c.channel_);
  c.agents_ = vault::v1::Agents::NewStub(c.channel_);
  c.audit_ = vault::v1::Audit::NewStub(c.channel_);
  c.audit_admin_ = vault::v1::AuditAdmin::NewStub(c.channel_);
  c.federation_ = vault::v1::Federation::NewStub(c.channel_);
  return c;
}

std::unique_ptr<grpc::ClientContext> Connection::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  return ctx;
}

std::unique_ptr<grpc::ClientContext> Connection::StreamContext(uint64_t bytes) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  absl::Duration extra = absl::Seconds(static_cast<double>(bytes) / (8 << 20));
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout_ + extra));
  return ctx;
}

}  // namespace vault::vaultctl
