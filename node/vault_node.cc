#include "node/vault_node.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "capability/principal.h"
#include "common/file_util.h"
#include "common/sha256.h"
#include "common/status_macros.h"
#include "node/membership.h"
#include "spdlog/spdlog.h"

namespace vault::node {
namespace {

void AppendLine(std::string& text, absl::string_view line) {
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  absl::StrAppend(&text, line);
}

// The container sandbox type over `images` (docs/containers.md): FAILED_PRECONDITION, naming the
// fix, when it cannot run here.
absl::StatusOr<std::unique_ptr<sandbox::ContainerSandbox>> StartContainers(
    const vault::v1::VaultConfig& config, image::ImageStore* images,
    const std::string& stage_root) {
  const vault::v1::ContainersConfig& c = config.containers();
  if (c.runtime() == "none") {
    return absl::FailedPreconditionError("containers.runtime is \"none\" in the config");
  }
  if (geteuid() != 0) {
    return absl::FailedPreconditionError(
        "container agents need vaultd to run as root (runc creates their user namespaces)");
  }
  // The containers' host ids walk to their roots and scratch folders through the data folder:
  // search (o+x), never listing. Taken back if the type cannot start.
  struct stat st;
  mode_t restore = 0;
  if (stat(config.data_dir().c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0 &&
      chmod(config.data_dir().c_str(), (st.st_mode & 07777) | S_IXOTH) == 0) {
    restore = st.st_mode & 07777;
  }
  sandbox::ContainerSandboxOptions options;
  options.runtime = c.runtime();
  options.state_dir = c.state_dir();
  options.stage_root = stage_root;
  options.reachable = {c.rootfs_dir()};
  options.images = [images](const std::string& hex,
                            uint64_t size) -> absl::StatusOr<sandbox::ContainerImage> {
    absl::StatusOr<vault::v1::ImageRecord> record = images->Resolve(absl::StrCat("sha256:", hex));
    if (absl::IsNotFound(record.status())) {
      // Not imported here, but its blobs may be in the CAS: an agent arriving from another vault
      // brought the ones this vault lacked.
      absl::StatusOr<cas::Digest> manifest =
          cas::Digest::FromParts(absl::HexStringToBytes(hex), size);
      if (!manifest.ok()) return manifest.status();
      record = images->ImportFromStore(*manifest);
      if (absl::IsNotFound(record.status())) {
        return absl::NotFoundError(absl::StrCat(
            "this vault has no image sha256:", hex, " (", record.status().message(),
            "); a container agent's code is an imported image: vaultctl image import FILE"));
      }
      if (!record.ok()) return record.status();
      spdlog::info("image {} imported from the CAS for a container agent", record->id());
    }
    if (!record.ok()) return record.status();
    sandbox::ContainerImage image;
    image.rootfs = images->RootfsPath(*record);
    image.entrypoint.assign(record->entrypoint().begin(), record->entrypoint().end());
    image.cmd.assign(record->cmd().begin(), record->cmd().end());
    image.env.assign(record->env().begin(), record->env().end());
    image.working_dir = record->working_dir();
    return image;
  };
  absl::StatusOr<std::unique_ptr<sandbox::ContainerSandbox>> created =
      sandbox::ContainerSandbox::Create(options);
  if (restore != 0) {
    if (created.ok()) {
      spdlog::info("data folder {}: o+x added, so that container agents reach their image roots",
                   config.data_dir());
    } else {
      chmod(config.data_dir().c_str(), restore);
    }
  }
  return created;
}

// Admits one refusal entry per certificate name per minute; the admitted one carries the count of
// refusals since the last entry for that name.
class RefusalThrottle {
 public:
  std::optional<uint64_t> Admit(const std::string& names, absl::Time now) {
    absl::MutexLock lock(&mu_);
    if (seen_.size() > 10000) seen_.clear();  // bounded memory under a storm of names
    Seen& s = seen_[names];
    ++s.count;
    if (now - s.last < absl::Minutes(1)) return std::nullopt;
    s.last = now;
    uint64_t n = s.count;
    s.count = 0;
    return n;
  }

 private:
  struct Seen {
    absl::Time last = absl::InfinitePast();
    uint64_t count = 0;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MemberCredentials(
    const vault::v1::VaultConfig& config, MemberAuthProcessor::RefusalHook on_refused) {
  VAULT_ASSIGN_OR_RETURN(std::string cert, common::ReadFile(config.tls().cert_file()));
  VAULT_ASSIGN_OR_RETURN(std::string key, common::ReadPrivateFile(config.tls().key_file()));
  VAULT_ASSIGN_OR_RETURN(std::string ca, common::ReadFile(config.tls().ca_file()));
  grpc::SslServerCredentialsOptions opts(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  opts.pem_root_certs = ca;
  opts.pem_key_cert_pairs.push_back({key, cert});
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(opts);
  absl::flat_hash_set<std::string> members;
  for (const vault::v1::Member& m : config.members()) members.insert(m.name());
  members.insert(config.name());
  creds->SetAuthMetadataProcessor(
      std::make_shared<MemberAuthProcessor>(std::move(members), std::move(on_refused)));
  return creds;
}

// OK when `path` is free or holds a socket nobody listens on (removed); FAILED_PRECONDITION
// when something answers on it or it is not a socket.
absl::Status ClaimSocketPath(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return common::PosixError(errno, absl::StrCat("stat ", path));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "admin socket path ", path, " exists and is not a socket; refusing to replace it"));
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return common::PosixError(errno, "socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  if (live) {
    return absl::FailedPreconditionError(
        absl::StrCat("admin socket ", path, " is in use by another process (another vaultd?)"));
  }
  if (unlink(path.c_str()) != 0) return common::PosixError(errno, absl::StrCat("unlink ", path));
  return absl::OkStatus();
}

void ConfigureBuilder(const vault::v1::VaultConfig& config, grpc::ServerBuilder* b) {
  grpc::ResourceQuota quota("vaultd");
  quota.Resize(size_t{config.server().memory_quota_mb()} << 20);
  b->SetResourceQuota(quota);
  b->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                        static_cast<int>(config.server().max_concurrent_streams()));
  b->SetMaxReceiveMessageSize(static_cast<int>(config.server().max_message_bytes()));
  b->SetMaxSendMessageSize(static_cast<int>(config.server().max_message_bytes()));
  // Detect dead peers on idle streams (Feed follow) within a minute.
  b->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  b->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  b->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  b->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
}

}  // namespace

std::vector<storage::ColumnFamilySpec> VaultNode::ColumnFamilies() {
  std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
  for (storage::ColumnFamilySpec& cf : audit::LogStore::ColumnFamilies()) {
    cfs.push_back(std::move(cf));
  }
  for (storage::ColumnFamilySpec& cf : agent::AgentRuntime::ColumnFamilies()) {
    cfs.push_back(std::move(cf));
  }
  for (storage::ColumnFamilySpec& cf : migration::Migration::ColumnFamilies()) cfs.push_back(cf);
  for (storage::ColumnFamilySpec& cf : replication::Follower::ColumnFamilies()) {
    cfs.push_back(std::move(cf));
  }
  for (storage::ColumnFamilySpec& cf : image::ImageStore::ColumnFamilies()) cfs.push_back(cf);
  for (storage::ColumnFamilySpec& cf : cas::Pins::ColumnFamilies()) cfs.push_back(cf);
  return cfs;
}

absl::StatusOr<std::unique_ptr<VaultNode>> VaultNode::Start(const vault::v1::VaultConfig& config,
                                                            StartOptions options) {
  std::unique_ptr<VaultNode> node(new VaultNode());
  node->config_ = config;
  node->started_unix_ms_ = absl::ToUnixMillis(absl::Now());
  node->hold_agents_ = options.hold_agents;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  VAULT_ASSIGN_OR_RETURN(capability::PrivateKey key,
                         capability::PrivateKey::LoadFile(config.key_file()));
  VAULT_RETURN_IF_ERROR(common::MakeDirs(config.data_dir(), 0700));
  if (chmod(config.data_dir().c_str(), 0700) != 0) {
    return common::PosixError(errno, absl::StrCat("chmod ", config.data_dir()));
  }

  storage::DatabaseOptions db_options{
      .path = config.data_dir() + "/db",
      .sync_writes = config.storage().sync_writes(),
      .block_cache_mb = config.storage().block_cache_mb(),
  };
  absl::StatusOr<std::unique_ptr<storage::Database>> db =
      storage::Database::Open(db_options, ColumnFamilies());
  if (!db.ok()) {
    if (absl::StrContains(db.status().message(), "lock")) {
      return absl::FailedPreconditionError(absl::StrCat("data directory ", config.data_dir(),
                                                        " is in use by another vaultd (",
                                                        db.status().message(), ")"));
    }
    return db.status();
  }
  node->db_ = *std::move(db);
  cas::StoreOptions store_options{
      .max_object_bytes = config.cas().max_object_bytes(),
      .chunking_threshold = config.cas().chunking_threshold_bytes(),
      .chunk_avg_bytes = config.cas().chunk_avg_bytes(),
      .upload_ttl = absl::Hours(config.cas().upload_ttl_hours()),
      .max_upload_buffer_bytes = config.cas().max_upload_buffer_bytes(),
      .pack_dir = config.data_dir() + "/packs",
      .direct_chunk_writes = config.storage().direct_chunk_writes(),
      // Half the collector's grace period (design §12).
      .confirm_after = absl::Seconds(config.cas().gc().keep_unheld_seconds()) / 2,
  };
  VAULT_ASSIGN_OR_RETURN(node->store_, cas::Store::Open(node->db_.get(), store_options));
  node->key_ = std::make_unique<capability::PrivateKey>(std::move(key));
  VAULT_ASSIGN_OR_RETURN(
      node->audit_log_,
      audit::AuditLog::Open(
          node->db_.get(), node->key_.get(),
          {.vault_name = config.name(),
           .checkpoint_every_entries = config.audit().checkpoint_every_entries(),
           .checkpoint_interval = absl::Milliseconds(config.audit().checkpoint_interval_ms())}));
  const std::string self_key = node->key_->public_key().ToText();
  node->auditor_ = std::make_unique<Auditor>(node->audit_log_.get(), config, self_key);
  // Metrics read the components at scrape time; scrapes begin once Start is done with them.
  node->metrics_ = std::make_unique<Metrics>();
  {
    VaultNode* n = node.get();
    node->metrics_->SetSources(
        {.cas_totals = [n] { return n->store_->totals(); },
         .audit_log = n->audit_log_.get(),
         .mirrors =
             [n] {
               return n->follower_ != nullptr ? n->follower_->Statuses()
                                              : std::vector<vault::v1::MirrorStatus>();
             },
         .follows =
             [n] {
               return n->replication_follower_ != nullptr
                          ? n->replication_follower_->Statuses()
                          : std::vector<replication::FollowStatus>();
             },
         .agents = [n]() -> absl::StatusOr<std::vector<vault::v1::AgentRecord>> {
           if (n->agents_ == nullptr) return std::vector<vault::v1::AgentRecord>();
           return n->agents_->store()->LoadAll();
         },
         .wasm_starts = [n]() -> MetricsSources::WarmStarts {
           if (n->wasm_sandbox_ == nullptr) return {};
           const sandbox::WasmSandbox::Starts starts = n->wasm_sandbox_->starts();
           return {.ready = starts.ready, .warm = starts.warm, .cold = starts.cold};
         },
         .cas_last_collection = [n]() -> std::optional<vault::v1::CollectReport> {
           if (n->cas_lifecycle_ == nullptr) return std::nullopt;
           return n->cas_lifecycle_->last_report();
         }});
  }
  // Images: their folders are made here, before the admin socket's umask,
  // and before the agents (a container agent resumed at start runs from one).
  image::UnpackLimits unpack;
  unpack.max_bytes = config.containers().max_image_bytes();
  unpack.max_entries = config.containers().max_image_entries();
  VAULT_ASSIGN_OR_RETURN(
      node->images_,
      image::ImageStore::Open(node->db_.get(), node->store_.get(),
                              {.rootfs_dir = config.containers().rootfs_dir(),
                               .limits = unpack,
                               .max_archive_bytes = config.containers().max_import_bytes()}));
  // The agents' sandbox: probe the kernel once and say plainly what is active. A missing fence
  // that the config requires disables agents; it does not stop the vault.
  {
    sandbox::LinuxSandboxOptions options;
    options.required = {.landlock = false, .cgroups = false};
    options.host_id_base = config.sandbox().host_id_base();
    options.host_id_count = config.sandbox().host_id_count();
    options.init_path = config.sandbox().init_path();
    options.cgroup_folder = config.sandbox().cgroup_folder();
    absl::StatusOr<std::unique_ptr<sandbox::LinuxSandbox>> box =
        sandbox::LinuxSandbox::Create(options);
    AdminService::SandboxState& state = node->sandbox_state_;
    if (box.ok()) {
      state.fences = (*box)->fences().Describe();
      absl::Status policy =
          sandbox::CheckPolicy((*box)->fences(), {.landlock = config.sandbox().require_landlock(),
                                                  .cgroups = config.sandbox().require_cgroups()});
      state.agents_enabled = policy.ok();
      state.disabled_reason = std::string(policy.message());
      node->sandbox_ = std::move(*box);
    } else {
      state.disabled_reason = std::string(box.status().message());
    }
    for (absl::string_view line : absl::StrSplit(state.fences, '\n', absl::SkipEmpty())) {
      spdlog::info("sandbox fence: {}", std::string(line));
    }
    if (!state.agents_enabled) spdlog::error("agents are disabled: {}", state.disabled_reason);
  }
  VAULT_RETURN_IF_ERROR(node->auditor_->Record(Auditor::Entry(
      self_key, "vault.start", config.name(), vault::v1::AuditEntry::ALLOWED, "",
      {{"version", kVersion},
       {"listen_address", config.listen_address()},
       {"members", absl::StrCat(config.members_size())},
       {"agents", node->sandbox_state_.agents_enabled
                      ? std::string("enabled")
                      : absl::StrCat("disabled: ", node->sandbox_state_.disabled_reason)}})));
  {
    agent::RuntimeOptions options;
    options.config = config.agents();
    options.vault_name = config.name();
    options.data_dir = config.data_dir();
    options.members.assign(config.members().begin(), config.members().end());
    agent::RuntimeDeps deps;
    deps.db = node->db_.get();
    deps.cas = node->store_.get();
    deps.log = node->audit_log_.get();
    deps.vault_key = node->key_.get();
    node->counted_sandbox_ = node->metrics_->CountSpawns(node->sandbox_.get());
    if (node->counted_sandbox_ != nullptr && node->sandbox_state_.agents_enabled) {
      node->sandbox_types_.Add(node->counted_sandbox_.get());
      // An interpreter's runner is staged where every sandbox's host id reaches it, one copy per
      // build shared by the machine's vaults (runner_files.h).
      const std::string stage_root = geteuid() == 0 ? "/var/lib/vault-sandbox/runners"
                                                    : absl::StrCat(config.data_dir(), "/runners");
      absl::StatusOr<std::unique_ptr<sandbox::SchemeSandbox>> scheme =
          sandbox::SchemeSandbox::Create(node->counted_sandbox_.get(), "", stage_root);
      if (scheme.ok()) {
        node->scheme_sandbox_ = *std::move(scheme);
        node->sandbox_types_.Add(node->scheme_sandbox_.get());
      } else {
        node->sandbox_types_.AddUnavailable("scheme", std::string(scheme.status().message()));
      }
      absl::StatusOr<std::unique_ptr<sandbox::WasmSandbox>> wasm = sandbox::WasmSandbox::Create(
          node->counted_sandbox_.get(), "", stage_root,
          config.agents().wasm_warm_pool() == 0
              ? 2
              : static_cast<size_t>(std::max(config.agents().wasm_warm_pool(), 0)));
      if (wasm.ok()) {
        node->wasm_sandbox_ = *std::move(wasm);
        node->sandbox_types_.Add(node->wasm_sandbox_.get());
      } else {
        node->sandbox_types_.AddUnavailable("wasm", std::string(wasm.status().message()));
      }
      absl::StatusOr<std::unique_ptr<sandbox::ContainerSandbox>> containers =
          StartContainers(config, node->images_.get(), stage_root);
      if (containers.ok()) {
        node->container_sandbox_ = *std::move(containers);
        node->sandbox_types_.Add(node->container_sandbox_.get());
        AppendLine(node->sandbox_state_.fences,
                   absl::StrCat("container: ", node->container_sandbox_->description()));
      } else {
        node->sandbox_types_.AddUnavailable("container",
                                            std::string(containers.status().message()));
        AppendLine(node->sandbox_state_.fences,
                   absl::StrCat("container: unavailable: ", containers.status().message()));
      }
    } else {
      for (const char* type : {"posix", "scheme", "wasm", "container"}) {
        node->sandbox_types_.AddUnavailable(type, node->sandbox_state_.disabled_reason);
      }
    }
    for (const std::string& line : node->sandbox_types_.Describe()) {
      spdlog::info("sandbox type {}", line);
    }
    deps.sandboxes = &node->sandbox_types_;
    deps.agents_enabled = node->sandbox_state_.agents_enabled;
    deps.disabled_reason = node->sandbox_state_.disabled_reason;
    VAULT_ASSIGN_OR_RETURN(node->agents_,
                           agent::AgentRuntime::Start(std::move(options), std::move(deps)));
  }
  // Migration reaches members over mutual TLS; without TLS material agents stay where they are.
  if (absl::StatusOr<std::unique_ptr<migration::GrpcTransport>> t =
          migration::GrpcTransport::Create(config, node->store_.get());
      t.ok()) {
    node->transport_ = *std::move(t);
    node->agents_->SetMemberClient(node->transport_.get());
  }
  {
    migration::MigrationOptions options;
    options.vault_name = config.name();
    options.members.assign(config.members().begin(), config.members().end());
    VAULT_ASSIGN_OR_RETURN(
        node->migration_,
        migration::Migration::Start(std::move(options), {.db = node->db_.get(),
                                                         .cas = node->store_.get(),
                                                         .vault_key = node->key_.get(),
                                                         .port = node->agents_->migration_port(),
                                                         .transport = node->transport_.get()}));
    node->agents_->SetMigrator(node->migration_.get());
  }
  // Every served log has a checkpoint from the start (peers and `audit tail` rely on one).
  VAULT_RETURN_IF_ERROR(node->audit_log_->IssueCheckpoint().status());
  VAULT_ASSIGN_OR_RETURN(node->follower_,
                         AuditFollower::Start(config, node->db_.get(), node->auditor_.get()));
  // One work queue per listener: members flooding the TCP listener cannot starve the
  // operator's admin socket.
  node->tcp_executor_ =
      std::make_unique<common::Executor>(config.server().worker_threads(), /*max_queue=*/4096);
  node->unix_executor_ =
      std::make_unique<common::Executor>(config.server().worker_threads(), /*max_queue=*/4096);
  CasLimits limits{.max_batch_bytes = config.cas().max_batch_bytes(),
                   .max_find_missing = config.cas().max_find_missing(),
                   .max_batch_items = config.cas().max_batch_items()};
  node->tcp_cas_ = std::make_unique<CasService>(node->store_.get(), node->tcp_executor_.get(),
                                                limits, node->auditor_.get());
  node->unix_cas_ = std::make_unique<CasService>(node->store_.get(), node->unix_executor_.get(),
                                                 limits, node->auditor_.get());
  node->tcp_audit_ = std::make_unique<AuditService>(node->audit_log_.get(), node->follower_.get(),
                                                    node->tcp_executor_.get(), /*admin=*/false);
  node->unix_audit_ = std::make_unique<AuditService>(node->audit_log_.get(), node->follower_.get(),
                                                     node->unix_executor_.get(), /*admin=*/true);
  node->audit_admin_ = std::make_unique<AuditAdminService>(
      node->audit_log_.get(), node->follower_.get(), node->unix_executor_.get());

  // Federation listener.
  if (!config.listen_address().empty()) {
    // Refused callers are audited from the TCP work queue (never on gRPC's own threads), at
    // most one entry per certificate name per minute, so a non-member retrying in a loop cannot
    // flood the log; the entry counts the refusals it stands for.
    Auditor* auditor = node->auditor_.get();
    common::Executor* executor = node->tcp_executor_.get();
    auto throttle = std::make_shared<RefusalThrottle>();
    auto on_refused = [auditor, executor, throttle](const std::string& names,
                                                    const std::string& reason) {
      std::optional<uint64_t> count = throttle->Admit(names, absl::Now());
      if (!count.has_value()) return;
      executor->Schedule([auditor, names, reason, n = *count] {
        (void)auditor->Record(Auditor::Entry(absl::StrCat("tls:", names), "federation.connect",
                                             names, vault::v1::AuditEntry::DENIED, reason,
                                             {{"refusals", absl::StrCat(n)}}));
      });
    };
    VAULT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                           MemberCredentials(config, on_refused));
    grpc::ServerBuilder b;
    ConfigureBuilder(config, &b);
    b.experimental().SetInterceptorCreators(node->metrics_->RpcInterceptors("federation"));
    // Without this gRPC sets SO_REUSEPORT, and a second vault on the same port would silently
    // share its connections.
    b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    int port = 0;
    b.AddListeningPort(config.listen_address(), creds, &port);
    b.RegisterService(node->tcp_cas_.get());
    b.RegisterService(node->tcp_audit_.get());
    node->migration_service_ = std::make_unique<MigrationService>(
        node->agents_.get(), node->migration_.get(), node->tcp_executor_.get());
    b.RegisterService(node->migration_service_.get());
    node->message_service_ =
        std::make_unique<MessageService>(node->agents_.get(), node->tcp_executor_.get());
    b.RegisterService(node->message_service_.get());
    node->tcp_federation_ = std::make_unique<FederationService>(
        node->FederationDeps(node->tcp_executor_.get()), /*admin=*/false);
    b.RegisterService(node->tcp_federation_.get());
    node->tcp_server_ = b.BuildAndStart();
    if (node->tcp_server_ == nullptr || port == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", config.listen_address(),
                                                 " (address in use, or not a local address?)"));
    }
    std::string host = config.listen_address().substr(0, config.listen_address().rfind(':'));
    node->listen_address_ = absl::StrCat(host, ":", port);
  }

  // Admin socket: a stale socket left by a killed vaultd is replaced; a live one, or anything
  // that is not a socket, is refused (the socket may live outside the locked data directory).
  const std::string& sock = config.admin_socket();
  VAULT_RETURN_IF_ERROR(ClaimSocketPath(sock));
  node->owns_socket_ = true;
  if (absl::StatusOr<std::unique_ptr<replication::MemberChannels>> members =
          replication::MemberChannels::Create(config);
      members.ok()) {
    node->members_ = *std::move(members);
  }
  node->admin_ = std::make_unique<AdminService>(
      config, node->key_->public_key().ToText(), node->listen_address_, node->store_.get(),
      node->sandbox_state_, node->auditor_.get(), node->members_.get());
  node->import_executor_ = std::make_unique<common::Executor>(/*threads=*/1, /*max_queue=*/4);
  node->image_service_ = std::make_unique<ImageService>(
      node->images_.get(), node->unix_executor_.get(), node->import_executor_.get(),
      node->auditor_.get(),
      ImageService::Options{
          .spool_dir = absl::StrCat(config.data_dir(), "/imports"),
          .max_import_bytes = config.containers().max_import_bytes(),
          .max_import_time = absl::Seconds(config.containers().max_import_seconds())});
  VAULT_ASSIGN_OR_RETURN(
      node->cas_lifecycle_,
      CasLifecycle::Start(config.cas().gc(), {.db = node->db_.get(),
                                              .store = node->store_.get(),
                                              .agents = node->agents_.get(),
                                              .images = node->images_.get(),
                                              .auditor = node->auditor_.get(),
                                              .pack_dir = config.data_dir() + "/packs",
                                              .db_dir = config.data_dir() + "/db"}));
  node->collect_executor_ = std::make_unique<common::Executor>(/*threads=*/1, /*max_queue=*/2);
  node->cas_admin_ =
      std::make_unique<CasAdminService>(node->cas_lifecycle_.get(), node->unix_executor_.get(),
                                        node->collect_executor_.get(), node->auditor_.get());
  grpc::ServerBuilder b;
  ConfigureBuilder(config, &b);
  b.experimental().SetInterceptorCreators(node->metrics_->RpcInterceptors("admin"));
  mode_t old_umask = umask(0177);  // the socket is created 0600
  b.AddListeningPort(absl::StrCat("unix:", sock), grpc::InsecureServerCredentials());
  b.RegisterService(node->unix_cas_.get());
  b.RegisterService(node->admin_.get());
  b.RegisterService(node->unix_audit_.get());
  b.RegisterService(node->audit_admin_.get());
  node->agent_service_ =
      std::make_unique<AgentService>(node->agents_.get(), node->migration_.get(),
                                     node->unix_executor_.get(), node->auditor_.get());
  b.RegisterService(node->agent_service_.get());
  b.RegisterService(node->image_service_.get());
  b.RegisterService(node->cas_admin_.get());
  node->unix_federation_ = std::make_unique<FederationService>(
      node->FederationDeps(node->unix_executor_.get()), /*admin=*/true);
  b.RegisterService(node->unix_federation_.get());
  node->unix_server_ = b.BuildAndStart();
  umask(old_umask);
  if (node->unix_server_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot listen on unix socket ", sock));
  }
  if (chmod(sock.c_str(), 0600) != 0)
    return common::PosixError(errno, absl::StrCat("chmod ", sock));
  // Peers this vault follows (replication): each on a thread of its own.
  VAULT_ASSIGN_OR_RETURN(
      node->replication_follower_,
      replication::Follower::Start({.db = node->db_.get(),
                                    .store = node->store_.get(),
                                    .log = node->audit_log_.get(),
                                    .self_key = self_key,
                                    .members = node->members_.get()},
                                   {config.follow().begin(), config.follow().end()}));
  // The background scrub: stored objects re-hashed at the configured rate, repaired from members.
  if (config.scrub().bytes_per_second() > 0) {
    VAULT_ASSIGN_OR_RETURN(node->scrubber_,
                           replication::Scrubber::Start({.db = node->db_.get(),
                                                         .store = node->store_.get(),
                                                         .log = node->audit_log_.get(),
                                                         .self_key = self_key,
                                                         .members = node->members_.get()},
                                                        config.scrub()));
  }
  // Prometheus metrics over HTTP; every source is in place from here on.
  if (!config.metrics_listen().empty()) {
    VAULT_RETURN_IF_ERROR(node->metrics_->Serve(config.metrics_listen()));
  }
  // Agents that were running when the vault last stopped (or was killed) run again from their
  // last checkpoints.
  if (options.hold_agents) {
    size_t held = node->agents_->List({}).agents_size();
    spdlog::warn(
        "--hold-agents: no agent resumes ({} agent records); `vaultctl agent ls` lists "
        "them, `agent where` finds them in the federation",
        held);
    VAULT_RETURN_IF_ERROR(node->auditor_->Record(Auditor::Entry(
        self_key, "vault.hold_agents", config.name(), vault::v1::AuditEntry::ALLOWED,
        "started with --hold-agents: agents recorded as running do not resume", {})));
  } else {
    VAULT_RETURN_IF_ERROR(node->agents_->ResumeAgents());
  }
  return node;
}

