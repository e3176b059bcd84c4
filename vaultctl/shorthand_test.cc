// The command line's grants and constraints: the shorthand, and every other form passed on to
// capability/text_form.h (these tests were text_form's while the shorthand lived there).
#include "vaultctl/shorthand.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "capability/text_form.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace vault::vaultctl {
namespace {

using capability::ConstraintsToSexpr;
using capability::GrantsToSexpr;
using capability::ValidateGrant;
using google::protobuf::util::MessageDifferencer;
using vault::v1::Constraints;
using vault::v1::Grant;

constexpr absl::string_view kReadHex =
    "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";

Grant TextGrant(const std::string& text) {
  Grant g;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &g)) << text;
  return g;
}

std::string Message(const absl::Status& status) { return std::string(status.message()); }

TEST(ParseGrants, EachKindInEveryForm) {
  struct Case {
    std::string sexpr;
    std::string shorthand;
    std::string text;
  } cases[] = {
      {R"((read (path "/vault/pub")))", "read:/vault/pub", R"(kind: READ path: "/vault/pub")"},
      {R"((read (path /vault/pub)))", "read:/vault/pub", R"(kind: READ path: "/vault/pub")"},
      {R"((write (path "/x")))", "write:/x", R"(kind: WRITE path: "/x")"},
      {absl::StrCat(R"((read (hash "sha256:)", kReadHex, R"(")))"),
       absl::StrCat("read-hash:sha256:", kReadHex),
       absl::StrCat(R"(kind: READ hash: ")", absl::CEscape(absl::HexStringToBytes(kReadHex)),
                    R"(")")},
      {"(cas-read)", "cas-read", "kind: CAS_READ"},
      {"(cas-write)", "cas-write", "kind: CAS_WRITE"},
      {"(spawn)", "spawn", "kind: SPAWN"},
      {R"((network (host "*.example.com") (port 443)))", "network:*.example.com:443",
       R"(kind: NETWORK host: "*.example.com" port: 443)"},
      {R"((network (host api.example.com)))", "network:api.example.com",
       R"(kind: NETWORK host: "api.example.com")"},
      {R"((network (host api.example.com) (port 0)))", "network:api.example.com:*",
       R"(kind: NETWORK host: "api.example.com")"},
      {R"((send (agent "a-7")))", "send:a-7", R"(kind: SEND agent: "a-7")"},
      {R"((send (agent *)))", "send:*", R"(kind: SEND agent: "*")"},
      {R"((receive (from "*")))", "receive:*", R"(kind: RECEIVE agent: "*")"},
      {"(migrate (vaults vault-c vault-b))", "migrate:vault-c,vault-b,vault-c",
       R"(kind: MIGRATE vaults: "vault-b" vaults: "vault-c")"},
      {R"((send (agent "a-7") (types stop ping "ping")))", "send:a-7:stop,ping,ping",
       R"(kind: SEND agent: "a-7" message_types: "ping" message_types: "stop")"},
      {R"((send (types ping) (agent *)))", "send:*:ping",
       R"(kind: SEND agent: "*" message_types: "ping")"},
      {R"((receive (from a-8) (types vault.answer)))", "receive:a-8:vault.answer",
       R"(kind: RECEIVE agent: "a-8" message_types: "vault.answer")"},
  };
  for (const Case& c : cases) {
    Grant want = TextGrant(c.text);
    std::string json;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(want, &json).ok());
    for (const std::string& input :
         {c.sexpr, absl::StrCat("(capabilities ", c.sexpr, ")"), c.shorthand, c.text, json}) {
      absl::StatusOr<std::vector<Grant>> grants = ParseGrantsFlag(input, "grant");
      ASSERT_TRUE(grants.ok()) << input << ": " << grants.status();
      ASSERT_EQ(grants->size(), 1u) << input;
      EXPECT_TRUE(MessageDifferencer::Equals((*grants)[0], want))
          << input << " gave " << (*grants)[0].ShortDebugString();
    }
    // Round trip through the canonical form.
    std::string printed = GrantsToSexpr({want});
    absl::StatusOr<std::vector<Grant>> again = ParseGrantsFlag(printed, "printed");
    ASSERT_TRUE(again.ok()) << printed << ": " << again.status();
    ASSERT_EQ(again->size(), 1u);
    EXPECT_TRUE(MessageDifferencer::Equals((*again)[0], want)) << printed;
  }

  absl::StatusOr<std::vector<Grant>> list =
      ParseGrantsFlag("(capabilities (spawn) (cas-read) (read (path \"/a\")))", "g");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 3u);
  EXPECT_EQ(GrantsToSexpr(*list),
            "(capabilities\n  (spawn)\n  (cas-read)\n  (read (path \"/a\")))");
  EXPECT_EQ(GrantsToSexpr({}), "(capabilities)");
  list = ParseGrantsFlag("(capabilities)", "g");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_TRUE(list->empty());
}

