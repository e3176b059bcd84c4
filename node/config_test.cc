#include "node/config.h"

#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace vault::node {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kSource[] = "/etc/vault/a.conf";
constexpr char kKeyA[] = "ed25519:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr char kKeyB[] = "ed25519:ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

// A fresh directory, removed at the end of the test.
class TempDir : public common::testing::TempDir {
 public:
  TempDir() : common::testing::TempDir("config_test") {}
};

// The smallest config that passes FinalizeConfig(check_files=false).
vault::v1::VaultConfig MinimalConfig() {
  vault::v1::VaultConfig c;
  c.set_name("vault-a");
  c.set_data_dir("/var/lib/vault/a");
  c.set_key_file("/var/lib/vault/a/vault.key");
  return c;
}

// MinimalConfig plus a listener, TLS files and two members.
vault::v1::VaultConfig FederatedConfig() {
  vault::v1::VaultConfig c = MinimalConfig();
  c.set_listen_address("0.0.0.0:7400");
  c.mutable_tls()->set_cert_file("/var/lib/vault/a/tls.crt");
  c.mutable_tls()->set_key_file("/var/lib/vault/a/tls.key");
  c.mutable_tls()->set_ca_file("/var/lib/vault/a/ca.crt");
  vault::v1::Member* a = c.add_members();
  a->set_name("vault-a");
  a->set_address("a.example:7400");
  a->set_public_key(kKeyA);
  vault::v1::Member* b = c.add_members();
  b->set_name("vault-b");
  b->set_address("b.example:7400");
  b->set_public_key(kKeyB);
  return c;
}

absl::Status Finalize(vault::v1::VaultConfig c) {
  return FinalizeConfig(kSource, &c, /*check_files=*/false);
}

// Expects INVALID_ARGUMENT "<kSource>: field <field>: ..." containing `reason`.
void ExpectFieldError(const absl::Status& s, const std::string& field,
                      const std::string& reason = "") {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), StartsWith(absl::StrCat(kSource, ": field ", field, ": ")));
  EXPECT_THAT(std::string(s.message()), HasSubstr(reason));
}

absl::Status WriteFile(const std::string& path, absl::string_view text) {
  return common::WriteFileAtomic(path, text, 0600);
}

// --- ParseConfigText ---

TEST(ParseConfigText, ParsesEveryField) {
  absl::StatusOr<vault::v1::VaultConfig> c =
      ParseConfigText(R"pb(
                        name: "vault-a"
                        data_dir: "/data"
                        listen_address: "0.0.0.0:7400"
                        members { name: "vault-a" address: "a:1" public_key: "k" }
                        storage { sync_writes: false }
                        cas { chunk_avg_bytes: 131072 }
                        server { worker_threads: 3 }
                        log_level: "debug"
                      )pb",
                      kSource);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name(), "vault-a");
  EXPECT_EQ(c->data_dir(), "/data");
  EXPECT_EQ(c->listen_address(), "0.0.0.0:7400");
  ASSERT_EQ(c->members_size(), 1);
  EXPECT_EQ(c->members(0).address(), "a:1");
  EXPECT_TRUE(c->storage().has_sync_writes());
  EXPECT_FALSE(c->storage().sync_writes());
  EXPECT_EQ(c->cas().chunk_avg_bytes(), 131072u);
  EXPECT_EQ(c->server().worker_threads(), 3u);
  EXPECT_EQ(c->log_level(), "debug");
}

TEST(ParseConfigText, UnknownFieldNamesSourceLineAndColumn) {
  absl::StatusOr<vault::v1::VaultConfig> c =
      ParseConfigText("name: \"vault-a\"\nnam: \"x\"\n", kSource);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "parse error: /etc/vault/a.conf:2:4: Message type \"vault.v1.VaultConfig\" has no "
            "field named \"nam\".");
}

TEST(ParseConfigText, UnknownNestedFieldNamesSourceLineAndColumn) {
  absl::StatusOr<vault::v1::VaultConfig> c =
      ParseConfigText("name: \"vault-a\"\ncas {\n  chunk_avg: 65536\n}\n", "b.conf");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            "parse error: b.conf:3:12: Message type \"vault.v1.CasConfig\" has no field named "
            "\"chunk_avg\".");
}

