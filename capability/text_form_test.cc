#include "capability/text_form.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "capability/grant.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace vault::capability {
namespace {

using google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using vault::v1::AgentSpec;
using vault::v1::Constraints;
using vault::v1::Grant;

constexpr absl::string_view kCodeHex =
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
constexpr absl::string_view kReadHex =
    "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

// The header's example, with real digests; vault-c and a duplicate vault-b are out of order.
std::string FullSexpr() {
  return absl::StrReplaceAll(R"((agent
  (purpose "gather prices")
  (instructions "answer (price ITEM) with a number")
  (code "sha256:CODE/1234")            ; the agent's code in the CAS
  (capabilities
    (read (path "/vault/pub"))  (write (path "/vault/pub/out"))  (read (hash "sha256:READ"))
    (cas-read) (cas-write) (spawn)
    (network (host "*.example.com") (port 443))                 ; port omitted: any
    (network (host "api.example.org"))
    (send (agent "a-7")) (receive (from "*"))
    (migrate (vaults vault-c vault-b "vault-b"))
    (receive (from a-8) (types stop ping "ping")))        ; only these message types
  (constraints
    (max-runtime (* 24 3600))          ; seconds
    (max-memory (* 512 1024 1024))     ; bytes
    (max-storage (* 1 1024 1024 1024)) (max-cpu 600) (max-open-files 64) (max-processes 8)
    (max-migrations 3) (expires 1798761600))   ; unix seconds
  (sandbox posix))
)",
                             {{"CODE", kCodeHex}, {"READ", kReadHex}});
}

std::string FullTextproto() {
  return absl::StrCat(R"(# the same spec, protobuf text format
purpose: "gather prices"
instructions: "answer (price ITEM) with a number"
code_digest { sha256: ")",
                      absl::CEscape(absl::HexStringToBytes(kCodeHex)), R"(" size: 1234 }
grants { kind: READ path: "/vault/pub" }
grants { kind: WRITE path: "/vault/pub/out" }
grants { kind: READ hash: ")",
                      absl::CEscape(absl::HexStringToBytes(kReadHex)), R"(" }
grants { kind: CAS_READ }
grants { kind: CAS_WRITE }
grants { kind: SPAWN }
grants { kind: NETWORK host: "*.example.com" port: 443 }
grants { kind: NETWORK host: "api.example.org" }
grants { kind: SEND agent: "a-7" }
grants { kind: RECEIVE agent: "*" }
grants { kind: MIGRATE vaults: "vault-b" vaults: "vault-c" }
grants { kind: RECEIVE agent: "a-8" message_types: "ping" message_types: "stop" }
constraints {
  max_runtime_ms: 86400000 max_memory_bytes: 536870912 max_storage_bytes: 1073741824
  max_cpu_ms: 600000 max_open_files: 64 max_processes: 8 max_migrations: 3
  expires_unix_ms: 1798761600000
}
sandbox: "posix"
)");
}

std::string FullJson() {
  return absl::StrCat(R"({
  "purpose": "gather prices",
  "instructions": "answer (price ITEM) with a number",
  "codeDigest": {"sha256": ")",
                      absl::Base64Escape(absl::HexStringToBytes(kCodeHex)), R"(", "size": "1234"},
  "grants": [
    {"kind": "READ", "path": "/vault/pub"},
    {"kind": "WRITE", "path": "/vault/pub/out"},
    {"kind": "READ", "hash": ")",
                      absl::Base64Escape(absl::HexStringToBytes(kReadHex)), R"("},
    {"kind": "CAS_READ"}, {"kind": "CAS_WRITE"}, {"kind": "SPAWN"},
    {"kind": "NETWORK", "host": "*.example.com", "port": 443},
    {"kind": "NETWORK", "host": "api.example.org"},
    {"kind": "SEND", "agent": "a-7"},
    {"kind": "RECEIVE", "agent": "*"},
    {"kind": "MIGRATE", "vaults": ["vault-b", "vault-c"]},
    {"kind": "RECEIVE", "agent": "a-8", "messageTypes": ["ping", "stop"]}
  ],
  "constraints": {
    "maxRuntimeMs": "86400000", "maxMemoryBytes": "536870912", "max_storage_bytes": 1073741824,
    "maxCpuMs": 600000, "maxOpenFiles": 64, "maxProcesses": 8, "maxMigrations": 3,
    "expiresUnixMs": "1798761600000"
  },
  "sandbox": "posix"
})");
}

