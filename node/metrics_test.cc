#include "node/metrics.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "audit/log.h"
#include "capability/principal.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "common/executor.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/auditor.h"
#include "node/cas_service.h"
#include "node/vault_node.h"
#include "storage/database.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::node {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using vault::v1::AuditEntry;

// One sample line of the exposition text, as Prometheus' text format writes it.
std::string Sample(absl::string_view series, absl::string_view value) {
  return absl::StrCat("\n", series, " ", value, "\n");
}

// GET `path` from `address` (ip:port) over a real TCP connection, HTTP/1.0 (the server closes
// the connection after the answer). Returns the whole answer, or "" when it cannot connect.
std::string HttpGet(const std::string& address, const std::string& path) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port)) return "";
  common::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) return "";
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: test\r\n\r\n");
  if (write(fd.get(), request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    return "";
  }
  std::string answer;
  char buf[4096];
  for (;;) {
    ssize_t n = read(fd.get(), buf, sizeof buf);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  return answer;
}

// A real store, audit log and Cas service on an in-process gRPC server whose calls the Metrics
// count (as vaultd's admin listener).
class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<storage::Database>> db = storage::Database::Open(
        {.path = tmp_.Path("db"), .sync_writes = false, .block_cache_mb = 8},
        VaultNode::ColumnFamilies());
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    absl::StatusOr<std::unique_ptr<cas::Store>> store = cas::Store::Open(db_.get(), {});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<capability::PrivateKey> key = capability::PrivateKey::Generate();
    ASSERT_TRUE(key.ok()) << key.status();
    key_ = std::make_unique<capability::PrivateKey>(*std::move(key));
    absl::StatusOr<std::unique_ptr<audit::AuditLog>> log = audit::AuditLog::Open(
        db_.get(), key_.get(), {.vault_name = "vault-t", .background_checkpoints = false});
    ASSERT_TRUE(log.ok()) << log.status();
    log_ = *std::move(log);
    auditor_ = std::make_unique<Auditor>(log_.get(), vault::v1::VaultConfig(),
                                         key_->public_key().ToText());
    executor_ = std::make_unique<common::Executor>(/*threads=*/2, /*max_queue=*/64);
    service_ =
        std::make_unique<CasService>(store_.get(), executor_.get(), CasLimits{}, auditor_.get());
    metrics_ = std::make_unique<Metrics>();
    grpc::ServerBuilder builder;
    builder.experimental().SetInterceptorCreators(metrics_->RpcInterceptors("admin"));
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = vault::v1::Cas::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override {
    if (metrics_ != nullptr) metrics_->StopServing();
    stub_.reset();
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      server_->Wait();
    }
    if (executor_ != nullptr) executor_->Shutdown();
    server_.reset();
    service_.reset();
    metrics_.reset();
  }

  void Append(const std::string& action, AuditEntry::Decision decision, int times = 1) {
    for (int i = 0; i < times; ++i) {
      ASSERT_TRUE(log_->Append(audit::MakeEntry("test", action, "s", decision)).ok());
    }
  }

  grpc::Status BatchPut(const std::vector<std::string>& objects) {
    vault::v1::BatchPutRequest req;
    for (const std::string& o : objects) {
      vault::v1::BatchPutRequest::Item* item = req.add_items();
      item->mutable_digest()->set_sha256(cas::Sha256::Hash(o));
      item->mutable_digest()->set_size(o.size());
      item->set_data(o);
    }
    vault::v1::BatchPutResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->BatchPut(&ctx, req, &resp);
  }

  // `malformed`: a digest whose hash is not 32 bytes (INVALID_ARGUMENT).
  grpc::Status Stat(const std::string& object, bool malformed = false) {
    vault::v1::StatRequest req;
    req.mutable_digest()->set_sha256(malformed ? std::string("short") : cas::Sha256::Hash(object));
    req.mutable_digest()->set_size(object.size());
    vault::v1::StatResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Stat(&ctx, req, &resp);
  }

  common::testing::TempDir tmp_{"metrics_test"};
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<cas::Store> store_;
  std::unique_ptr<capability::PrivateKey> key_;
  std::unique_ptr<audit::AuditLog> log_;
  std::unique_ptr<Auditor> auditor_;
  std::unique_ptr<common::Executor> executor_;
  std::unique_ptr<CasService> service_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<vault::v1::Cas::Stub> stub_;
};