TEST(ParseConfigText, BadSyntaxNamesSourceLineAndColumn) {
  // A string where a number belongs.
  absl::StatusOr<vault::v1::VaultConfig> c =
      ParseConfigText("name: \"vault-a\"\n\ncas { chunk_avg_bytes: \"big\" }\n", kSource);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              StartsWith("parse error: /etc/vault/a.conf:3:24: "));

  // A missing closing brace is reported at the end of the input.
  c = ParseConfigText("name: \"vault-a\"\nserver {\n  worker_threads: 2\n", kSource);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              StartsWith("parse error: /etc/vault/a.conf:4:1: "));

  // An unterminated string.
  c = ParseConfigText("data_dir: \"/var\n", kSource);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              StartsWith("parse error: /etc/vault/a.conf:1:16: "));
}

TEST(ParseConfigText, EmptyTextIsAnEmptyConfig) {
  absl::StatusOr<vault::v1::VaultConfig> c = ParseConfigText("", kSource);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*c, vault::v1::VaultConfig()));
}

// --- FinalizeConfig: defaults ---

TEST(FinalizeConfig, FillsEveryDefault) {
  vault::v1::VaultConfig c = MinimalConfig();
  ASSERT_TRUE(FinalizeConfig(kSource, &c, /*check_files=*/false).ok());
  EXPECT_EQ(c.admin_socket(), "/var/lib/vault/a/vault.sock");
  EXPECT_EQ(c.log_level(), "info");
  EXPECT_EQ(c.log_format(), "text");
  EXPECT_TRUE(c.storage().has_sync_writes());
  EXPECT_TRUE(c.storage().sync_writes());
  EXPECT_TRUE(c.storage().direct_chunk_writes());
  EXPECT_EQ(c.storage().block_cache_mb(), 256u);
  EXPECT_EQ(c.cas().max_object_bytes(), uint64_t{64} << 30);
  EXPECT_EQ(c.cas().chunking_threshold_bytes(), uint64_t{4} << 20);
  EXPECT_EQ(c.cas().chunk_avg_bytes(), 512u << 10);
  EXPECT_EQ(c.cas().max_batch_bytes(), uint64_t{4} << 20);
  EXPECT_EQ(c.cas().max_find_missing(), 100000u);
  EXPECT_EQ(c.cas().upload_ttl_hours(), 24u);
  EXPECT_EQ(c.cas().max_batch_items(), 10000u);
  EXPECT_EQ(c.server().memory_quota_mb(), 1024u);
  EXPECT_EQ(c.server().max_concurrent_streams(), 128u);
  EXPECT_EQ(c.cas().max_upload_buffer_bytes(), uint64_t{256} << 20);
  EXPECT_EQ(c.server().worker_threads(), std::max(4u, 2 * std::thread::hardware_concurrency()));
  EXPECT_EQ(c.server().drain_timeout_ms(), 10000u);
  EXPECT_EQ(c.server().max_message_bytes(), 8u << 20);
  EXPECT_EQ(c.audit().checkpoint_every_entries(), 1000u);
  EXPECT_EQ(c.audit().checkpoint_interval_ms(), 1000u);
  EXPECT_EQ(c.audit().mirror_interval_ms(), 2000u);
  EXPECT_EQ(c.audit().mirror_rpc_timeout_ms(), 10000u);
  EXPECT_TRUE(c.sandbox().require_landlock());
  EXPECT_TRUE(c.sandbox().require_cgroups());
  EXPECT_EQ(c.sandbox().host_id_base(), 200000u);
  EXPECT_EQ(c.sandbox().host_id_count(), 65536u);
  EXPECT_EQ(c.sandbox().cgroup_folder(), "vault-sandbox");
  // Fields without a default stay empty.
  EXPECT_EQ(c.listen_address(), "");
  EXPECT_EQ(c.metrics_listen(), "");
  EXPECT_EQ(c.members_size(), 0);
}