FederationService::Deps VaultNode::FederationDeps(common::Executor* executor) {
  return {.config = &config_,
          .public_key = key_->public_key().ToText(),
          .started_unix_ms = started_unix_ms_,
          .store = store_.get(),
          .log = audit_log_.get(),
          .agents = agents_.get(),
          .mirrors = follower_.get(),
          .db = db_.get(),
          .members = members_.get(),
          .executor = executor,
          .hold_agents = hold_agents_};
}

VaultNode::~VaultNode() { Shutdown(absl::ZeroDuration()); }

void VaultNode::Shutdown(absl::Duration drain) {
  if (shut_down_) return;
  shut_down_ = true;
  // The drain starts now: stopping the followers below waits out their calls in flight.
  auto deadline = std::chrono::system_clock::now() + absl::ToChronoMilliseconds(drain);
  // No scrape reads a component past this point (a scrape in progress finishes first).
  if (metrics_ != nullptr) metrics_->StopServing();
  // Federation status calls waiting on members end now rather than at their deadlines.
  if (unix_federation_ != nullptr) unix_federation_->Shutdown();
  if (tcp_federation_ != nullptr) tcp_federation_->Shutdown();
  if (follower_ != nullptr) follower_->Stop();
  if (replication_follower_ != nullptr) replication_follower_->Stop();
  if (scrubber_ != nullptr) scrubber_->Stop();
  // A collection in progress stops at its next step; the schedule ends.
  if (cas_lifecycle_ != nullptr) cas_lifecycle_->Stop();
  if (store_ != nullptr) store_->Close();  // wakes Feed followers
  for (grpc::Server* s : {tcp_server_.get(), unix_server_.get()}) {
    if (s != nullptr && s->GetHealthCheckService() != nullptr)
      s->GetHealthCheckService()->Shutdown();
  }
  // Both listeners stop accepting at once, then drain in parallel.
  std::thread tcp_drain([&] {
    if (tcp_server_ != nullptr) tcp_server_->Shutdown(deadline);
  });
  if (unix_server_ != nullptr) unix_server_->Shutdown(deadline);
  tcp_drain.join();
  if (tcp_executor_ != nullptr) tcp_executor_->Shutdown();
  if (unix_executor_ != nullptr) unix_executor_->Shutdown();
  if (import_executor_ != nullptr) import_executor_->Shutdown();
  if (collect_executor_ != nullptr) collect_executor_->Shutdown();
  if (tcp_server_ != nullptr) tcp_server_->Wait();
  if (unix_server_ != nullptr) unix_server_->Wait();
  tcp_server_.reset();
  unix_server_.reset();
  agent_service_.reset();
  image_service_.reset();
  cas_admin_.reset();
  cas_lifecycle_.reset();
  images_.reset();
  // Agents are asked to checkpoint and end; their records stay for the next start. (The
  // runtime's Stop stops the migration first: hops in flight settle at the next start.)
  if (agents_ != nullptr) agents_->Stop();
  migration_.reset();
  agents_.reset();
  if (audit_log_ != nullptr) {
    if (auditor_ != nullptr) {
      (void)auditor_->Record(Auditor::Entry(auditor_->self(), "vault.stop", config_.name(),
                                            vault::v1::AuditEntry::ALLOWED));
    }
    audit_log_->Close();  // signs a final checkpoint
  }
  follower_.reset();
  audit_log_.reset();
  store_.reset();
  db_.reset();
  // Only a vault that got as far as binding the socket owns it: a vaultd that failed to start
  // (e.g. because another one holds the data directory) must not remove the other's socket.
  if (owns_socket_) unlink(config_.admin_socket().c_str());
}

}  // namespace vault::node