TEST_F(MetricsTest, CountsGrpcCallsByMethodAndStatusCode) {
  ASSERT_TRUE(BatchPut({"one", "two"}).ok());
  ASSERT_TRUE(BatchPut({"three"}).ok());
  EXPECT_EQ(Stat("one", /*malformed=*/true).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Stat("absent").ok());  // an answer: present false
  const std::string text = metrics_->Render();
  EXPECT_THAT(
      text,
      HasSubstr(Sample(
          R"(vault_grpc_server_started_total{listener="admin",method="/vault.v1.Cas/BatchPut"})",
          "2")));
  EXPECT_THAT(
      text,
      HasSubstr(Sample(
          R"(vault_grpc_server_handled_total{code="OK",listener="admin",method="/vault.v1.Cas/BatchPut"})",
          "2")));
  EXPECT_THAT(
      text,
      HasSubstr(Sample(
          R"(vault_grpc_server_handled_total{code="INVALID_ARGUMENT",listener="admin",method="/vault.v1.Cas/Stat"})",
          "1")));
  EXPECT_THAT(
      text,
      HasSubstr(Sample(
          R"(vault_grpc_server_handled_total{code="OK",listener="admin",method="/vault.v1.Cas/Stat"})",
          "1")));
  EXPECT_THAT(
      text,
      HasSubstr(Sample(
          R"(vault_grpc_server_handling_seconds_count{listener="admin",method="/vault.v1.Cas/BatchPut"})",
          "2")));
  EXPECT_THAT(
      text,
      HasSubstr(Sample(
          R"(vault_grpc_server_handling_seconds_count{listener="admin",method="/vault.v1.Cas/Stat"})",
          "2")));
  // No call, no series.
  EXPECT_THAT(text, Not(HasSubstr(R"(method="/vault.v1.Cas/Get")")));
}

TEST_F(MetricsTest, ReadsCasTotalsAndTheAuditLogAtScrapeTime) {
  metrics_->SetSources(
      {.cas_totals = [this] { return store_->totals(); }, .audit_log = log_.get()});
  EXPECT_THAT(metrics_->Render(), HasSubstr(Sample("vault_cas_objects", "0")));
  ASSERT_TRUE(BatchPut({"one", "two", "three"}).ok());
  ASSERT_TRUE(BatchPut({"four"}).ok());
  const std::string text = metrics_->Render();
  EXPECT_THAT(text, HasSubstr(Sample("vault_cas_objects", "4")));
  EXPECT_THAT(text, HasSubstr(Sample("vault_cas_bytes", "15")));  // 3 + 3 + 5 + 4
  // One cas.put entry per BatchPut call.
  EXPECT_THAT(text, HasSubstr(Sample("vault_audit_log_entries", "2")));
  EXPECT_THAT(text, HasSubstr(Sample(
                        R"(vault_audit_events_total{action="cas.put",decision="allowed"})", "2")));
}

TEST_F(MetricsTest, CountsAuditedEventsAppendedSinceTheSourcesWereSet) {
  Append("agent.spawn", AuditEntry::ALLOWED, 5);  // before: not counted
  metrics_->SetSources({.audit_log = log_.get()});
  Append("agent.spawn", AuditEntry::ALLOWED, 2);
  Append("agent.spawn", AuditEntry::DENIED);
  Append("host.cas_put", AuditEntry::ALLOWED, 3);
  Append("host.read_file", AuditEntry::DENIED, 2);
  Append("host.read_file", AuditEntry::ALLOWED);
  Append("agent.departed", AuditEntry::ALLOWED);
  Append("agent.migrate.in", AuditEntry::ALLOWED);
  Append("agent.migrate.refused", AuditEntry::DENIED, 2);
  std::string text = metrics_->Render();
  EXPECT_THAT(text, HasSubstr(Sample("vault_audit_log_entries", "18")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agent_spawns_total{decision="allowed"})", "2")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agent_spawns_total{decision="denied"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agent_host_calls_total{call="cas_put"})", "3")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agent_host_calls_total{call="read_file"})", "3")));
  EXPECT_THAT(text,
              HasSubstr(Sample(R"(vault_agent_host_call_denials_total{call="cas_put"})", "0")));
  EXPECT_THAT(text,
              HasSubstr(Sample(R"(vault_agent_host_call_denials_total{call="read_file"})", "2")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_migrations_total{outcome="departed"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_migrations_total{outcome="arrived"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_migrations_total{outcome="refused"})", "2")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_migrations_total{outcome="failed"})", "0")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_migrations_total{outcome="bad_receipt"})", "0")));
  EXPECT_THAT(
      text,
      HasSubstr(Sample(
          R"(vault_audit_events_total{action="agent.migrate.refused",decision="denied"})", "2")));

  // A later scrape counts on from where the last one stopped.
  Append("host.cas_put", AuditEntry::DENIED);
  Append("agent.migrate.failed", AuditEntry::ALLOWED);
  text = metrics_->Render();
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agent_host_calls_total{call="cas_put"})", "4")));
  EXPECT_THAT(text,
              HasSubstr(Sample(R"(vault_agent_host_call_denials_total{call="cas_put"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_migrations_total{outcome="failed"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agent_spawns_total{decision="allowed"})", "2")));
}