TEST(FinalizeConfig, KeepsExplicitValues) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.set_admin_socket("/run/vault-a.sock");
  c.set_log_level("warn");
  c.set_log_format("json");
  c.set_metrics_listen("127.0.0.1:9701");
  c.mutable_storage()->set_sync_writes(false);
  c.mutable_storage()->set_block_cache_mb(16);
  c.mutable_storage()->set_direct_chunk_writes(false);
  c.mutable_cas()->set_max_object_bytes(1 << 30);
  c.mutable_cas()->set_chunking_threshold_bytes(1 << 20);
  c.mutable_cas()->set_chunk_avg_bytes(64 << 10);
  c.mutable_cas()->set_max_batch_bytes(1 << 20);
  c.mutable_cas()->set_max_find_missing(10);
  c.mutable_cas()->set_upload_ttl_hours(1);
  c.mutable_cas()->set_max_batch_items(5);
  c.mutable_cas()->set_max_upload_buffer_bytes(2 << 20);
  c.mutable_cas()->mutable_gc()->set_keep_unheld_seconds(5);
  c.mutable_cas()->mutable_gc()->set_keep_ended_agents_seconds(0);
  c.mutable_cas()->mutable_gc()->set_interval_seconds(60);
  c.mutable_cas()->mutable_gc()->set_compact_below_live_percent(30);
  c.mutable_server()->set_worker_threads(2);
  c.mutable_server()->set_drain_timeout_ms(500);
  c.mutable_server()->set_max_message_bytes(2 << 20);
  c.mutable_server()->set_memory_quota_mb(64);
  c.mutable_server()->set_max_concurrent_streams(4);
  c.mutable_audit()->set_checkpoint_every_entries(7);
  c.mutable_audit()->set_checkpoint_interval_ms(20);
  c.mutable_audit()->set_mirror_interval_ms(30);
  c.mutable_audit()->set_mirror_rpc_timeout_ms(400);
  c.mutable_sandbox()->set_require_landlock(false);
  c.mutable_sandbox()->set_require_cgroups(false);
  c.mutable_sandbox()->set_host_id_base(300000);
  c.mutable_sandbox()->set_host_id_count(10);
  c.mutable_sandbox()->set_cgroup_folder("vaults");
  auto* agents = c.mutable_agents();
  agents->set_files_dir("/srv/vault-files");
  agents->set_python_sdk_dir("/opt/vault/python");
  agents->set_max_frame_bytes(65536);
  agents->set_read_timeout_ms(100);
  agents->set_call_deadline_ms(200);
  agents->set_flag_after_denials(2);
  agents->set_terminate_after_denials(3);
  agents->set_mailbox_capacity(4);
  agents->set_default_memory_bytes(5 << 20);
  agents->set_default_cpu_ms(6);
  agents->set_default_runtime_ms(7);
  agents->set_default_storage_bytes(8 << 20);
  agents->set_default_max_agents(9);
  agents->set_default_max_storage_bytes(10);
  agents->set_default_max_calls_per_second(11);
  agents->set_stop_checkpoint_ms(12);
  agents->set_worker_threads(13);
  auto* containers = c.mutable_containers();
  containers->set_rootfs_dir("/srv/vault-rootfs");
  containers->set_max_image_bytes(14 << 20);
  containers->set_max_image_entries(15);
  containers->set_max_import_bytes(16 << 20);
  containers->set_max_import_seconds(17);
  containers->set_runtime("/opt/runc");
  containers->set_state_dir("/srv/vault-containers");
  const vault::v1::VaultConfig before = c;
  ASSERT_TRUE(FinalizeConfig(kSource, &c, /*check_files=*/false).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(c, before))
      << c.DebugString() << "\nvs\n"
      << before.DebugString();
}

TEST(FinalizeConfig, FillsTheContainerDefaults) {
  vault::v1::VaultConfig c = MinimalConfig();
  ASSERT_TRUE(FinalizeConfig(kSource, &c, /*check_files=*/false).ok());
  EXPECT_EQ(c.containers().rootfs_dir(), c.data_dir() + "/rootfs");
  EXPECT_EQ(c.containers().max_image_bytes(), uint64_t{8} << 30);
  EXPECT_EQ(c.containers().max_image_entries(), 500000u);
  EXPECT_EQ(c.containers().max_import_bytes(), uint64_t{16} << 30);
  EXPECT_EQ(c.containers().max_import_seconds(), 3600u);
  EXPECT_EQ(c.containers().runtime(), "runc");
  EXPECT_EQ(c.containers().state_dir(), c.data_dir() + "/containers");
}