Grant TextGrant(const std::string& text) {
  Grant g;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &g)) << text;
  return g;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Parses, prints, parses again: the two messages are equal and printing is stable.
void ExpectRoundTrip(const AgentSpec& spec) {
  std::string printed = AgentSpecToSexpr(spec);
  absl::StatusOr<AgentSpec> again = ParseAgentSpec(printed, "printed.scm", TextFormat::kSexpr);
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << printed;
  EXPECT_TRUE(MessageDifferencer::Equals(spec, *again)) << spec.DebugString() << "\nvs\n"
                                                        << again->DebugString() << "\nprinted:\n"
                                                        << printed;
  EXPECT_EQ(AgentSpecToSexpr(*again), printed);
}

TEST(ParseAgentSpec, FullSpecFromSexpr) {
  absl::StatusOr<AgentSpec> spec = ParseAgentSpec(FullSexpr(), "spec.scm");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->purpose(), "gather prices");
  EXPECT_EQ(spec->instructions(), "answer (price ITEM) with a number");
  EXPECT_EQ(spec->code_digest().sha256(), absl::HexStringToBytes(kCodeHex));
  EXPECT_EQ(spec->code_digest().size(), 1234u);
  ASSERT_EQ(spec->grants_size(), 12);
  EXPECT_EQ(spec->grants(2).hash(), absl::HexStringToBytes(kReadHex));
  EXPECT_EQ(spec->grants(6).port(), 443u);
  EXPECT_EQ(spec->grants(7).port(), 0u);
  EXPECT_EQ(spec->grants(9).agent(), "*");
  // Sorted and de-duplicated.
  ASSERT_EQ(spec->grants(10).vaults_size(), 2);
  EXPECT_EQ(spec->grants(10).vaults(0), "vault-b");
  EXPECT_EQ(spec->grants(10).vaults(1), "vault-c");
  EXPECT_EQ(spec->grants(11).agent(), "a-8");
  ASSERT_EQ(spec->grants(11).message_types_size(), 2);
  EXPECT_EQ(spec->grants(11).message_types(0), "ping");
  EXPECT_EQ(spec->grants(11).message_types(1), "stop");
  const Constraints& c = spec->constraints();
  EXPECT_EQ(c.max_runtime_ms(), 86400000u);
  EXPECT_EQ(c.max_memory_bytes(), 536870912u);
  EXPECT_EQ(c.max_storage_bytes(), 1073741824u);
  EXPECT_EQ(c.max_cpu_ms(), 600000u);
  EXPECT_EQ(c.max_open_files(), 64u);
  EXPECT_EQ(c.max_processes(), 8u);
  EXPECT_EQ(c.max_migrations(), 3u);
  EXPECT_EQ(c.expires_unix_ms(), 1798761600000);
  EXPECT_EQ(spec->sandbox(), "posix");
  EXPECT_TRUE(ValidateGrants(spec->grants()).ok());
  ExpectRoundTrip(*spec);
}