TEST(ParseGrants, Errors) {
  struct Case {
    std::string text;
    std::string error;
  } cases[] = {
      {"exec:/x",
       "g:1:1: unknown grant kind \"exec\"; expected read, write, read-hash, cas-read, cas-write, "
       "spawn, network, send, receive or migrate"},
      {"network:a.example.com:99999", "g:1:23: bad port \"99999\": expected 0-65535 or * (any)"},
      {"network:a.example.com:", "g:1:23: bad port \"\": expected 0-65535 or * (any)"},
      {"read:", "g:1:6: read needs a path, e.g. read:/vault/pub"},
      {"  read", "g:1:3: read needs a path, e.g. read:/vault/pub"},
      {"cas-read:x", "g:1:9: cas-read takes no argument"},
      {"read-hash:sha256:12",
       "g:1:11: bad hash \"sha256:12\": expected \"sha256:<64 lowercase hex "
       "digits>\""},
      {"migrate:vault-b,,vault-c", "g:1:17: empty vault name"},
      {"send:", "g:1:6: send needs an agent id or *, e.g. send:agent-7"},
      {"send:a-7:", "g:1:10: empty message type"},
      {"receive:*:ping,,stop", "g:1:16: empty message type"},
      {"send:a-7:Ping",
       "g:1:6: grant send a-7 types=Ping: message type \"Ping\" must be 1-64 of [a-z0-9._-]"},
      {"send:a-7:vault.query",
       "g:1:6: grant send a-7 types=vault.query: message type \"vault.query\" is reserved for "
       "the vault"},
      {"(send (agent a-7) (types))",
       "g:1:19: (types ...) takes one or more message types (omit it for any type)"},
      {"(send (agent a-7) (types ping) (types stop))",
       "g:1:32: repeated (types ...); the first is at 1:19"},
      // A list of names counts as its names ((vaults (a b)) as the RFC writes it); deeper is not.
      {"(send (agent a-7) (types ((ping))))",
       "g:1:27: (types ...) takes names (strings or symbols), found (ping ...)"},
      {"(network (host a.example.com) (types ping))",
       "g:1:31: unknown form (types ...) in (network ...)"},
      {"(send (types ping))", "g:1:1: (send ...) needs (agent ...)"},
      {"kind: SEND agent: \"x\" message_types: \"stop\" message_types: \"ping\"",
       "g:1:1: grant send x types=stop,ping: message types are not sorted"},
      {"{\"kind\": \"MIGRATE\", \"vaults\": [\"b\"], \"messageTypes\": [\"ping\"]}",
       "g:1:1: grant migrate b [message_types ping]: may not have message_types (only send and "
       "receive grants have them)"},
      {"", "g:1:1: empty input; expected a grant such as read:/vault/pub"},
      {"(read (path \"/a\")) (spawn)", "g:1:20: unexpected text after the first form"},
      {"(agent)",
       "g:1:1: expected (capabilities ...) or a grant such as (read (path \"/a\")), found (agent "
       "...)"},
      {"{\"kind\": \"SPAWN\", \"path\": 5}", "g:1:19: path: invalid value 5 for type TYPE_STRING"},
      {"kind: SPAWN\nport: x", "g:2:7: Expected integer, got: x"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::vector<Grant>> grants = ParseGrantsFlag(c.text, "g");
    ASSERT_FALSE(grants.ok()) << c.text;
    EXPECT_EQ(grants.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(grants.status()), c.error) << c.text;
  }

  // ValidateGrant's message, at the argument.
  absl::StatusOr<std::vector<Grant>> grants = ParseGrantsFlag("read:/a/../b", "g");
  ASSERT_FALSE(grants.ok());
  EXPECT_EQ(
      Message(grants.status()),
      absl::StrCat("g:1:6: ", Message(ValidateGrant(TextGrant(R"(kind: READ path: "/a/../b")")))));
  grants = ParseGrantsFlag("network:Example.com:443", "g");
  ASSERT_FALSE(grants.ok());
  EXPECT_EQ(Message(grants.status()),
            absl::StrCat("g:1:9: ", Message(ValidateGrant(TextGrant(
                                        R"(kind: NETWORK host: "Example.com" port: 443)")))));
  // JSON and text format of one grant: at the document's start.
  grants = ParseGrantsFlag("\n  kind: MIGRATE vaults: \"b\" vaults: \"a\"", "g");
  ASSERT_FALSE(grants.ok());
  EXPECT_EQ(
      Message(grants.status()),
      absl::StrCat("g:2:3: ",
                   Message(ValidateGrant(TextGrant(R"(kind: MIGRATE vaults: "b" vaults: "a")")))));
}

TEST(ParseConstraints, SexprAndShorthand) {
  absl::StatusOr<Constraints> c = ParseConstraintsFlag(
      "max-runtime=86400, max-memory=1073741824,max-migrations=3,expires=-2,max-cpu-ms=1500", "c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_runtime_ms(), 86400000u);
  EXPECT_EQ(c->max_memory_bytes(), 1073741824u);
  EXPECT_EQ(c->max_migrations(), 3u);
  EXPECT_EQ(c->expires_unix_ms(), -2000);
  EXPECT_EQ(c->max_cpu_ms(), 1500u);
  EXPECT_FALSE(c->has_max_storage_bytes());

  std::string printed = ConstraintsToSexpr(*c);
  EXPECT_EQ(printed,
            "(constraints\n  (max-runtime 86400)\n  (max-memory 1073741824)\n  (max-cpu-ms 1500)\n"
            "  (max-migrations 3)\n  (expires -2))");
  absl::StatusOr<Constraints> again = ParseConstraintsFlag(printed, "printed");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*c, *again));

  again = ParseConstraintsFlag("{\"maxRuntimeMs\": \"86400000\"}", "c.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->max_runtime_ms(), 86400000u);
  again = ParseConstraintsFlag("max_runtime_ms: 5", "c.txtpb");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->max_runtime_ms(), 5u);
  again = ParseConstraintsFlag("(constraints)", "c");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(ConstraintsToSexpr(*again), "(constraints)");

  struct Case {
    const char* text;
    const char* error;
  } cases[] = {
      {"max-runtime=1,max-speed=2",
       "c:1:15: unknown constraint \"max-speed\"; expected max-runtime, max-runtime-ms, "
       "max-memory, "
       "max-storage, max-cpu, max-cpu-ms, max-open-files, max-processes, max-migrations, expires, "
       "expires-ms, max-steps, max-allocation"},
      {"max-runtime=1,max-runtime=2", "c:1:15: repeated max-runtime"},
      {"max-runtime=1,max-runtime-ms=2", "c:1:15: max-runtime-ms conflicts with max-runtime"},
      {"max-runtime=1,,max-cpu=2", "c:1:15: empty item; expected key=value"},
      {"max-runtime=1,max-cpu", "c:1:15: expected key=value, found \"max-cpu\""},
      {"max-runtime=1h", "c:1:13: max-runtime takes a decimal number, found \"1h\""},
      {"max-memory=-1", "c:1:12: -1 is negative"},
      {"max-processes=4294967296",
       "c:1:15: max-processes 4294967296 is out of range (at most "
       "4294967295)"},
      {"max-runtime=18446744073709552",
       "c:1:13: max-runtime of 18446744073709552 seconds overflows in milliseconds"},
      {"(constraints (max-memory (- 1 2)))", "c:1:26: (- ...) is negative"},
      {"(limits)", "c:1:1: expected (constraints ...), found (limits ...)"},
      {"max_runtime_ms: x", "c:1:17: Expected integer, got: x"},
  };
  for (const Case& k : cases) {
    absl::StatusOr<Constraints> got = ParseConstraintsFlag(k.text, "c");
    ASSERT_FALSE(got.ok()) << k.text;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Message(got.status()), k.error) << k.text;
  }
}

