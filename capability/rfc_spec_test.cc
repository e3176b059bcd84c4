// The RFC's agent specs, copied character for character into sdk/scheme/examples/rfc/, parse
// with the meaning the RFC gives them (docs/spec.md), and the new forms refuse what they must.
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "capability/text_form.h"
#include "gtest/gtest.h"

namespace vault::capability {
namespace {

using vault::v1::AgentSpec;
using vault::v1::Grant;

std::string Example(const std::string& name) {
  std::ifstream in(absl::StrCat(VAULT_RFC_EXAMPLES_DIR, "/", name));
  EXPECT_TRUE(in.good()) << name;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> GrantStrings(const AgentSpec& spec) {
  std::vector<std::string> out;
  for (const Grant& g : spec.grants()) out.push_back(GrantToString(g));
  return out;
}

constexpr char kInputHash[] =
    "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

ParsedSpec Parse(const std::string& name, SpecOptions options = {}) {
  absl::StatusOr<ParsedSpec> parsed = ParseAgentSpecWithOptions(Example(name), name, options);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : ParsedSpec{};
}

TEST(RfcSpecTest, DaemonModel) {
  SpecOptions options;
  options.bindings["user-principal"] = "ed25519:abcd";
  ParsedSpec p = Parse("daemon.scm", options);
  const AgentSpec& spec = p.spec;
  EXPECT_EQ(spec.id(), "agent-2026-001");
  EXPECT_EQ(spec.spawned_by(), "ed25519:abcd");  // the symbol, as bound
  EXPECT_EQ(spec.purpose(), "Monitor RSS feeds and archive new papers");
  EXPECT_EQ(GrantStrings(spec),
            (std::vector<std::string>{"read https://arxiv.org:443/rss/*", "write /vault/papers",
                                      "network arxiv.org:*", "network doi.org:*"}));
  EXPECT_EQ(spec.constraints().max_runtime_ms(), 24u * 3600 * 1000);
  EXPECT_EQ(spec.constraints().max_memory_bytes(), 512u * 1024 * 1024);
  EXPECT_EQ(spec.constraints().max_storage_bytes(), 1ull * 1024 * 1024 * 1024);
  EXPECT_EQ(spec.sandbox(), "posix-sandbox");
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_EQ(p.warnings[0],
            "daemon.scm:14:3: (status running) ignored: an agent's status is the vault's to set");
}

TEST(RfcSpecTest, DaemonModelUnboundPrincipalKeepsTheSymbol) {
  ParsedSpec p = Parse("daemon.scm");
  EXPECT_EQ(p.spec.spawned_by(), "user-principal");  // vaultctl refuses it, naming --bind
}

TEST(RfcSpecTest, PeriodicTask) {
  ParsedSpec p = Parse("pattern1-periodic.scm");
  EXPECT_EQ(p.spec.code_source(),
            "(lambda ()\n"
            "           (let loop ()\n"
            "             (perform-task)\n"
            "             (sleep 3600)  ; hourly\n"
            "             (loop)))");
  EXPECT_EQ(GrantStrings(p.spec),
            (std::vector<std::string>{"read /vault/feeds", "write /vault/archive",
                                      "network rss.example.com:*"}));
  EXPECT_EQ(p.spec.constraints().max_runtime_ms(), 30ull * 24 * 3600 * 1000);
  EXPECT_EQ(p.spec.constraints().max_memory_bytes(), 128u * 1024 * 1024);
  EXPECT_EQ(p.spec.purpose(), "");
  ASSERT_EQ(p.warnings.size(), 1u);
  EXPECT_EQ(p.warnings[0],
            "pattern1-periodic.scm:1:1: (spawn-agent ...) has no (purpose \"...\"); the vault "
            "records a default, and the purpose is the motivation of the agent's audit entries");
}

TEST(RfcSpecTest, OneShotNeedsItsHashBound) {
  absl::StatusOr<ParsedSpec> unbound =
      ParseAgentSpecWithOptions(Example("pattern2-one-shot.scm"), "p2.scm", {});
  EXPECT_EQ(unbound.status().message(),
            "p2.scm:7:17: the symbol input-hash stands for a hash that is not bound: give it "
            "with --bind input-hash=sha256:<64 hex>");
  SpecOptions options;
  options.bindings["input-hash"] = kInputHash;
  ParsedSpec p = Parse("pattern2-one-shot.scm", options);
  EXPECT_EQ(GrantStrings(p.spec),
            (std::vector<std::string>{absl::StrCat("read ", kInputHash), "write /vault/results"}));
  EXPECT_EQ(p.spec.constraints().max_runtime_ms(), 3600u * 1000);
  EXPECT_EQ(p.spec.constraints().max_memory_bytes(), 1024u * 1024 * 1024);
  EXPECT_TRUE(absl::StartsWith(p.spec.code_source(), "(lambda ()\n"));
}

TEST(RfcSpecTest, Reactive) {
  ParsedSpec p = Parse("pattern3-reactive.scm");
  EXPECT_EQ(GrantStrings(p.spec),
            (std::vector<std::string>{"receive supervisor-agent", "send worker-agents",
                                      "read /vault/tasks", "write /vault/results"}));
  EXPECT_FALSE(p.spec.constraints().has_max_runtime_ms());  // #f: runs until terminated
  EXPECT_EQ(p.spec.constraints().max_memory_bytes(), 256u * 1024 * 1024);
  EXPECT_NE(p.spec.code_source().find("(agent-receive timeout: 60000)"), std::string::npos);
}

TEST(RfcSpecTest, Mobile) {
  ParsedSpec p = Parse("pattern4-mobile.scm");
  EXPECT_EQ(GrantStrings(p.spec),
            (std::vector<std::string>{"read /vault/local", "migrate vault-a vault-b vault-c"}));
  EXPECT_EQ(p.spec.constraints().max_migrations(), 10u);
  EXPECT_EQ(p.spec.constraints().max_runtime_ms(), 24u * 3600 * 1000);
  EXPECT_NE(p.spec.code_source().find("(migrate-to remote-vault data)"), std::string::npos);
}

// Every example prints to the canonical form and parses back to the same spec.
TEST(RfcSpecTest, CanonicalFormRoundTrips) {
  SpecOptions options;
  options.bindings["input-hash"] = kInputHash;
  for (const char* name : {"daemon.scm", "pattern1-periodic.scm", "pattern2-one-shot.scm",
                           "pattern3-reactive.scm", "pattern4-mobile.scm"}) {
    ParsedSpec p = Parse(name, options);
    const std::string canonical = AgentSpecToSexpr(p.spec);
    absl::StatusOr<AgentSpec> again = ParseAgentSpec(canonical, "canonical.scm");
    ASSERT_TRUE(again.ok()) << name << ": " << again.status() << "\n" << canonical;
    EXPECT_EQ(again->SerializeAsString(), p.spec.SerializeAsString()) << canonical;
  }
}

TEST(RfcSpecTest, ShorthandsAndNewForms) {
  absl::StatusOr<ParsedSpec> p = ParseAgentSpecWithOptions(R"((agent
  (purpose "p")
  (name supervisor) (groups workers all-agents workers)
  (code '(lambda () (display "a \"quoted\" ) paren") #\) #;(ignored) #| block ( |# 'done))
  (capabilities
    (network "https://api.example.com/v1/*" (hosts a.example.com "b.example.com"))
    (network (host "c.example.com") (port 443))
    (read (url "HTTP://Example.COM?q=1"))
    (write (url "https://example.com/upload"))
    (send (to worker-agents) (types task)))
  (constraints
    (fuel (computation (* 1000 1000)) (allocation (* 64 1024 1024)))
    (max-cpu #f))
  (sandbox (type scheme))))",
                                                           "s.scm", {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->warnings.empty());
  EXPECT_EQ(p->spec.name(), "supervisor");
  EXPECT_EQ(std::vector<std::string>(p->spec.groups().begin(), p->spec.groups().end()),
            (std::vector<std::string>{"all-agents", "workers"}));
  EXPECT_EQ(p->spec.code_source(),
            R"((lambda () (display "a \"quoted\" ) paren") #\) #;(ignored) #| block ( |# 'done))");
  EXPECT_EQ(
      GrantStrings(p->spec),
      (std::vector<std::string>{
          "network https://api.example.com:443/v1/*", "network a.example.com:*",
          "network b.example.com:*", "network c.example.com:443", "read http://example.com:80/?q=1",
          "write https://example.com:443/upload", "send worker-agents types=task"}));
  EXPECT_EQ(p->spec.constraints().max_steps(), 1000000u);
  EXPECT_EQ(p->spec.constraints().max_allocation_bytes(), 64u * 1024 * 1024);
  EXPECT_FALSE(p->spec.constraints().has_max_cpu_ms());
  EXPECT_EQ(p->spec.sandbox(), "scheme");
}

// Scheme's write prints '(lambda ...) as (quote (lambda ...)): a spec a Scheme agent wrote for
// its child reads the same.
TEST(RfcSpecTest, QuoteWrittenOutIsTheSameAsTheApostrophe) {
  for (const char* text : {"(spawn-agent (code '(lambda () (log \"x\"))))",
                           "(spawn-agent (code (quote (lambda () (log \"x\")))))",
                           "(spawn-agent (code (quote\n  (lambda () (log \"x\")) )))"}) {
    absl::StatusOr<ParsedSpec> p = ParseAgentSpecWithOptions(text, "s.scm", {});
    ASSERT_TRUE(p.ok()) << text << ": " << p.status();
    EXPECT_EQ(p->spec.code_source(), "(lambda () (log \"x\"))") << text;
  }
}

TEST(RfcSpecTest, RefusesWithTheReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"(agent (purpose \"p\") (capabilities (read (url \"ftp://x.org/a\"))))",
       "s.scm:1:47: URL pattern \"ftp://x.org/a\" has a scheme other than http or https "
       "(lowercase)"},
      {"(agent (purpose \"p\") (capabilities (read (url \"https://x.org/a*/b\"))))",
       "s.scm:1:47: URL pattern \"https://x.org/a*/b\" may use '*' only at the very end (any "
       "continuation)"},
      {"(agent (purpose \"p\") (capabilities (read (url \"https://u@x.org/\"))))",
       "s.scm:1:47: URL pattern \"https://u@x.org/\" has user info ('@')"},
      {"(agent (purpose \"p\") (capabilities (read (url \"https://x.org/a/../b\"))))",
       "s.scm:1:47: URL pattern \"https://x.org/a/../b\" has a \".\" or \"..\" segment"},
      {"(agent (purpose \"p\") (capabilities (read (url \"https://x.org/a/%2e%2e/b\"))))",
       "s.scm:1:47: URL pattern \"https://x.org/a/%2e%2e/b\" percent-encodes '.', '/' or '\\' "
       "(write them plainly)"},
      {"(agent (purpose \"p\") (capabilities (network (url \"https://x.org/\") (port 1))))",
       "s.scm:1:36: grant network https://x.org:443/ [port 1]: needs a host (and port) "
       "or a url, not both"},
      {"(agent (purpose \"p\") (constraints (max-runtime #t)))",
       "s.scm:1:48: (max-runtime #t) means nothing: give a number, or #f for no limit"},
      {"(agent (purpose \"p\") (constraints (fuel (ticks 3))))",
       "s.scm:1:41: unknown form (ticks ...) in (fuel ...); expected (computation STEPS) or "
       "(allocation BYTES)"},
      {"(agent (purpose \"p\") (code '(lambda () (oops)))", "s.scm:1:1: '(' is never closed"},
      {"(agent (purpose \"p\") (code '(lambda () \"open)))",
       "s.scm:1:40: unterminated string in the code"},
      {"(agent (purpose \"p\") (code 'x))",
       "s.scm:1:28: (code ...) takes a digest string or a Scheme expression such as "
       "'(lambda () ...)"},
      {"(agent (purpose \"p\") (sandbox (type scheme) (memory 3)))",
       "s.scm:1:22: (sandbox ...) takes one type: posix, scheme, wasm or container; its limits "
       "come from (constraints ...)"},
      {"(agent (purpose #x))",
       "s.scm:1:17: unexpected \"#x\" (outside (code ...), '#' starts "
       "only #t and #f)"},
  };
  for (const auto& [text, error] : cases) {
    absl::StatusOr<ParsedSpec> p = ParseAgentSpecWithOptions(text, "s.scm", {});
    EXPECT_EQ(p.status().message(), error) << text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(RfcSpecTest, UrlCoverAndIntersect) {
  auto url = [](absl::string_view kind, absl::string_view u) {
    Grant g;
    g.set_kind(kind == "read" ? Grant::READ : Grant::NETWORK);
    g.set_url(std::string(u));
    return g;
  };
  const Grant rss = url("read", "https://arxiv.org:443/rss/*");
  EXPECT_TRUE(Covers(rss, url("read", "https://arxiv.org:443/rss/cs.AI")));
  EXPECT_TRUE(Covers(rss, url("read", "https://arxiv.org:443/rss/x/*")));
  EXPECT_FALSE(Covers(rss, url("read", "https://arxiv.org:443/rs*")));
  EXPECT_FALSE(Covers(rss, url("read", "http://arxiv.org:443/rss/a")));
  EXPECT_FALSE(Covers(rss, url("read", "https://arxiv.org:8443/rss/a")));
  EXPECT_FALSE(Covers(rss, url("network", "https://arxiv.org:443/rss/a")));
  EXPECT_FALSE(Covers(url("read", "https://arxiv.org:443/rss/a"), rss));
  EXPECT_TRUE(Covers(url("read", "https://*.arxiv.org:443/*"),
                     url("read", "https://export.arxiv.org:443/rss/a")));
  Grant path;
  path.set_kind(Grant::READ);
  path.set_path("/");
  EXPECT_FALSE(Covers(path, rss));
  EXPECT_FALSE(Covers(rss, path));

  Grants a, b;
  *a.Add() = rss;
  *b.Add() = url("read", "https://arxiv.org:443/rss/cs.*");
  *b.Add() = url("read", "https://doi.org:443/*");
  std::vector<Grant> meet = Intersect(a, b);
  ASSERT_EQ(meet.size(), 1u);
  EXPECT_EQ(meet[0].url(), "https://arxiv.org:443/rss/cs.*");

  EXPECT_TRUE(UrlAllows("https://arxiv.org:443/rss/*", "https://arxiv.org:443/rss/cs.AI?x=1"));
  EXPECT_FALSE(UrlAllows("https://arxiv.org:443/rss/*", "https://arxiv.org:443/rss/../admin"));
  EXPECT_FALSE(UrlAllows("https://arxiv.org:443/rss/*", "https://arxiv.org:443/rss/%2E%2E/a"));
  EXPECT_FALSE(UrlAllows("https://arxiv.org:443/rss", "https://arxiv.org:443/rss/a"));
  EXPECT_TRUE(UrlAllows("https://arxiv.org:443/rss", "https://arxiv.org:443/rss"));
  EXPECT_EQ(CanonicalUrl("https://*.x.org/a", UrlUse::kRequest).status().message(),
            "URL \"https://*.x.org/a\" has a wildcard host");
}

}  // namespace
}  // namespace vault::capability