// A program's args and env: for posix and wasm agents, printed back the same, and checked.
TEST(ParseAgentSpec, ArgsAndEnv) {
  absl::StatusOr<ParsedSpec> p = ParseAgentSpecWithOptions(
      "(agent (purpose \"p\") (sandbox wasm) (args \"--n\" \"3\" x 7)\n"
      "  (env (\"LANG\" \"C\") \"TZ=UTC\"))",
      "spec.scm", {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->spec.args(), ElementsAre("--n", "3", "x", "7"));
  EXPECT_THAT(p->spec.env(), ElementsAre("LANG=C", "TZ=UTC"));
  ExpectRoundTrip(p->spec);
  auto refused = [](const std::string& text) {
    absl::StatusOr<ParsedSpec> r = ParseAgentSpecWithOptions(text, "s.scm", {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(r.status().message());
  };
  EXPECT_EQ(refused("(agent (purpose \"p\") (sandbox scheme) (args \"a\"))"),
            "s.scm: args and env are given to a program: a posix, wasm or container agent's, not a "
            "scheme agent's");
  EXPECT_EQ(refused("(agent (purpose \"p\") (env (\"VAULT_AGENT_ID\" \"x\")))"),
            "s.scm: env entry \"VAULT_AGENT_ID=x\" is not KEY=VALUE with a key of "
            "[A-Za-z_][A-Za-z0-9_]* (VAULT_* is the vault's)");
  EXPECT_THAT(refused("(agent (purpose \"p\") (env (\"1A\" \"x\")))"), HasSubstr("1A=x"));
  EXPECT_THAT(refused("(agent (purpose \"p\") (env (\"A-B\" \"x\")))"), HasSubstr("A-B=x"));
}

TEST(ParseAgentSpec, ContainerAgentsNameAnImageAndACommand) {
  absl::StatusOr<ParsedSpec> p = ParseAgentSpecWithOptions(
      "(agent (purpose \"p\") (image \"web:1\") (command \"/bin/agent\" \"--serve\") (args \"x\")\n"
      "  (env \"LANG=C\"))",
      "spec.scm", {});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->spec.sandbox(), "container");  // (image ...) says so
  EXPECT_EQ(p->spec.image(), "web:1");
  EXPECT_THAT(p->spec.command(), ElementsAre("/bin/agent", "--serve"));
  EXPECT_THAT(p->spec.args(), ElementsAre("x"));
  ExpectRoundTrip(p->spec);
  auto refused = [](const std::string& text) {
    absl::StatusOr<ParsedSpec> r = ParseAgentSpecWithOptions(text, "s.scm", {});
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << text;
    return std::string(r.status().message());
  };
  EXPECT_EQ(refused("(agent (purpose \"p\") (sandbox posix) (image \"web:1\"))"),
            "s.scm: (image ...) and (command ...) are a container agent's, not a posix agent's: "
            "add (sandbox container)");
  EXPECT_EQ(refused("(agent (purpose \"p\") (command \"/bin/agent\"))"),
            "s.scm: (image ...) and (command ...) are a container agent's, not a posix agent's: "
            "add (sandbox container)");
  EXPECT_THAT(refused("(agent (purpose \"p\") (image \"web:1\") (code-file \"a.py\"))"),
              HasSubstr("(image ...) is a container agent's code"));
  EXPECT_THAT(refused("(agent (purpose \"p\") (sandbox container) (code-file \"a.py\"))"),
              HasSubstr("a container agent's code is an image the vault imported"));
  EXPECT_THAT(refused("(agent (purpose \"p\") (image \"web:1\") (command))"),
              HasSubstr("(command ...) names the program to run"));
  EXPECT_THAT(refused("(agent (purpose \"p\") (image \"\"))"), HasSubstr("(image ...) is empty"));
}

TEST(ParseAgentSpec, ThreeFormatsGiveTheSameMessage) {
  absl::StatusOr<AgentSpec> sexpr = ParseAgentSpec(FullSexpr(), "spec.scm");
  absl::StatusOr<AgentSpec> text = ParseAgentSpec(FullTextproto(), "spec.txtpb");
  absl::StatusOr<AgentSpec> json = ParseAgentSpec(FullJson(), "spec.json");
  ASSERT_TRUE(sexpr.ok()) << sexpr.status();
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*sexpr, *text)) << text->DebugString();
  EXPECT_TRUE(MessageDifferencer::Equals(*sexpr, *json)) << json->DebugString();

  // An explicit format gives the same; the wrong one fails.
  absl::StatusOr<AgentSpec> explicit_json = ParseAgentSpec(FullJson(), "s", TextFormat::kJson);
  ASSERT_TRUE(explicit_json.ok()) << explicit_json.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*sexpr, *explicit_json));
  EXPECT_FALSE(ParseAgentSpec(FullJson(), "s", TextFormat::kSexpr).ok());
  EXPECT_FALSE(ParseAgentSpec(FullSexpr(), "s", TextFormat::kTextproto).ok());

  // Printing a spec read from JSON gives the same S-expression.
  EXPECT_EQ(AgentSpecToSexpr(*json), AgentSpecToSexpr(*sexpr));
}