TEST(FinalizeConfig, RefusesBadAgentSettings) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.mutable_agents()->add_admins("ed25519:not-hex");
  absl::Status s = FinalizeConfig(kSource, &c, /*check_files=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("agents.admins[0]"));
  c = MinimalConfig();
  c.mutable_agents()->set_flag_after_denials(50);
  c.mutable_agents()->set_terminate_after_denials(5);
  s = FinalizeConfig(kSource, &c, /*check_files=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("agents.terminate_after_denials"));
  c = MinimalConfig();
  c.mutable_agents()->set_max_frame_bytes(100);
  s = FinalizeConfig(kSource, &c, /*check_files=*/false);
  EXPECT_THAT(s.message(), HasSubstr("agents.max_frame_bytes"));
}

TEST(FinalizeConfig, AcceptsAFederatedConfig) {
  vault::v1::VaultConfig c = FederatedConfig();
  EXPECT_TRUE(FinalizeConfig(kSource, &c, /*check_files=*/false).ok());
  c.set_listen_address("[::1]:7400");
  EXPECT_TRUE(FinalizeConfig(kSource, &c, /*check_files=*/false).ok());
}

// --- FinalizeConfig: validation ---

TEST(FinalizeConfig, RefusesBadSandboxSettings) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.mutable_sandbox()->set_host_id_base(500);
  ExpectFieldError(Finalize(c), "sandbox.host_id_base", "must be at least 1000");
  c = MinimalConfig();
  c.mutable_sandbox()->set_host_id_base(4294900000u);
  c.mutable_sandbox()->set_host_id_count(100000);
  ExpectFieldError(Finalize(c), "sandbox.host_id_count", "must end below 4294967294");
  c = MinimalConfig();
  c.mutable_sandbox()->set_cgroup_folder("../escape");
  ExpectFieldError(Finalize(c), "sandbox.cgroup_folder", "must match");
}

TEST(FinalizeConfig, ScrubIsOffByDefaultAndGetsItsInterval) {
  vault::v1::VaultConfig c = FederatedConfig();
  ASSERT_EQ(FinalizeConfig(kSource, &c, /*check_files=*/false), absl::OkStatus());
  EXPECT_EQ(c.scrub().bytes_per_second(), 0u);
  EXPECT_EQ(c.scrub().interval_ms(), 0u);
  c.mutable_scrub()->set_bytes_per_second(1 << 20);
  c.mutable_scrub()->add_repair_from("vault-b");
  ASSERT_EQ(FinalizeConfig(kSource, &c, /*check_files=*/false), absl::OkStatus());
  EXPECT_EQ(c.scrub().interval_ms(), 86400000u);
}

TEST(FinalizeConfig, RefusesBadScrubSettings) {
  vault::v1::VaultConfig c = FederatedConfig();
  c.mutable_scrub()->set_interval_ms(1000);
  ExpectFieldError(Finalize(c), "scrub.bytes_per_second", "the scrub is off");
  c = FederatedConfig();
  c.mutable_scrub()->set_bytes_per_second(1000);
  ExpectFieldError(Finalize(c), "scrub.bytes_per_second", "below the least rate of 65536");
  c = FederatedConfig();
  c.mutable_scrub()->set_bytes_per_second(1 << 20);
  c.mutable_scrub()->set_interval_ms(10);
  ExpectFieldError(Finalize(c), "scrub.interval_ms", "at least 100");
  c = FederatedConfig();
  c.mutable_scrub()->set_bytes_per_second(1 << 20);
  c.mutable_scrub()->add_repair_from("vault-z");
  ExpectFieldError(Finalize(c), "scrub.repair_from[0]", "\"vault-z\" is not among the members");
  c.mutable_scrub()->set_repair_from(0, "vault-a");
  ExpectFieldError(Finalize(c), "scrub.repair_from[0]", "cannot repair from itself");
  c.mutable_scrub()->set_repair_from(0, "vault-b");
  c.mutable_scrub()->add_repair_from("vault-b");
  ExpectFieldError(Finalize(c), "scrub.repair_from[1]", "listed twice");
}

TEST(FinalizeConfig, RefusesMissingName) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.clear_name();
  ExpectFieldError(Finalize(c), "name", "is required");
}

