// integration-tests: the three-vault federation of migration_fixture.h with member links
// through proxies the test controls (tcp_proxy.h), and the chaos that the fault suites wreak on
// it: vaultds SIGKILLed and restarted, links cut and healed (migration_faults_test.cc,
// messaging_test.cc).
#ifndef VAULT_INTEGRATION_TESTS_PROXIED_FIXTURE_H_
#define VAULT_INTEGRATION_TESTS_PROXIED_FIXTURE_H_

#include <google/protobuf/text_format.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "integration-tests/migration_fixture.h"
#include "integration-tests/tcp_proxy.h"
#include "vault/v1/config.pb.h"

namespace vault::integration {

// The three members, by name.
inline const std::vector<std::string> kVaults = {"a", "b", "c"};

// The federation with some member links through proxies (tcp_proxy.h): links_ names (from, to)
// pairs whose traffic goes through proxies_[{from, to}] (in from's vault.conf, to's address is
// the proxy's; TLS still names `to`). Subclasses fill links_ in their constructor.
class ProxiedFederationTest : public MigrationTest {
 protected:
  void BeforeVaultdsStart() override {
    for (const auto& [from, to] : links_) {
      absl::StatusOr<std::unique_ptr<TcpProxy>> proxy = TcpProxy::Start(V(to).address);
      ASSERT_TRUE(proxy.ok()) << proxy.status();
      ASSERT_NO_FATAL_FAILURE(SetMemberAddress(from, to, (*proxy)->address()));
      proxies_[{from, to}] = std::move(*proxy);
    }
  }

  // Rewrites members[to].address in from's vault.conf.
  void SetMemberAddress(const std::string& from, const std::string& to,
                        const std::string& address) {
    absl::StatusOr<std::string> text = ReadFile(V(from).config);
    ASSERT_TRUE(text.ok()) << text.status();
    vault::v1::VaultConfig config;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(*text, &config));
    int changed = 0;
    for (vault::v1::Member& m : *config.mutable_members()) {
      if (m.name() != to) continue;
      ASSERT_EQ(m.address(), V(to).address);
      m.set_address(address);
      ++changed;
    }
    ASSERT_EQ(changed, 1) << *text;
    std::string out;
    ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(config, &out));
    ASSERT_TRUE(WriteFile(V(from).config, out).ok());
  }

  TcpProxy& Link(const std::string& from, const std::string& to) {
    return *proxies_.at({from, to});
  }

  // `vaultctl audit verify --all` on every running vault: its own log and its mirrors.
  void ExpectAuditsVerify() {
    for (const std::string& v : kVaults) {
      if (!M(v).vaultd->Running()) continue;
      RunResult r = Ctl(v, {"audit", "verify", "--all"});
      EXPECT_EQ(r.exit_code, kExitOk) << "vault " << v << ": " << r;
      EXPECT_THAT(r.out, ::testing::Not(HasSubstr("FAILED"))) << "vault " << v;
    }
  }

  // Chaos (the chaos tests): until `end`, every 0.3-1.5 s, one of: SIGKILL a vaultd (while
  // fewer than `max_down` are down), restart one that is down, cut a link, heal one. Then every
  // link is healed and every vaultd started again.
  struct Havoc {
    int kills = 0, restarts = 0, cuts = 0, heals = 0;
  };
  void Wreak(std::mt19937_64& rng, absl::Time end, int max_down, Havoc* h) {
    while (absl::Now() < end) {
      absl::SleepFor(absl::Milliseconds(300 + static_cast<int64_t>(rng() % 1200)));
      std::vector<std::string> up, down;
      for (const std::string& v : kVaults) (M(v).vaultd->Running() ? up : down).push_back(v);
      const int dice = static_cast<int>(rng() % 100);
      if (dice < 30 && static_cast<int>(down.size()) < max_down) {
        M(up[rng() % up.size()]).vaultd->Kill();  // our own child, by its pid
        ++h->kills;
      } else if (dice < 60 && !down.empty()) {
        ASSERT_NO_FATAL_FAILURE(Restart(down[rng() % down.size()]));
        ++h->restarts;
      } else {
        auto it = std::next(proxies_.begin(), static_cast<long>(rng() % proxies_.size()));
        if (dice < 80 && !it->second->cut()) {
          it->second->Cut();
          ++h->cuts;
        } else if (it->second->cut()) {
          it->second->Heal();
          ++h->heals;
        }
      }
    }
  }
  void HealAll() {
    for (auto& [link, proxy] : proxies_) proxy->Heal();
    for (const std::string& v : kVaults) {
      if (!M(v).vaultd->Running()) {
        ASSERT_NO_FATAL_FAILURE(Restart(v));
      }
    }
  }

  std::set<std::pair<std::string, std::string>> links_;
  std::map<std::pair<std::string, std::string>, std::unique_ptr<TcpProxy>> proxies_;
};

}  // namespace vault::integration

#endif  // VAULT_INTEGRATION_TESTS_PROXIED_FIXTURE_H_