TEST(AgentSpecToSexpr, CanonicalLayout) {
  AgentSpec spec;
  spec.set_purpose("p \"q\"");
  spec.set_code_file("agent.py");
  *spec.add_grants() = TextGrant(R"(kind: READ path: "/vault/pub")");
  *spec.add_grants() = TextGrant(R"(kind: MIGRATE vaults: "vault-b" vaults: "vault-c")");
  *spec.add_grants() = TextGrant(R"(kind: SEND agent: "a-7" message_types: "ping")");
  *spec.add_grants() =
      TextGrant(R"(kind: RECEIVE agent: "*" message_types: "123" message_types: "vault.answer")");
  *spec.add_grants() = TextGrant(R"(kind: RECEIVE agent: "a-7")");
  spec.mutable_constraints()->set_max_runtime_ms(86400000);
  spec.mutable_constraints()->set_max_cpu_ms(1500);
  spec.set_sandbox("posix");
  EXPECT_EQ(AgentSpecToSexpr(spec), R"((agent
  (purpose "p \"q\"")
  (code-file "agent.py")
  (capabilities
    (read (path "/vault/pub"))
    (migrate (vaults vault-b vault-c))
    (send (agent "a-7") (types ping))
    (receive (from "*") (types "123" vault.answer))
    (receive (from "a-7")))
  (constraints
    (max-runtime 86400)
    (max-cpu-ms 1500))
  (sandbox posix)))");
  ExpectRoundTrip(spec);

  EXPECT_EQ(AgentSpecToSexpr(AgentSpec()), "(agent)");
  // Present but empty constraints stay present.
  AgentSpec empty_limits;
  empty_limits.mutable_constraints();
  EXPECT_EQ(AgentSpecToSexpr(empty_limits), "(agent\n  (constraints))");
  ExpectRoundTrip(empty_limits);
}

TEST(ParseAgentSpec, StringsAndEscapesRoundTrip) {
  absl::StatusOr<AgentSpec> spec = ParseAgentSpec(
      "(agent (purpose \"a \\\"b\\\" \\\\ c\\n\\td\\r\\x01\\x7f é\")\n"
      "       (instructions \"two\nlines\"))",
      "spec.scm");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->purpose(), "a \"b\" \\ c\n\td\r\x01\x7f é");
  EXPECT_EQ(spec->instructions(), "two\nlines");
  ExpectRoundTrip(*spec);

  // Values only JSON or text format can express still print and parse back.
  absl::StatusOr<AgentSpec> odd = ParseAgentSpec(
      R"(purpose: "\001\000x" sandbox: "Posix 2" constraints { max_runtime_ms: 1 expires_unix_ms: -1500 })",
      "odd.txtpb");
  ASSERT_TRUE(odd.ok()) << odd.status();
  ExpectRoundTrip(*odd);
  EXPECT_EQ(ConstraintsToSexpr(odd->constraints()),
            "(constraints\n  (max-runtime-ms 1)\n  (expires-ms -1500))");
}