TEST(FinalizeConfig, RefusesBadNames) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.set_name("Vault_A");
  ExpectFieldError(Finalize(c), "name", "may contain only lowercase letters, digits and '-'");
  c.set_name("vault.a");
  ExpectFieldError(Finalize(c), "name", "may contain only lowercase letters, digits and '-'");
  c.set_name(std::string(64, 'a'));
  ExpectFieldError(Finalize(c), "name", "must be 1 to 63 characters");
  c.set_name("-vault");
  ExpectFieldError(Finalize(c), "name", "must not start or end with '-'");
  c.set_name("vault-");
  ExpectFieldError(Finalize(c), "name", "must not start or end with '-'");

  c.set_name(std::string(63, 'a'));
  EXPECT_TRUE(Finalize(c).ok());
  c.set_name("0");
  EXPECT_TRUE(Finalize(c).ok());
}

TEST(FinalizeConfig, RefusesMissingDataDirAndKeyFile) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.clear_data_dir();
  ExpectFieldError(Finalize(c), "data_dir", "is required");
  c = MinimalConfig();
  c.clear_key_file();
  ExpectFieldError(Finalize(c), "key_file", "is required");
}

TEST(FinalizeConfig, RefusesBadListenAddress) {
  vault::v1::VaultConfig c = FederatedConfig();
  for (const char* bad : {"localhost", ":7400"}) {
    c.set_listen_address(bad);
    ExpectFieldError(Finalize(c), "listen_address", absl::StrCat("\"", bad, "\" is not host:port"));
  }
  for (const char* bad : {"localhost:65536", "localhost:", "localhost:http", "localhost:-1",
                          "localhost:99999999999"}) {
    c.set_listen_address(bad);
    ExpectFieldError(Finalize(c), "listen_address",
                     absl::StrCat("\"", bad, "\" has no port in 0..65535"));
  }
  c.set_listen_address("localhost:65535");
  EXPECT_TRUE(Finalize(c).ok());
  c.set_listen_address("localhost:1");
  EXPECT_TRUE(Finalize(c).ok());
}

// Regression: vaultd --listen documents "port 0 picks one" (and VaultNode reports the port it
// got), but FinalizeConfig refused port 0 for listen_address.
TEST(FinalizeConfig, ListenPortZeroIsAccepted) {
  vault::v1::VaultConfig c = FederatedConfig();
  c.set_listen_address("127.0.0.1:0");
  absl::Status s = Finalize(c);
  EXPECT_TRUE(s.ok()) << s;
  // A member's address is where peers dial: port 0 is meaningless there.
  c.mutable_members(1)->set_address("b.example:0");
  ExpectFieldError(Finalize(c), "members[1].address", "\"b.example:0\" has no port in 1..65535");
}

TEST(FinalizeConfig, RefusesListenAddressWithoutTlsFiles) {
  for (int missing = 0; missing < 3; ++missing) {
    vault::v1::VaultConfig c = FederatedConfig();
    if (missing == 0) c.mutable_tls()->clear_cert_file();
    if (missing == 1) c.mutable_tls()->clear_key_file();
    if (missing == 2) c.mutable_tls()->clear_ca_file();
    ExpectFieldError(Finalize(c), "tls",
                     "cert_file, key_file and ca_file are required with listen_address");
  }
  // Without a listener no TLS file is needed.
  vault::v1::VaultConfig c = FederatedConfig();
  c.clear_listen_address();
  c.clear_tls();
  EXPECT_TRUE(Finalize(c).ok());
}

TEST(FinalizeConfig, RefusesDuplicateMember) {
  vault::v1::VaultConfig c = FederatedConfig();
  *c.add_members() = c.members(1);
  ExpectFieldError(Finalize(c), "members[2].name", "member \"vault-b\" is listed twice");
}

TEST(FinalizeConfig, RefusesBadMemberNameAndAddress) {
  vault::v1::VaultConfig c = FederatedConfig();
  c.mutable_members(1)->set_name("Vault-B");
  ExpectFieldError(Finalize(c), "members[1].name", "may contain only lowercase letters");
  c = FederatedConfig();
  c.mutable_members(1)->set_address("b.example");
  ExpectFieldError(Finalize(c), "members[1].address", "\"b.example\" is not host:port");
  c.mutable_members(1)->set_address("b.example:65536");
  ExpectFieldError(Finalize(c), "members[1].address", "has no port in 1..65535");
}