TEST_F(MetricsTest, ReportsFollowsMirrorsAndAgentsAsTheSourcesSayAtScrapeTime) {
  std::vector<vault::v1::AgentRecord> records;
  for (vault::v1::AgentState st : {vault::v1::RUNNING, vault::v1::RUNNING, vault::v1::COMPLETED}) {
    records.emplace_back().set_state(st);
  }
  vault::v1::MirrorStatus mirror;
  mirror.set_peer("vault-b");
  mirror.set_state(vault::v1::MirrorStatus::UNREACHABLE);
  mirror.set_entries(40);
  mirror.set_checkpoint_size(52);
  mirror.set_last_success_unix_ms(1700000000500);
  metrics_->SetSources(
      {.mirrors = [&] { return std::vector<vault::v1::MirrorStatus>{mirror}; },
       .follows =
           [] {
             return std::vector<replication::FollowStatus>{
                 {.peer = "vault-b", .cursor = 90, .peer_last_seq = 100},
                 {.peer = "vault-c", .cursor = 7, .peer_last_seq = 0}};
           },
       .agents = [&]() -> absl::StatusOr<std::vector<vault::v1::AgentRecord>> { return records; }});
  std::string text = metrics_->Render();
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agents{state="running"})", "2")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agents{state="completed"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agents{state="migrating"})", "0")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_audit_mirror_entries{peer="vault-b"})", "40")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_audit_mirror_lag_entries{peer="vault-b"})", "12")));
  EXPECT_THAT(
      text, HasSubstr(Sample(R"(vault_audit_mirror_last_success_timestamp_seconds{peer="vault-b"})",
                             "1700000000.5")));
  EXPECT_THAT(text, HasSubstr(Sample(
                        R"(vault_audit_mirror_state{peer="vault-b",state="unreachable"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(
                        R"(vault_audit_mirror_state{peer="vault-b",state="following"})", "0")));
  EXPECT_THAT(text,
              HasSubstr(Sample(R"(vault_replication_follow_lag_entries{peer="vault-b"})", "10")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_replication_follow_cursor{peer="vault-b"})", "90")));
  EXPECT_THAT(text,
              HasSubstr(Sample(R"(vault_replication_follow_peer_seq{peer="vault-b"})", "100")));
  // A peer whose feed was not read yet lags by nothing known.
  EXPECT_THAT(text,
              HasSubstr(Sample(R"(vault_replication_follow_lag_entries{peer="vault-c"})", "0")));
  // Read again at the next scrape.
  records[0].set_state(vault::v1::TERMINATED);
  text = metrics_->Render();
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agents{state="running"})", "1")));
  EXPECT_THAT(text, HasSubstr(Sample(R"(vault_agents{state="terminated"})", "1")));
}

TEST_F(MetricsTest, ServesTheMetricsOverHttp) {
  metrics_->SetSources({.cas_totals = [this] { return store_->totals(); }});
  ASSERT_TRUE(BatchPut({"one", "two"}).ok());
  ASSERT_TRUE(metrics_->Serve("127.0.0.1:0").ok());
  const std::string address = metrics_->address();
  ASSERT_THAT(address, ::testing::StartsWith("127.0.0.1:"));
  EXPECT_NE(address, "127.0.0.1:0");
  std::string answer = HttpGet(address, "/metrics");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(answer, HasSubstr(Sample("vault_cas_objects", "2")));
  EXPECT_THAT(
      answer,
      HasSubstr(Sample(
          R"(vault_grpc_server_handled_total{code="OK",listener="admin",method="/vault.v1.Cas/BatchPut"})",
          "1")));
  // Nothing but /metrics.
  EXPECT_THAT(HttpGet(address, "/"), ::testing::StartsWith("HTTP/1.0 404 Not Found\r\n"));
  metrics_->StopServing();
  EXPECT_EQ(metrics_->address(), "");
  EXPECT_EQ(HttpGet(address, "/metrics"), "");  // refused: nothing listens any more
}

TEST_F(MetricsTest, AnAddressInUseIsUnavailableNotAnException) {
  common::UniqueFd taken(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ASSERT_EQ(bind(taken.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(taken.get(), 1), 0);
  socklen_t len = sizeof sa;
  ASSERT_EQ(getsockname(taken.get(), reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(sa.sin_port));
  absl::Status s = metrics_->Serve(address);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(address));
  EXPECT_EQ(metrics_->address(), "");
  EXPECT_EQ(metrics_->Serve("no-port").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vault::node