TEST(ParseAgentSpec, Arithmetic) {
  absl::StatusOr<AgentSpec> spec =
      ParseAgentSpec("(agent (constraints (max-runtime ((* 24 3600)))))", "spec.scm");
  // ((* 24 3600)) is a list whose head is not a name: refused.
  EXPECT_FALSE(spec.ok());

  spec = ParseAgentSpec(
      "(agent (constraints (max-runtime (* 24 3600)) (max-memory (+ (* 2 3) (- 10 4) 1))\n"
      "                    (expires (- 0 5)) (max-open-files (* (+ 1 1) (- 9 1)))))",
      "spec.scm");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->constraints().max_runtime_ms(), 86400000u);
  EXPECT_EQ(spec->constraints().max_memory_bytes(), 13u);
  EXPECT_EQ(spec->constraints().expires_unix_ms(), -5000);
  EXPECT_EQ(spec->constraints().max_open_files(), 16u);
  ExpectRoundTrip(*spec);

  absl::StatusOr<Constraints> c =
      ParseConstraints("(constraints (max-storage 18446744073709551615))", "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_storage_bytes(), 18446744073709551615u);
  c = ParseConstraints("(constraints (expires-ms -9223372036854775808))", "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->expires_unix_ms(), INT64_MIN);
}

TEST(ParseAgentSpec, ArithmeticErrors) {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {"(agent (constraints (max-memory (* 4294967296 4294967296))))",
       "spec.scm:1:33: (* ...) overflows"},
      {"(agent (constraints (max-memory (+ 18446744073709551615 1))))",
       "spec.scm:1:33: (+ ...) overflows"},
      {"(agent (constraints (max-memory (- 1 2))))", "spec.scm:1:33: (- ...) is negative"},
      {"(agent (constraints (max-memory -3)))", "spec.scm:1:33: -3 is negative"},
      {"(agent (constraints (expires (- -9223372036854775807 2))))",
       "spec.scm:1:30: (- ...) overflows"},
      {"(agent (constraints (max-memory 18446744073709551616)))",
       "spec.scm:1:33: \"18446744073709551616\" is out of range"},
      {"(agent (constraints (max-runtime 18446744073709552)))",
       "spec.scm:1:34: max-runtime of 18446744073709552 seconds overflows in milliseconds"},
      {"(agent (constraints (expires 9223372036854776)))",
       "spec.scm:1:30: expires of 9223372036854776 seconds overflows in milliseconds"},
      {"(agent (constraints (max-open-files 4294967296)))",
       "spec.scm:1:37: max-open-files 4294967296 is out of range (at most 4294967295)"},
      {"(agent (constraints (max-cpu (/ 6 2))))",
       "spec.scm:1:30: unknown operator (/ ...); numbers combine with (+ ...), (- ...) and (* "
       "...)"},
      {"(agent (constraints (max-cpu (- 6))))", "spec.scm:1:30: (- ...) takes two numbers"},
      {"(agent (constraints (max-cpu (* 6))))", "spec.scm:1:30: (* ...) takes two or more numbers"},
      {"(agent (constraints (max-cpu \"6\")))",
       "spec.scm:1:30: expected a number, found the string \"6\""},
      {"(agent (constraints (max-cpu 1 2)))",
       "spec.scm:1:21: (max-cpu ...) takes one number (or #f: none)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<AgentSpec> spec = ParseAgentSpec(c.text, "spec.scm", TextFormat::kSexpr);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(spec.status()), c.error) << c.text;
  }
}

TEST(ParseAgentSpec, SexprErrors) {
  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      // Unbalanced: the innermost '(' that is never closed, or the stray ')'.
      {"(agent\n  (purpose \"x\")\n", "spec.scm:1:1: '(' is never closed"},
      {"(agent\n  (purpose \"x\"\n", "spec.scm:2:3: '(' is never closed"},
      {"(agent (purpose \"x\")))", "spec.scm:1:22: unexpected ')'"},
      {")", "spec.scm:1:1: unexpected ')'"},
      {"(agent) (agent)", "spec.scm:1:9: unexpected text after the first form"},
      {"  ; only a comment\n", "spec.scm:2:1: empty input; expected (agent ...)"},
      {"(agent\n  (colour blue))",
       "spec.scm:2:3: unknown form (colour ...) in (agent ...); the forms are purpose, "
       "instructions, code, code-file, capabilities, constraints, sandbox, id, name, groups, "
       "spawned-by, status, args, env, image, command"},
      {"(agent (env (\"A\" \"b\" \"c\")))",
       "spec.scm:1:13: (env ...) takes (\"KEY\" \"VALUE\") pairs or \"KEY=VALUE\""},
      {"(agent (args (\"a\")))", "spec.scm:1:14: (args ...) takes strings: (args \"--n\" \"3\")"},
      {"(agnet)", "spec.scm:1:1: expected (agent ...) or (spawn-agent ...), found (agnet ...)"},
      {"agent", "spec.scm:1:1: expected (agent ...) or (spawn-agent ...), found the symbol agent"},
      {"(agent (purpose \"abc))", "spec.scm:1:17: unterminated string"},
      {"(agent (purpose \"a\\qb\"))",
       "spec.scm:1:19: unknown escape \\'q' (use \\\", \\\\, \\n, "
       "\\t, \\r or \\xHH)"},
      {"(agent (purpose \"\\xff\"))", "spec.scm:1:17: string is not valid UTF-8"},
      {"(agent (purpose Prices))",
       "spec.scm:1:17: unexpected character 'P' (bare symbols are [a-z0-9*._/+-]; quote other "
       "text)"},
      {"(agent (purpose prices))", "spec.scm:1:8: (purpose ...) takes one quoted string"},
      {"(agent (purpose \"a\") (purpose \"b\"))",
       "spec.scm:1:22: repeated (purpose ...); the first is at 1:8"},
      {"(agent (code-file \"a.py\")\n (code \"sha256:00/1\"))",
       "spec.scm:2:2: (code ...) conflicts with (code-file ...) at 1:8"},
      {"(agent (code \"sha256:ABC/1\"))",
       "spec.scm:1:14: bad digest \"sha256:ABC/1\": expected \"sha256:<64 lowercase hex "
       "digits>/<size in bytes>\""},
      {"(agent (code-file \"\"))", "spec.scm:1:19: (code-file ...) is empty"},
      {"(agent ())", "spec.scm:1:8: empty form () in (agent ...)"},
      {"(agent \"x\")",
       "spec.scm:1:8: expected a form (name ...) in (agent ...), found the string \"x\""},
      {"(agent (capabilities (network (port 443))))",
       "spec.scm:1:22: (network ...) needs (host ...) or (url ...)"},
      {"(agent (capabilities (read)))",
       "spec.scm:1:22: (read ...) needs (path ...), (hash ...) or (url ...)"},
      {"(agent (capabilities (exec (path \"/bin\"))))",
       "spec.scm:1:22: unknown grant (exec ...); expected read, write, cas-read, cas-write, spawn, "
       "network, send, receive or migrate"},
      {"(agent (capabilities (write (hash \"x\"))))",
       "spec.scm:1:29: unknown form (hash ...) in (write ...)"},
      {"(agent (capabilities (spawn (path \"/x\"))))", "spec.scm:1:29: (spawn) takes no arguments"},
      {"(agent (capabilities (network (host \"a.com\") (port 65536))))",
       "spec.scm:1:52: port 65536 is out of range (0-65535; 0 is any port)"},
      {"(agent (capabilities (read (hash \"sha256:abc\"))))",
       "spec.scm:1:34: bad hash \"sha256:abc\": expected \"sha256:<64 lowercase hex digits>\""},
      {"(agent (capabilities (read (path \"/a\") (path \"/b\"))))",
       "spec.scm:1:40: repeated (path ...); the first is at 1:28"},
      {"(agent (constraints (max-runtime 1) (max-runtime-ms 5)))",
       "spec.scm:1:37: (max-runtime-ms ...) conflicts with (max-runtime ...) at 1:21"},
      {"(agent (constraints (max-speed 1)))",
       "spec.scm:1:21: unknown form (max-speed ...) in (constraints ...); the limits are "
       "max-runtime, max-runtime-ms, max-memory, max-storage, max-cpu, max-cpu-ms, "
       "max-open-files, max-processes, max-migrations, expires, expires-ms, max-steps, "
       "max-allocation, and (fuel ...)"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<AgentSpec> spec = ParseAgentSpec(c.text, "spec.scm", TextFormat::kSexpr);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(spec.status()), c.error) << c.text;
  }
}