TEST(FinalizeConfig, RefusesBadMemberPublicKey) {
  const std::string hex64(64, 'a');
  for (const std::string& bad : {
           std::string(""),
           absl::StrCat("ed25519:", std::string(63, 'a')),
           absl::StrCat("ed25519:", std::string(65, 'a')),
           absl::StrCat("ed25519:", std::string(64, 'A')),
           absl::StrCat("ed25519:", std::string(63, 'a'), "g"),
           absl::StrCat("ED25519:", hex64),
           absl::StrCat("ecdsa:00", hex64),
           hex64,
       }) {
    vault::v1::VaultConfig c = FederatedConfig();
    c.mutable_members(1)->set_public_key(bad);
    ExpectFieldError(Finalize(c), "members[1].public_key",
                     absl::StrCat("\"", bad, "\" is not ed25519:<64 lowercase hex>"));
  }
}

TEST(FinalizeConfig, RefusesMembersWithoutThisVault) {
  vault::v1::VaultConfig c = FederatedConfig();
  c.mutable_members()->DeleteSubrange(0, 1);  // only vault-b is left
  ExpectFieldError(Finalize(c), "members", "this vault (\"vault-a\") is not among the members");
}

TEST(FinalizeConfig, RefusesChunkAverageThatIsNotAPowerOfTwoInRange) {
  for (uint32_t bad : {100000u, 65537u, 32768u, 8u << 20, 3u << 20}) {
    vault::v1::VaultConfig c = MinimalConfig();
    c.mutable_cas()->set_chunk_avg_bytes(bad);
    c.mutable_cas()->set_chunking_threshold_bytes(uint64_t{64} << 20);
    ExpectFieldError(Finalize(c), "cas.chunk_avg_bytes",
                     "must be a power of two between 65536 and 4194304");
  }
  for (uint32_t good : {64u << 10, 4u << 20}) {
    vault::v1::VaultConfig c = MinimalConfig();
    c.mutable_cas()->set_chunk_avg_bytes(good);
    c.mutable_cas()->set_chunking_threshold_bytes(uint64_t{16} << 20);
    EXPECT_TRUE(Finalize(c).ok()) << good;
  }
}

TEST(FinalizeConfig, RefusesChunkingThresholdBelowFourAverages) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.mutable_cas()->set_chunk_avg_bytes(512 << 10);
  c.mutable_cas()->set_chunking_threshold_bytes((2 << 20) - 1);
  ExpectFieldError(Finalize(c), "cas.chunking_threshold_bytes",
                   "must be at least 4 x cas.chunk_avg_bytes (2097152)");
  c.mutable_cas()->set_chunking_threshold_bytes(2 << 20);
  EXPECT_TRUE(Finalize(c).ok());
}

TEST(FinalizeConfig, RefusesBatchTooCloseToMessageLimit) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.mutable_server()->set_max_message_bytes(8 << 20);
  c.mutable_cas()->set_max_batch_bytes((8 << 20) - (64 << 10) + 1);
  ExpectFieldError(Finalize(c), "cas.max_batch_bytes",
                   "must be at least 64 KiB below server.max_message_bytes");
  c.mutable_cas()->set_max_batch_bytes((8 << 20) - (64 << 10));
  EXPECT_TRUE(Finalize(c).ok());

  // The default batch limit (4 MiB) does not fit a 4 MiB message.
  c = MinimalConfig();
  c.mutable_server()->set_max_message_bytes(4 << 20);
  ExpectFieldError(Finalize(c), "cas.max_batch_bytes", "64 KiB below");
}

TEST(FinalizeConfig, RefusesMessageLimitOutOfRange) {
  vault::v1::VaultConfig c = MinimalConfig();
  c.mutable_server()->set_max_message_bytes(65u << 20);
  ExpectFieldError(Finalize(c), "server.max_message_bytes", "must be between 2 MiB and 64 MiB");
  c.mutable_server()->set_max_message_bytes((2 << 20) - 1);
  c.mutable_cas()->set_max_batch_bytes(4096);
  ExpectFieldError(Finalize(c), "server.max_message_bytes", "must be between 2 MiB and 64 MiB");
}