TEST(TextFormCli, DirectoryPathsLoseOnlyTheirTrailingSlash) {
  absl::StatusOr<std::vector<vault::v1::Grant>> g =
      ParseGrantsFlag("(read (path \"/vault/papers/\"))", "--grant");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(g->size(), 1u);
  EXPECT_EQ((*g)[0].path(), "/vault/papers");
  g = ParseGrantsFlag("write:/vault/out/", "--grant");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)[0].path(), "/vault/out");
  // Nothing else is repaired.
  EXPECT_EQ(ParseGrantsFlag("(read (path \"/vault//\"))", "--grant").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseGrantsFlag("(read (path \"/vault/../x/\"))", "--grant").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseGrantsFlag("(read (path \"/\"))", "--grant")->at(0).path(), "/");
}

TEST(TextFormCli, ASingleLimitIsAConstraintsForm) {
  absl::StatusOr<vault::v1::Constraints> c =
      ParseConstraintsFlag("(max-migrations 3)", "--constraints");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_migrations(), 3u);
  EXPECT_FALSE(c->has_max_memory_bytes());
  c = ParseConstraintsFlag("(max-runtime (* 24 3600))", "--constraints");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->max_runtime_ms(), 86400000u);
  EXPECT_EQ(ParseConstraintsFlag("(max-bananas 3)", "--constraints").status().message(),
            "--constraints:1:1: expected (constraints ...), found (max-bananas ...)");
}

}  // namespace
}  // namespace vault::vaultctl