TEST(ParseAgentSpec, InvalidGrantReportsValidateGrantAtTheGrant) {
  absl::StatusOr<AgentSpec> spec =
      ParseAgentSpec("(agent\n  (capabilities\n    (read (path \"/a/../b\"))))", "spec.scm");
  ASSERT_FALSE(spec.ok());
  Grant g = TextGrant(R"(kind: READ path: "/a/../b")");
  absl::Status expected = ValidateGrant(g);
  ASSERT_FALSE(expected.ok());
  EXPECT_EQ(Message(spec.status()), absl::StrCat("spec.scm:3:5: ", expected.message()));

  // Vault names are checked too, after sorting.
  spec = ParseAgentSpec("(agent (capabilities (migrate (vaults vault-b \"Vault C\"))))", "s");
  ASSERT_FALSE(spec.ok());
  g = TextGrant(R"(kind: MIGRATE vaults: "Vault C" vaults: "vault-b")");
  EXPECT_EQ(Message(spec.status()), absl::StrCat("s:1:22: ", Message(ValidateGrant(g))));
}

TEST(ParseAgentSpec, JsonErrors) {
  struct Case {
    std::string text;
    std::string error;
  } cases[] = {
      {"{\"purpose\": \"x\",\n  \"colour\": 1}",
       "spec.json:2:3: unknown field \"colour\" in vault.v1.AgentSpec"},
      {"{\"grants\": [\n  {\"kind\": \"READ\", \"path\": \"/a\"},\n  {\"kind\": \"SPAWN\", "
       "\"bogus\": 1}]}",
       "spec.json:3:21: unknown field \"bogus\" in vault.v1.Grant"},
      {"{\"purpose\": \"x\",\n \"sandbox\" \"posix\"}",
       "spec.json:2:12: expected ':' after the key"},
      {"{\"purpose\": \"x\",}", "spec.json:1:17: trailing ',' before '}'"},
      {"{\"purpose\": \"x\"", "spec.json:1:1: '{' is never closed"},
      {"{\"purpose\": \"x\n\"}", "spec.json:1:15: control character byte 0x0a in a string"},
      {"{\"purpose\": tru}", "spec.json:1:13: unexpected character 't'"},
      {"{\"purpose\": 01}", "spec.json:1:13: invalid number"},
      {"{\"purpose\": \"x\"} x", "spec.json:1:18: unexpected text after the JSON value"},
      {"{\"purpose\": \"\\ud800\"}", "spec.json:1:14: unpaired surrogate in \\u escape"},
      {"{\"purpose\": \"a\", \"purpose\": \"b\"}", "spec.json:1:18: duplicate key \"purpose\""},
      {"{\"maxRuntimeMs\": 1}",
       "spec.json:1:2: unknown field \"maxRuntimeMs\" in vault.v1.AgentSpec"},
      {"{\"constraints\": {\"maxRuntimeMs\": 1, \"max_runtime_ms\": 2}}",
       "spec.json:1:37: field \"max_runtime_ms\" repeats \"maxRuntimeMs\""},
      {"{\"codeFile\": \"a.py\",\n \"codeDigest\": {}}",
       "spec.json:2:2: \"codeDigest\" conflicts with \"codeFile\" (only one of 'code')"},
      {"{\"grants\": {\"kind\": \"SPAWN\"}}", "spec.json:1:12: field \"grants\" takes an array"},
      {"{\"constraints\": 5}", "spec.json:1:17: expected a JSON object for vault.v1.Constraints"},
      {"[1]", "spec.json:1:1: expected a JSON object for vault.v1.AgentSpec"},
      // Types protobuf refuses: located by the field path it reports.
      {"{\"grants\": [{\"kind\": \"NETWORK\",\n  \"host\": \"a.com\", \"port\": \"abc\"}]}",
       "spec.json:2:20: grants[0].port: invalid value \"abc\" for type TYPE_UINT32"},
      {"{\"grants\": [{\"kind\": \"READX\"}]}",
       "spec.json:1:14: grants[0].kind: invalid value \"READX\" for type "
       "type.googleapis.com/vault.v1.Grant.Kind"},
      // Semantic checks after the conversion.
      {"{\"codeDigest\": {\"sha256\": \"AAAA\", \"size\": 1}}",
       "spec.json:1:17: code_digest.sha256: must be 32 bytes (a SHA-256), not 3"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<AgentSpec> spec = ParseAgentSpec(c.text, "spec.json", TextFormat::kJson);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(spec.status()), c.error) << c.text;
  }

  // ValidateGrant, at the offending grant.
  absl::StatusOr<AgentSpec> spec = ParseAgentSpec(
      "{\"grants\": [\n  {\"kind\": \"SPAWN\"},\n  {\"kind\": \"READ\", \"path\": \"/a/../b\"}]}",
      "spec.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()),
            absl::StrCat("spec.json:3:3: grants[1]: ",
                         Message(ValidateGrant(TextGrant(R"(kind: READ path: "/a/../b")")))));
}