TEST(FinalizeConfig, RefusesAdminSocketPathTooLong) {
  const size_t limit = sizeof(sockaddr_un::sun_path);  // 108 on Linux
  vault::v1::VaultConfig c = MinimalConfig();
  c.set_admin_socket("/" + std::string(limit - 1, 's'));  // `limit` bytes: no room for the NUL
  ExpectFieldError(
      Finalize(c), "admin_socket",
      absl::StrCat("path is ", limit, " bytes; Unix socket paths must be shorter than ", limit));
  c.set_admin_socket("/" + std::string(limit - 2, 's'));
  EXPECT_TRUE(Finalize(c).ok());

  // The default, derived from a long data_dir, is checked too.
  c = MinimalConfig();
  c.set_data_dir("/" + std::string(100, 'd'));
  ExpectFieldError(Finalize(c), "admin_socket", "Unix socket paths must be shorter than");
}

TEST(FinalizeConfig, RefusesBadLogLevel) {
  vault::v1::VaultConfig c = MinimalConfig();
  for (const char* bad : {"verbose", "INFO", "warning"}) {
    c.set_log_level(bad);
    ExpectFieldError(
        Finalize(c), "log_level",
        absl::StrCat("\"", bad, "\" is not one of trace, debug, info, warn, error, off"));
  }
  for (const char* good : {"trace", "debug", "info", "warn", "error", "off"}) {
    c.set_log_level(good);
    EXPECT_TRUE(Finalize(c).ok()) << good;
  }
}

TEST(FinalizeConfig, RefusesBadLogFormat) {
  vault::v1::VaultConfig c = MinimalConfig();
  for (const char* bad : {"JSON", "logfmt", " text"}) {
    c.set_log_format(bad);
    ExpectFieldError(Finalize(c), "log_format",
                     absl::StrCat("\"", bad, "\" is not one of text, json"));
  }
  for (const char* good : {"text", "json"}) {
    c.set_log_format(good);
    EXPECT_TRUE(Finalize(c).ok()) << good;
  }
}

TEST(FinalizeConfig, MetricsListenNeedsANumericHostAndAPort) {
  vault::v1::VaultConfig c = MinimalConfig();
  for (const char* bad : {"9701", ":9701", "127.0.0.1", "127.0.0.1:65536", "127.0.0.1:x"}) {
    c.set_metrics_listen(bad);
    ExpectFieldError(Finalize(c), "metrics_listen", absl::StrCat("\"", bad, "\""));
  }
  for (const char* name : {"localhost:9701", "metrics.example:9701", "[localhost]:9701",
                           "127.0.0.256:9701", "[::1:9701"}) {
    c.set_metrics_listen(name);
    ExpectFieldError(Finalize(c), "metrics_listen", "does not start with a numeric address");
  }
  for (const char* good : {"127.0.0.1:9701", "0.0.0.0:9701", "[::1]:9701", "127.0.0.1:0"}) {
    c.set_metrics_listen(good);
    EXPECT_TRUE(Finalize(c).ok()) << good;
  }
}

TEST(FinalizeConfig, CheckFilesReportsMissingKeyFileWithItsPath) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  vault::v1::VaultConfig c = MinimalConfig();
  c.set_data_dir(dir.path() + "/data");
  c.set_key_file(dir.path() + "/vault.key");
  absl::Status s = FinalizeConfig(kSource, &c, /*check_files=*/true);
  ExpectFieldError(s, "key_file",
                   absl::StrCat(dir.path(), "/vault.key: No such file or directory"));

  ASSERT_TRUE(WriteFile(dir.path() + "/vault.key", "key").ok());
  EXPECT_TRUE(FinalizeConfig(kSource, &c, /*check_files=*/true).ok());
}