TEST(ParseAgentSpec, TextprotoErrors) {
  absl::StatusOr<AgentSpec> spec = ParseAgentSpec("purpose: \"x\"\ncolour: 1\n", "spec.txtpb");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()),
            "spec.txtpb:2:7: Message type \"vault.v1.AgentSpec\" has no field named \"colour\".");

  spec = ParseAgentSpec("purpose: \"x\"\nconstraints { max_runtime_ms: -1 }", "spec.txtpb");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), "spec.txtpb:2:31: Expected integer, got: -");

  spec = ParseAgentSpec(
      "purpose: \"x\"\ngrants { kind: SPAWN }\n  grants { kind: READ path: \"/a/../b\" }",
      "spec.txtpb");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()),
            absl::StrCat("spec.txtpb:3:3: grants[1]: ",
                         Message(ValidateGrant(TextGrant(R"(kind: READ path: "/a/../b")")))));

  spec = ParseAgentSpec("sandbox: \"posix\"\npurpose: \"\\xff\"", "spec.txtpb");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), "spec.txtpb:2:1: purpose: string is not valid UTF-8");
}

TEST(ParseAgentSpec, AutoDetectionSkipsComments) {
  absl::StatusOr<AgentSpec> spec =
      ParseAgentSpec("; a comment\n  ; another\n(agent (purpose \"x\"))", "s");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->purpose(), "x");
  spec = ParseAgentSpec("\n  {\"purpose\": \"y\"}", "s");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->purpose(), "y");
  spec = ParseAgentSpec("# text format\npurpose: \"z\"", "s");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->purpose(), "z");
}