TEST(FinalizeConfig, CheckFilesReportsMissingTlsFilesWithTheirPaths) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  vault::v1::VaultConfig c = FederatedConfig();
  c.set_data_dir(dir.path() + "/data");
  c.set_key_file(dir.path() + "/vault.key");
  c.mutable_tls()->set_cert_file(dir.path() + "/tls.crt");
  c.mutable_tls()->set_key_file(dir.path() + "/tls.key");
  c.mutable_tls()->set_ca_file(dir.path() + "/ca.crt");
  ASSERT_TRUE(WriteFile(dir.path() + "/vault.key", "key").ok());
  ExpectFieldError(FinalizeConfig(kSource, &c, true), "tls.cert_file",
                   absl::StrCat(dir.path(), "/tls.crt: No such file or directory"));
  ASSERT_TRUE(WriteFile(dir.path() + "/tls.crt", "cert").ok());
  ExpectFieldError(FinalizeConfig(kSource, &c, true), "tls.key_file",
                   absl::StrCat(dir.path(), "/tls.key: No such file or directory"));
  ASSERT_TRUE(WriteFile(dir.path() + "/tls.key", "key").ok());
  ExpectFieldError(FinalizeConfig(kSource, &c, true), "tls.ca_file",
                   absl::StrCat(dir.path(), "/ca.crt: No such file or directory"));
  ASSERT_TRUE(WriteFile(dir.path() + "/ca.crt", "ca").ok());
  EXPECT_TRUE(FinalizeConfig(kSource, &c, true).ok());
}

// --- LoadConfigFile ---

TEST(LoadConfigFile, ResolvesRelativePathsAgainstTheFilesDirectory) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string conf_dir = dir.path() + "/etc";
  ASSERT_TRUE(common::MakeDirs(conf_dir, 0700).ok());
  const std::string path = conf_dir + "/vault.conf";
  ASSERT_TRUE(WriteFile(path, R"pb(
                name: "vault-a"
                data_dir: "data"
                key_file: "keys/vault.key"
                listen_address: "127.0.0.1:7400"
                tls { cert_file: "tls.crt" key_file: "../tls.key" ca_file: "/abs/ca.crt" }
              )pb")
                  .ok());
  absl::StatusOr<vault::v1::VaultConfig> c = LoadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->data_dir(), conf_dir + "/data");
  EXPECT_EQ(c->key_file(), conf_dir + "/keys/vault.key");
  EXPECT_EQ(c->tls().cert_file(), conf_dir + "/tls.crt");
  EXPECT_EQ(c->tls().key_file(), conf_dir + "/../tls.key");
  EXPECT_EQ(c->tls().ca_file(), "/abs/ca.crt");
  EXPECT_EQ(c->admin_socket(), "");  // empty stays empty: the default comes from data_dir
  EXPECT_EQ(c->listen_address(), "127.0.0.1:7400");  // not a path

  ASSERT_TRUE(FinalizeConfig(path, &*c, /*check_files=*/false).ok());
  EXPECT_EQ(c->admin_socket(), conf_dir + "/data/vault.sock");

  // An explicit relative admin socket is resolved too.
  ASSERT_TRUE(WriteFile(path, "name: \"vault-a\"\nadmin_socket: \"run/a.sock\"\n").ok());
  c = LoadConfigFile(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->admin_socket(), conf_dir + "/run/a.sock");
}

TEST(LoadConfigFile, ParseErrorsNameTheFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/vault.conf";
  ASSERT_TRUE(WriteFile(path, "name: \"vault-a\"\n  bogus: 1\n").ok());
  absl::StatusOr<vault::v1::VaultConfig> c = LoadConfigFile(path);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(c.status().message()),
              StartsWith(absl::StrCat("parse error: ", path, ":2:8: ")));
}

TEST(LoadConfigFile, MissingFileIsNotFound) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string path = dir.path() + "/nope.conf";
  absl::StatusOr<vault::v1::VaultConfig> c = LoadConfigFile(path);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(c.status().message()), HasSubstr(path));
}

// --- ConfigToText ---

TEST(ConfigToText, RoundTripsThroughParseConfigText) {
  vault::v1::VaultConfig c = FederatedConfig();
  c.set_admin_socket("/run/vault \"a\".sock");  // needs escaping
  c.mutable_storage()->set_sync_writes(false);  // explicit false must survive
  ASSERT_TRUE(FinalizeConfig(kSource, &c, /*check_files=*/false).ok());
  const std::string text = ConfigToText(c);
  absl::StatusOr<vault::v1::VaultConfig> back = ParseConfigText(text, "printed");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << text;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*back, c)) << text;
  EXPECT_TRUE(back->storage().has_sync_writes());
  EXPECT_FALSE(back->storage().sync_writes());

  // An empty config prints as nothing and parses back empty.
  EXPECT_EQ(ConfigToText(vault::v1::VaultConfig()), "");
}

}  // namespace
}  // namespace vault::node