TEST(ParseAgentSpec, DepthBombIsACleanError) {
  std::string bomb = std::string(10000, '(') + std::string(10000, ')');
  absl::StatusOr<AgentSpec> spec = ParseAgentSpec(bomb, "bomb.scm");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), "bomb.scm:1:65: forms nested deeper than 64 levels");

  std::string json_bomb =
      "{\"purpose\": " + std::string(10000, '[') + std::string(10000, ']') + "}";
  spec = ParseAgentSpec(json_bomb, "bomb.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), "bomb.json:1:76: nested deeper than 64 levels");

  std::string text_bomb;
  for (int i = 0; i < 10000; ++i) text_bomb += "constraints { ";
  spec = ParseAgentSpec(text_bomb, "bomb.txtpb");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);

  // Unclosed at depth: the error names the innermost open paren, no recursion blow-up.
  spec = ParseAgentSpec(std::string(60, '('), "open.scm");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), "open.scm:1:60: '(' is never closed");
}

TEST(ParseAgentSpec, LargeInputRefused) {
  std::string big = "(agent (purpose \"" + std::string(1 << 20, 'a') + "\"))";
  absl::StatusOr<AgentSpec> spec = ParseAgentSpec(big, "big.scm");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), absl::StrCat("big.scm:1:1: input is ", big.size(),
                                                 " bytes; at most 1048576 are accepted"));
  EXPECT_FALSE(ParseGrants(big, "big").ok());
  EXPECT_FALSE(ParseConstraints(big, "big").ok());

  // Inputs near the limit with many parts take linear time.
  std::string keys = "{";
  for (int i = 0; keys.size() < (1 << 20) - 32; ++i) absl::StrAppend(&keys, "\"k", i, "\": 1, ");
  keys += "\"last\": 1}";
  spec = ParseAgentSpec(keys, "keys.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(Message(spec.status()), "keys.json:1:2: unknown field \"k0\" in vault.v1.AgentSpec");
  std::string grants = "(agent (capabilities";
  while (grants.size() < (1 << 20) - 32) grants += " (spawn)";
  grants += "))";
  spec = ParseAgentSpec(grants, "grants.scm");
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(absl::StartsWith(Message(spec.status()), "grants.scm:1:8: ")) << spec.status();

  // Just under the limit is fine.
  std::string fits = "(agent (purpose \"" + std::string((1 << 20) - 20, 'a') + "\"))";
  EXPECT_TRUE(ParseAgentSpec(fits, "fits.scm").ok());
}

}  // namespace
}  // namespace vault::capability
