#include "capability/grant.h"

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

// Counts heap allocations, to check that Covers does not allocate. Not under sanitizers, which
// bring their own operator new.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define VAULT_GRANT_TEST_COUNTS_ALLOCATIONS 1
namespace {
thread_local long allocations = 0;
// Out of line, so that GCC does not see operator new's malloc meet a free in a caller.
[[gnu::noinline]] void Release(void* p) noexcept { std::free(p); }
}  // namespace
void* operator new(size_t n) {
  ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { Release(p); }
void operator delete[](void* p) noexcept { Release(p); }
void operator delete(void* p, size_t) noexcept { Release(p); }
void operator delete[](void* p, size_t) noexcept { Release(p); }
#endif

namespace vault::capability {
namespace {

using vault::v1::Constraints;
using vault::v1::Grant;

// --- Builders ----------------------------------------------------------------------------------

Grant Make(Grant::Kind kind) {
  Grant g;
  g.set_kind(kind);
  return g;
}
Grant Read(absl::string_view path) {
  Grant g = Make(Grant::READ);
  g.set_path(std::string(path));
  return g;
}
Grant ReadHash(char fill) {
  Grant g = Make(Grant::READ);
  g.set_hash(std::string(32, fill));
  return g;
}
Grant Write(absl::string_view path) {
  Grant g = Make(Grant::WRITE);
  g.set_path(std::string(path));
  return g;
}
Grant Net(absl::string_view host, uint32_t port) {
  Grant g = Make(Grant::NETWORK);
  g.set_host(std::string(host));
  g.set_port(port);
  return g;
}
Grant Send(absl::string_view agent) {
  Grant g = Make(Grant::SEND);
  g.set_agent(std::string(agent));
  return g;
}
Grant Receive(absl::string_view agent) {
  Grant g = Make(Grant::RECEIVE);
  g.set_agent(std::string(agent));
  return g;
}
// SEND or RECEIVE limited to message types (given in order, not sorted here).
Grant Typed(Grant g, std::initializer_list<const char*> types) {
  for (const char* t : types) g.add_message_types(t);
  return g;
}
Grant Migrate(std::initializer_list<const char*> vaults) {
  Grant g = Make(Grant::MIGRATE);
  for (const char* v : vaults) g.add_vaults(v);
  return g;
}

Grants List(std::initializer_list<Grant> grants) {
  Grants out;
  for (const Grant& g : grants) *out.Add() = g;
  return out;
}
Grants ToGrants(const std::vector<Grant>& v) {
  Grants out;
  for (const Grant& g : v) *out.Add() = g;
  return out;
}

std::vector<std::string> Strings(const std::vector<Grant>& v) {
  std::vector<std::string> out;
  for (const Grant& g : v) out.push_back(GrantToString(g));
  return out;
}

bool SameList(const std::vector<Grant>& a, const std::vector<Grant>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!google::protobuf::util::MessageDifferencer::Equals(a[i], b[i])) return false;
  }
  return true;
}

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kDenied = absl::StatusCode::kPermissionDenied;

// --- Paths -------------------------------------------------------------------------------------

TEST(ValidatePath, AcceptsNormalizedAbsolutePaths) {
  for (absl::string_view p : {"/", "/a", "/a/b-c_d.e", "/vault/pub/x/y", "/a/...", "/a/.b"}) {
    EXPECT_TRUE(ValidatePath(p).ok()) << p << ": " << ValidatePath(p);
  }
}

TEST(ValidatePath, RefusesEverythingElse) {
  const std::string nul("/a\0b", 4);
  const std::string long_path = "/" + std::string(4096, 'a');
  for (absl::string_view p :
       {absl::string_view(""), absl::string_view("a"), absl::string_view("/a/"),
        absl::string_view("//a"), absl::string_view("/a//b"), absl::string_view("/a/./b"),
        absl::string_view("/a/../b"), absl::string_view("/.."), absl::string_view("/."),
        absl::string_view("/a/.."), absl::string_view("/a/%2e%2e"), absl::string_view("/a\\b"),
        absl::string_view(nul), absl::string_view("/a b"), absl::string_view("/a\nb"),
        absl::string_view("/caf\xc3\xa9"), absl::string_view(long_path)}) {
    EXPECT_EQ(ValidatePath(p).code(), kInvalid) << absl::CHexEscape(p);
  }
}

TEST(ValidatePath, MessagesNameTheProblem) {
  EXPECT_EQ(ValidatePath("/a/").message(), "path \"/a/\" ends with '/'");
  EXPECT_EQ(ValidatePath("/a//b").message(), "path \"/a//b\" has an empty segment");
  EXPECT_EQ(ValidatePath("/a/../b").message(), "path \"/a/../b\" has a \"..\" segment");
  EXPECT_EQ(ValidatePath("/a/./b").message(), "path \"/a/./b\" has a \".\" segment");
  EXPECT_EQ(ValidatePath("a").message(), "path \"a\" is not absolute");
  EXPECT_EQ(ValidatePath("").message(), "path \"\" is empty");
  EXPECT_EQ(ValidatePath("/a/%2e%2e").message(), "path \"/a/%2e%2e\" contains '%'");
  EXPECT_EQ(ValidatePath("/a\\b").message(), "path \"/a\\\\b\" contains '\\'");
  EXPECT_EQ(ValidatePath(absl::string_view("/a\0b", 4)).message(),
            "path \"/a\\x00b\" contains a NUL byte");
}

TEST(PathCovers, WholeSegmentsOnly) {
  EXPECT_TRUE(PathCovers("/vault/pub", "/vault/pub"));
  EXPECT_TRUE(PathCovers("/vault/pub", "/vault/pub/x"));
  EXPECT_TRUE(PathCovers("/vault/pub", "/vault/pub/x/y"));
  EXPECT_FALSE(PathCovers("/vault/pub", "/vault/public"));
  EXPECT_FALSE(PathCovers("/vault/pub", "/vault"));
  EXPECT_FALSE(PathCovers("/vault/pub", "/vault/pu"));
  EXPECT_FALSE(PathCovers("/vault/pub", "/"));
}

TEST(PathCovers, RootCoversEverything) {
  for (absl::string_view p : {"/", "/a", "/vault/pub/x/y", "/..."}) {
    EXPECT_TRUE(PathCovers("/", p)) << p;
  }
}

TEST(GrantAttack, SiblingPathIsNotCovered) {
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read("/vault/public")));
  EXPECT_FALSE(Covers(Write("/vault/pub"), Write("/vault/pub-secret")));
  // '-' sorts before '/', so a sibling may sit between a path and its children.
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read("/vault/pub-x/y")));
}

TEST(GrantAttack, ParentOrSegmentPrefixIsNotCovered) {
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read("/vault")));
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read("/vault/pu")));
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read("/")));
}

TEST(GrantAttack, DotDotEscapeIsRefusedNotNormalized) {
  const Grant escape = Read("/vault/pub/../secret");
  EXPECT_FALSE(PathCovers("/vault/pub", "/vault/pub/../secret"));
  EXPECT_FALSE(Covers(Read("/vault/pub"), escape));
  EXPECT_FALSE(Covers(Read("/"), escape));
  EXPECT_EQ(ValidateGrant(escape).code(), kInvalid);
  absl::Status s = IsSubset(List({escape}), List({Read("/")}));
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(), "grant read /vault/pub/../secret is not within the parent's grants");
}

TEST(GrantAttack, PercentEncodedDotDotIsRefused) {
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read("/vault/pub/%2e%2e/secret")));
  EXPECT_EQ(ValidateGrant(Read("/vault/pub/%2e%2e")).code(), kInvalid);
}

TEST(GrantAttack, EmbeddedNulCannotTruncateAPath) {
  const std::string path("/vault/pub/\0/../../etc", 22);
  EXPECT_FALSE(PathCovers("/vault/pub", path));
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read(path)));
  EXPECT_EQ(ValidateGrant(Read(path)).code(), kInvalid);
}

TEST(GrantAttack, BackslashSeparatorIsRefused) {
  EXPECT_FALSE(Covers(Read("/vault/pub"), Read("/vault/pub/..\\..\\secret")));
  EXPECT_EQ(ValidateGrant(Write("/vault\\pub")).code(), kInvalid);
}

TEST(GrantAttack, MalformedParentCoversNothing) {
  // An empty path is a prefix of every path; a fail-open check would let it cover "/secret".
  EXPECT_FALSE(PathCovers("", "/secret"));
  EXPECT_FALSE(Covers(Read(""), Read("/secret")));
  EXPECT_FALSE(Covers(Read("/vault/"), Read("/vault//x")));
  EXPECT_EQ(IsSubset(List({Read("/secret")}), List({Read("")})).code(), kDenied);
  EXPECT_TRUE(Intersect(List({Read("")}), List({Read("/secret")})).empty());
  Grant out;
  EXPECT_FALSE(IntersectOne(Read(""), Read("/secret"), &out));
  EXPECT_FALSE(HostCovers("*.", "a.example.com"));
  EXPECT_FALSE(HostCovers("*.com", "evil.com"));
}

// --- Hosts -------------------------------------------------------------------------------------

TEST(ValidateHost, AcceptsDnsNamesAndWildcards) {
  const std::string label63(63, 'a');
  for (absl::string_view h : {"example.com", "a.example.com", "*.example.com", "*.a.example.com",
                              "localhost", "xn--bcher-kva.example", "a-b.c0.io", "10.0.0.1"}) {
    EXPECT_TRUE(ValidateHost(h).ok()) << h << ": " << ValidateHost(h);
  }
  EXPECT_TRUE(ValidateHost(label63 + ".com").ok());
}

TEST(ValidateHost, RefusesEverythingElse) {
  const std::string label64 = std::string(64, 'a') + ".com";
  const std::string l63(63, 'a');
  const std::string long_host = l63 + "." + l63 + "." + l63 + "." + l63;  // 255
  for (absl::string_view h :
       {absl::string_view(""), absl::string_view("Example.com"), absl::string_view("example.com."),
        absl::string_view("*example.com"), absl::string_view("a.*.com"), absl::string_view("*"),
        absl::string_view("*.*.com"), absl::string_view("*.com"), absl::string_view("-a.com"),
        absl::string_view("a-.com"), absl::string_view("a..com"), absl::string_view(".a.com"),
        absl::string_view("exa mple.com"), absl::string_view("ex\xc3\xa4mple.com"),
        absl::string_view("a_b.com"), absl::string_view("a.com:443"), absl::string_view(label64),
        absl::string_view(long_host)}) {
    EXPECT_EQ(ValidateHost(h).code(), kInvalid) << absl::CHexEscape(h);
  }
}

TEST(ValidateHost, MessagesNameTheProblem) {
  EXPECT_EQ(ValidateHost("Example.com").message(), "host \"Example.com\" is not lowercase");
  EXPECT_EQ(ValidateHost("example.com.").message(), "host \"example.com.\" ends with '.'");
  EXPECT_EQ(ValidateHost("*.com").message(),
            "host \"*.com\" is a wildcard over a single label (a whole top-level domain)");
  EXPECT_EQ(ValidateHost("-a.com").message(),
            "host \"-a.com\" has a label starting or ending with '-'");
}

TEST(HostCovers, ExactAndWildcard) {
  EXPECT_TRUE(HostCovers("api.example.com", "api.example.com"));
  EXPECT_FALSE(HostCovers("api.example.com", "b.api.example.com"));
  EXPECT_TRUE(HostCovers("*.example.com", "a.example.com"));
  EXPECT_TRUE(HostCovers("*.example.com", "b.a.example.com"));
  EXPECT_TRUE(HostCovers("*.example.com", "*.a.example.com"));
  EXPECT_TRUE(HostCovers("*.example.com", "*.example.com"));
  EXPECT_FALSE(HostCovers("*.a.example.com", "*.example.com"));
  EXPECT_FALSE(HostCovers("a.example.com", "*.a.example.com"));
}

TEST(GrantAttack, WildcardDoesNotCoverItsApex) {
  EXPECT_FALSE(HostCovers("*.example.com", "example.com"));
}

TEST(GrantAttack, WildcardSuffixWithoutDotIsNotCovered) {
  EXPECT_FALSE(HostCovers("*.example.com", "xexample.com"));
  EXPECT_FALSE(HostCovers("*.example.com", "a.xexample.com"));
}

TEST(GrantAttack, TrustedNameAsPrefixOfAttackerDomainIsNotCovered) {
  EXPECT_FALSE(HostCovers("*.example.com", "example.com.evil.net"));
  EXPECT_FALSE(HostCovers("*.example.com", "a.example.com.evil.net"));
  EXPECT_FALSE(HostCovers("*.example.com", "a.example.co"));
  EXPECT_FALSE(HostCovers("example.com", "example.com.evil.net"));
}

TEST(GrantAttack, CaseOrTrailingDotSpellingIsRefusedNotFolded) {
  EXPECT_FALSE(HostCovers("*.example.com", "A.example.com"));
  EXPECT_FALSE(HostCovers("example.com", "example.com."));
  EXPECT_FALSE(Covers(Net("*.example.com", 0), Net("a.Example.com", 443)));
  EXPECT_EQ(ValidateGrant(Net("a.example.com.", 443)).code(), kInvalid);
}

TEST(GrantAttack, WildcardOverTopLevelDomainIsRefused) {
  // "*.com" would cover every .com host; a single-label wildcard is refused outright.
  EXPECT_EQ(ValidateHost("*.com").code(), kInvalid);
  EXPECT_EQ(ValidateGrant(Net("*.com", 443)).code(), kInvalid);
  EXPECT_FALSE(Covers(Net("*.com", 0), Net("evil.com", 443)));
}

TEST(GrantAttack, NumericHostAliasesAreRefused) {
  // Other spellings of 127.0.0.1 that inet_aton would accept; one address has one spelling.
  for (absl::string_view h : {"2130706433", "0177.0.0.1", "127.1", "127.0.0.01", "256.0.0.1",
                              "1.2.3.4.5", "0x7f.0.0.1", "*.0.0.1", "*.1.2.3.4"}) {
    EXPECT_EQ(ValidateHost(h).code(), kInvalid) << h;
  }
  EXPECT_TRUE(ValidateHost("127.0.0.1").ok());
  EXPECT_TRUE(ValidateHost("*.1.example").ok());
}

TEST(GrantAttack, OverlongLabelOrNameIsRefused) {
  const std::string l63(63, 'a');
  EXPECT_EQ(ValidateHost(std::string(64, 'a') + ".com").code(), kInvalid);
  EXPECT_EQ(ValidateHost(l63 + "." + l63 + "." + l63 + "." + l63).code(), kInvalid);
  EXPECT_TRUE(ValidateHost(l63 + "." + l63 + "." + l63 + "." + std::string(61, 'a')).ok());
}

// --- Ports -------------------------------------------------------------------------------------

TEST(NetworkCovers, PortZeroIsAnyPort) {
  EXPECT_TRUE(Covers(Net("api.example.com", 0), Net("api.example.com", 443)));
  EXPECT_TRUE(Covers(Net("api.example.com", 0), Net("api.example.com", 0)));
  EXPECT_TRUE(Covers(Net("api.example.com", 443), Net("api.example.com", 443)));
  EXPECT_TRUE(Covers(Net("*.example.com", 443), Net("api.example.com", 443)));
}

TEST(GrantAttack, SpecificPortDoesNotCoverAnyOrOtherPort) {
  EXPECT_FALSE(Covers(Net("api.example.com", 443), Net("api.example.com", 0)));
  EXPECT_FALSE(Covers(Net("api.example.com", 443), Net("api.example.com", 80)));
}

TEST(GrantAttack, PortAbove65535IsRefused) {
  // 65979 would truncate to 443 in a uint16_t.
  EXPECT_EQ(ValidateGrant(Net("api.example.com", 65536 + 443)).code(), kInvalid);
  EXPECT_FALSE(Covers(Net("api.example.com", 0), Net("api.example.com", 65536 + 443)));
  EXPECT_TRUE(ValidateGrant(Net("api.example.com", 65535)).ok());
}

// --- Agents, vaults, hashes, kinds -------------------------------------------------------------

TEST(AgentCovers, StarCoversEveryId) {
  EXPECT_TRUE(Covers(Send("*"), Send("agent-7")));
  EXPECT_TRUE(Covers(Send("*"), Send("*")));
  EXPECT_TRUE(Covers(Receive("*"), Receive("a.b_C-9")));
  EXPECT_TRUE(Covers(Send("agent-7"), Send("agent-7")));
  EXPECT_FALSE(Covers(Send("agent-7"), Send("agent-8")));
  EXPECT_FALSE(Covers(Send("*"), Receive("agent-7")));
  EXPECT_FALSE(Covers(Receive("*"), Send("agent-7")));
}

TEST(GrantAttack, NamedAgentDoesNotCoverAnyAgent) {
  EXPECT_FALSE(Covers(Send("agent-7"), Send("*")));
  EXPECT_FALSE(Covers(Receive("agent-7"), Receive("*")));
}

TEST(GrantAttack, MalformedAgentIdIsRefused) {
  for (absl::string_view a : {"", "**", "a*", "a b", "a/b", "a:b", "\xc3\xa4"}) {
    EXPECT_EQ(ValidateGrant(Send(a)).code(), kInvalid) << a;
  }
  EXPECT_EQ(ValidateGrant(Send(std::string(129, 'a'))).code(), kInvalid);
  EXPECT_TRUE(ValidateGrant(Send(std::string(128, 'a'))).ok());
}

// --- Message types ---------------------------------------------------------------------------

TEST(ValidateMessageType, TheRuleOfAMessagesType) {
  for (absl::string_view t :
       {"ping", "a", "price.v2", "x_y-z", "0", "vault.answer", "vaultx", "my.vault.query"}) {
    EXPECT_TRUE(ValidateMessageType(t).ok()) << t << ": " << ValidateMessageType(t);
  }
  const std::string long_type(65, 'a');
  for (absl::string_view t :
       {absl::string_view(""), absl::string_view("Ping"), absl::string_view("a b"),
        absl::string_view("a/b"), absl::string_view("a:b"), absl::string_view("*"),
        absl::string_view("caf\xc3\xa9"), absl::string_view(long_type),
        absl::string_view("vault.query"), absl::string_view("vault.")}) {
    EXPECT_EQ(ValidateMessageType(t).code(), kInvalid) << t;
  }
  EXPECT_TRUE(ValidateMessageType(std::string(64, 'a')).ok());
  EXPECT_EQ(ValidateMessageType("vault.query").message(),
            "message type \"vault.query\" is reserved for the vault");
  EXPECT_EQ(ValidateMessageType("Ping").message(),
            "message type \"Ping\" must be 1-64 of [a-z0-9._-]");
}

TEST(ValidateGrant, MessageTypesOnSendAndReceive) {
  EXPECT_TRUE(ValidateGrant(Typed(Send("a-7"), {"ping"})).ok());
  EXPECT_TRUE(ValidateGrant(Typed(Send("*"), {"ping", "stop"})).ok());
  EXPECT_TRUE(ValidateGrant(Typed(Receive("*"), {"stop", "vault.answer"})).ok());
  EXPECT_TRUE(ValidateGrant(Send("a-7")).ok());  // no types: any type
}

TEST(GrantAttack, MessageTypesOnOtherKindsAreRefused) {
  for (Grant g :
       {Read("/a"), ReadHash('a'), Write("/a"), Make(Grant::CAS_READ), Make(Grant::CAS_WRITE),
        Make(Grant::SPAWN), Net("a.example.com", 0), Migrate({"vault-b"})}) {
    g.add_message_types("ping");
    absl::Status s = ValidateGrant(g);
    EXPECT_EQ(s.code(), kInvalid) << GrantToString(g);
    EXPECT_THAT(
        std::string(s.message()),
        testing::EndsWith(": may not have message_types (only send and receive grants have them)"));
    EXPECT_FALSE(Covers(g, g));
  }
  Grant read = Read("/a");
  read.add_message_types("ping");
  EXPECT_EQ(ValidateGrant(read).message(),
            "grant read /a [message_types ping]: may not have message_types (only send and "
            "receive grants have them)");
}

TEST(GrantAttack, MalformedMessageTypesAreRefused) {
  absl::Status bad = ValidateGrant(Typed(Send("a-7"), {"Ping"}));
  EXPECT_EQ(bad.code(), kInvalid);
  EXPECT_EQ(bad.message(),
            "grant send a-7 types=Ping: message type \"Ping\" must be 1-64 of [a-z0-9._-]");
  EXPECT_EQ(ValidateGrant(Typed(Receive("*"), {"vault.query"})).message(),
            "grant receive * types=vault.query: message type \"vault.query\" is reserved for the "
            "vault");
  for (const char* t : {"", "a b", "a,b", "*", "x=y"}) {
    EXPECT_EQ(ValidateGrant(Typed(Send("*"), {t})).code(), kInvalid) << t;
  }
  EXPECT_EQ(ValidateGrant(Typed(Send("*"), {std::string(65, 'a').c_str()})).code(), kInvalid);
  EXPECT_TRUE(ValidateGrant(Typed(Send("*"), {std::string(64, 'a').c_str()})).ok());
  absl::Status unsorted = ValidateGrant(Typed(Send("a-7"), {"stop", "ping"}));
  EXPECT_EQ(unsorted.code(), kInvalid);
  EXPECT_EQ(unsorted.message(), "grant send a-7 types=stop,ping: message types are not sorted");
  absl::Status twice = ValidateGrant(Typed(Send("a-7"), {"ping", "ping"}));
  EXPECT_EQ(twice.message(), "grant send a-7 types=ping,ping: names a message type twice");
  // Neither may slip through the merge-walk subset check.
  EXPECT_FALSE(Covers(Typed(Send("*"), {"ping", "stop"}), Typed(Send("*"), {"stop", "ping"})));
  Grant many = Send("*");
  for (int i = 0; i < 257; ++i) many.add_message_types(absl::StrCat("t", 1000 + i));
  EXPECT_EQ(ValidateGrant(many).code(), kInvalid);
  many.mutable_message_types()->RemoveLast();
  EXPECT_TRUE(ValidateGrant(many).ok());
}

TEST(MessageTypeCovers, NoTypesIsAnyTypeAndListsBySubset) {
  // The agent part as before, and: the parent has no types, or the child's are a subset.
  EXPECT_TRUE(Covers(Send("*"), Typed(Send("a-7"), {"ping"})));
  EXPECT_TRUE(Covers(Send("a-7"), Typed(Send("a-7"), {"ping", "stop"})));
  EXPECT_TRUE(Covers(Typed(Send("a-7"), {"ping"}), Typed(Send("a-7"), {"ping"})));
  EXPECT_TRUE(Covers(Typed(Send("*"), {"ping", "stop"}), Typed(Send("a-7"), {"stop"})));
  EXPECT_TRUE(Covers(Typed(Receive("*"), {"a", "b", "c"}), Typed(Receive("x"), {"a", "c"})));
  EXPECT_FALSE(Covers(Typed(Send("a-7"), {"ping"}), Typed(Send("a-7"), {"stop"})));
  EXPECT_FALSE(Covers(Typed(Send("a-8"), {"ping"}), Typed(Send("a-7"), {"ping"})));
  EXPECT_FALSE(Covers(Typed(Send("*"), {"ping"}), Typed(Receive("a-7"), {"ping"})));
}

TEST(GrantAttack, TypedGrantDoesNotCoverAnyTypeOrMoreTypes) {
  EXPECT_FALSE(Covers(Typed(Send("*"), {"ping"}), Send("a-7")));
  EXPECT_FALSE(Covers(Typed(Send("a-7"), {"ping"}), Send("a-7")));
  EXPECT_FALSE(Covers(Typed(Receive("*"), {"ping", "stop"}), Receive("*")));
  EXPECT_FALSE(Covers(Typed(Send("a-7"), {"ping"}), Typed(Send("a-7"), {"ping", "stop"})));
  EXPECT_TRUE(IsSubset(List({Typed(Send("a-7"), {"ping"})}), List({Send("*")})).ok());
  absl::Status s = IsSubset(List({Send("a-7")}), List({Typed(Send("*"), {"ping"})}));
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(), "grant send a-7 is not within the parent's grants");
  // Two typed grants are not one grant with both types (as for migrate).
  EXPECT_EQ(IsSubset(List({Typed(Send("a-7"), {"ping", "stop"})}),
                     List({Typed(Send("a-7"), {"ping"}), Typed(Send("a-7"), {"stop"})}))
                .code(),
            kDenied);
}

TEST(MigrateCovers, SubsetOfVaults) {
  EXPECT_TRUE(Covers(Migrate({"vault-b", "vault-c"}), Migrate({"vault-b", "vault-c"})));
  EXPECT_TRUE(Covers(Migrate({"vault-b", "vault-c"}), Migrate({"vault-c"})));
  EXPECT_TRUE(Covers(Migrate({"a", "b", "c"}), Migrate({"a", "c"})));
  EXPECT_FALSE(Covers(Migrate({"vault-b"}), Migrate({"vault-c"})));
}

TEST(GrantAttack, MigrateSupersetIsNotCovered) {
  EXPECT_FALSE(Covers(Migrate({"vault-b"}), Migrate({"vault-b", "vault-c"})));
  EXPECT_FALSE(Covers(Migrate({"vault-b", "vault-c"}), Migrate({"vault-a", "vault-b"})));
}

TEST(GrantAttack, UnsortedOrDuplicateVaultsAreRefused) {
  absl::Status unsorted = ValidateGrant(Migrate({"vault-c", "vault-b"}));
  EXPECT_EQ(unsorted.code(), kInvalid);
  EXPECT_EQ(unsorted.message(), "grant migrate vault-c vault-b: vaults are not sorted");
  absl::Status duplicate = ValidateGrant(Migrate({"vault-b", "vault-b"}));
  EXPECT_EQ(duplicate.code(), kInvalid);
  EXPECT_EQ(duplicate.message(), "grant migrate vault-b vault-b: names a vault twice");
  // An unsorted set must not slip through the merge-walk subset check either.
  EXPECT_FALSE(Covers(Migrate({"a", "b"}), Migrate({"b", "a"})));
}

TEST(GrantAttack, MalformedVaultNameIsRefused) {
  for (const char* v : {"", "-a", "a-", "A", "a_b", "a.b", "a/b"}) {
    EXPECT_EQ(ValidateGrant(Migrate({v})).code(), kInvalid) << v;
  }
  EXPECT_EQ(ValidateGrant(Migrate({std::string(64, 'a').c_str()})).code(), kInvalid);
  EXPECT_TRUE(ValidateGrant(Migrate({std::string(63, 'a').c_str()})).ok());
  EXPECT_EQ(ValidateGrant(Migrate({})).message(), "grant migrate: needs at least one vault");
}

TEST(ReadHash, CoveredBySameHashOrCasRead) {
  EXPECT_TRUE(Covers(ReadHash('a'), ReadHash('a')));
  EXPECT_TRUE(Covers(Make(Grant::CAS_READ), ReadHash('a')));
}

TEST(GrantAttack, ReadPathOrOtherHashDoesNotCoverHash) {
  EXPECT_FALSE(Covers(Read("/"), ReadHash('a')));
  EXPECT_FALSE(Covers(ReadHash('b'), ReadHash('a')));
  EXPECT_FALSE(Covers(ReadHash('a'), Read("/a")));
  EXPECT_FALSE(Covers(Make(Grant::CAS_READ), Read("/a")));
  EXPECT_FALSE(Covers(ReadHash('a'), Make(Grant::CAS_READ)));
}

TEST(GrantAttack, KindsNeverCross) {
  EXPECT_FALSE(Covers(Write("/x"), Read("/x")));
  EXPECT_FALSE(Covers(Read("/"), Write("/a")));
  EXPECT_FALSE(Covers(Make(Grant::CAS_WRITE), Make(Grant::CAS_READ)));
  EXPECT_FALSE(Covers(Make(Grant::CAS_READ), Make(Grant::CAS_WRITE)));
  EXPECT_FALSE(Covers(Write("/"), Make(Grant::CAS_WRITE)));
  EXPECT_FALSE(Covers(Send("*"), Make(Grant::SPAWN)));
  EXPECT_TRUE(Covers(Make(Grant::SPAWN), Make(Grant::SPAWN)));
  EXPECT_TRUE(Covers(Make(Grant::CAS_WRITE), Make(Grant::CAS_WRITE)));
}

TEST(ValidateGrant, AcceptsEachWellFormedKind) {
  for (const Grant& g :
       {Read("/a"), ReadHash('x'), Write("/"), Make(Grant::CAS_READ), Make(Grant::CAS_WRITE),
        Make(Grant::SPAWN), Net("*.example.com", 443), Net("api.example.com", 0), Send("*"),
        Receive("agent-7"), Migrate({"vault-b", "vault-c"})}) {
    EXPECT_TRUE(ValidateGrant(g).ok()) << ValidateGrant(g);
  }
}

TEST(GrantAttack, UnspecifiedOrUnknownKindIsRefused) {
  EXPECT_EQ(ValidateGrant(Make(Grant::KIND_UNSPECIFIED)).code(), kInvalid);
  Grant unknown = Make(static_cast<Grant::Kind>(42));
  absl::Status s = ValidateGrant(unknown);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_EQ(s.message(), "grant kind(42): has no valid kind");
  EXPECT_FALSE(Covers(unknown, unknown));
}

TEST(GrantAttack, StrayScopeFieldIsRefused) {
  Grant g = Read("/a");
  g.set_host("evil.com");
  absl::Status s = ValidateGrant(g);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_EQ(s.message(), "grant read /a [host evil.com]: may not have a host");

  Grant spawn = Make(Grant::SPAWN);
  spawn.set_path("/");
  EXPECT_EQ(ValidateGrant(spawn).code(), kInvalid);
  Grant cas = Make(Grant::CAS_READ);
  cas.set_port(1);
  EXPECT_EQ(ValidateGrant(cas).code(), kInvalid);
  Grant send = Send("*");
  send.add_vaults("v");
  EXPECT_EQ(ValidateGrant(send).code(), kInvalid);
  EXPECT_FALSE(Covers(Read("/"), g));
}

TEST(GrantAttack, UrlBesideAnotherScopeOrOnAnotherKindIsRefused) {
  Grant read = Read("/a");
  read.set_url("https://x.org:443/*");
  EXPECT_EQ(ValidateGrant(read).message(),
            "grant read /a https://x.org:443/*: needs exactly one of a path, a hash and a url");
  Grant write = Make(Grant::WRITE);
  write.set_path("/a");
  write.set_url("https://x.org:443/*");
  EXPECT_EQ(ValidateGrant(write).message(),
            "grant write /a https://x.org:443/*: needs exactly one of a path and a url");
  Grant cas = Make(Grant::CAS_READ);
  cas.set_url("https://x.org:443/*");
  EXPECT_EQ(ValidateGrant(cas).message(),
            "grant cas-read [url https://x.org:443/*]: may not have a url");
  // Not canonical: no port, upper case, a wildcard in the middle. Never repaired.
  for (const char* url : {"https://x.org/a", "HTTPS://x.org:443/a", "https://x.org:443/a*b",
                          "https://x.org:0443/a", "https://x.org:443", "file://x.org:1/a"}) {
    Grant g = Make(Grant::READ);
    g.set_url(url);
    EXPECT_EQ(ValidateGrant(g).code(), kInvalid) << url;
    EXPECT_FALSE(Covers(g, g)) << url;
  }
}

TEST(GrantAttack, ReadWithBothOrNeitherScopeIsRefused) {
  Grant both = ReadHash('a');
  both.set_path("/a");
  EXPECT_EQ(ValidateGrant(both).message(),
            "grant read /a sha256:6161616161616161616161616161616161616161616161616161616161616161"
            ": needs exactly one of a path, a hash and a url");
  EXPECT_EQ(ValidateGrant(Make(Grant::READ)).code(), kInvalid);
  Grant short_hash = Make(Grant::READ);
  short_hash.set_hash("abc");
  EXPECT_EQ(ValidateGrant(short_hash).code(), kInvalid);
  EXPECT_FALSE(Covers(Make(Grant::CAS_READ), short_hash));
}

TEST(GrantAttack, UnknownFieldsAreRefused) {
  // A future field might narrow the grant; ignoring it would widen it.
  Grant g = Read("/a");
  g.GetReflection()->MutableUnknownFields(&g)->AddVarint(99, 1);
  EXPECT_EQ(ValidateGrant(g).code(), kInvalid);
  EXPECT_FALSE(Covers(Read("/"), g));
}

TEST(GrantAttack, TooManyGrantsAreRefused) {
  Grants many;
  for (int i = 0; i < 257; ++i) *many.Add() = Read(absl::StrCat("/p", i));
  absl::Status s = ValidateGrants(many);
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_EQ(s.message(), "257 grants; at most 256 are allowed");
  many.RemoveLast();
  EXPECT_TRUE(ValidateGrants(many).ok());
}

TEST(GrantAttack, HostileValueCannotForgeALogLine) {
  const std::string s = GrantToString(Read("/a\n[audit] granted write /"));
  EXPECT_EQ(s.find('\n'), std::string::npos);
  EXPECT_EQ(s, "read /a\\x0a[audit] granted write /");
  EXPECT_EQ(GrantToString(Send(absl::string_view("a\0b", 3))), "send a\\x00b");
}

TEST(ValidateGrants, ReportsTheFirstBadGrant) {
  absl::Status s = ValidateGrants(List({Read("/a"), Write("/b/"), Read("c")}));
  EXPECT_EQ(s.code(), kInvalid);
  EXPECT_EQ(s.message(), "grant write /b/: path \"/b/\" ends with '/'");
}

TEST(Covers, DoesNotAllocate) {
#ifdef VAULT_GRANT_TEST_COUNTS_ALLOCATIONS
  const std::vector<std::pair<Grant, Grant>> cases = {
      {Read("/vault/pub"), Read("/vault/pub/a/long/enough/path/to/defeat/small/string/opt")},
      {Read("/vault/pub"), Read("/vault/public/a/long/enough/path/to/defeat/small/string")},
      {Write("/"), Write("/a/b")},
      {Make(Grant::CAS_READ), ReadHash('a')},
      {Net("*.example.com", 0), Net("a-rather-long-host-name.example.com", 443)},
      {Send("*"), Send("agent-with-a-long-enough-identifier-0123456789")},
      {Migrate({"vault-a", "vault-b", "vault-c"}), Migrate({"vault-b", "vault-c"})},
      {Read("/vault/pub"), Read("/vault/pub/../secret/with/a/long/enough/path")},
      {Net("api.example.com", 0), Net("api.example.com", 65536 + 443)},
      {Migrate({"vault-a"}), Migrate({"vault-b", "vault-a"})},
      {Typed(Send("*"), {"a-long-enough-type-name", "ping", "stop"}),
       Typed(Send("agent-7"), {"a-long-enough-type-name", "stop"})},
      {Typed(Send("*"), {"ping"}), Send("agent-7")}};
  // Warm up: the first reflection call builds protobuf's descriptors (once per process).
  for (const auto& [parent, child] : cases) (void)Covers(parent, child);
  const long before = allocations;
  int covered = 0;
  for (int i = 0; i < 100; ++i) {
    for (const auto& [parent, child] : cases) covered += Covers(parent, child) ? 1 : 0;
  }
  EXPECT_EQ(allocations - before, 0);
  EXPECT_EQ(covered, 700);
  EXPECT_TRUE(PathCovers("/vault/pub", "/vault/pub/a/long/enough/path/to/defeat/sso"));
  EXPECT_TRUE(HostCovers("*.example.com", "a-rather-long-host-name.example.com"));
  EXPECT_EQ(allocations - before, 0);
#else
  GTEST_SKIP() << "allocation counting is off under sanitizers";
#endif
}

// --- GrantToString -----------------------------------------------------------------------------

TEST(GrantToString, HeaderForms) {
  EXPECT_EQ(GrantToString(Read("/vault/pub")), "read /vault/pub");
  Grant h = Make(Grant::READ);
  h.set_hash(std::string("\x01\xab", 2) + std::string(30, '\0'));
  EXPECT_EQ(GrantToString(h),
            "read sha256:01ab000000000000000000000000000000000000000000000000000000000000");
  EXPECT_EQ(GrantToString(Write("/x")), "write /x");
  EXPECT_EQ(GrantToString(Make(Grant::CAS_READ)), "cas-read");
  EXPECT_EQ(GrantToString(Make(Grant::CAS_WRITE)), "cas-write");
  EXPECT_EQ(GrantToString(Make(Grant::SPAWN)), "spawn");
  EXPECT_EQ(GrantToString(Net("*.example.com", 443)), "network *.example.com:443");
  EXPECT_EQ(GrantToString(Net("api.example.com", 0)), "network api.example.com:*");
  EXPECT_EQ(GrantToString(Send("agent-7")), "send agent-7");
  EXPECT_EQ(GrantToString(Receive("*")), "receive *");
  EXPECT_EQ(GrantToString(Migrate({"vault-b", "vault-c"})), "migrate vault-b vault-c");
  EXPECT_EQ(GrantToString(Make(Grant::KIND_UNSPECIFIED)), "kind(0)");
  EXPECT_EQ(GrantToString(Typed(Send("agent-x"), {"ping", "stop"})),
            "send agent-x types=ping,stop");
  EXPECT_EQ(GrantToString(Typed(Receive("*"), {"ping"})), "receive * types=ping");
  Grant migrate = Migrate({"vault-b"});
  migrate.add_message_types("ping");
  EXPECT_EQ(GrantToString(migrate), "migrate vault-b [message_types ping]");
  EXPECT_EQ(GrantToString(Typed(Send("a"), {"x\ny"})), "send a types=x\\x0ay");
}

// --- IsSubset ----------------------------------------------------------------------------------

TEST(IsSubset, EveryChildGrantCovered) {
  const Grants parent = List({Read("/vault/pub"), Write("/vault/pub/out"), Net("*.example.com", 0),
                              Send("*"), Migrate({"vault-b", "vault-c"}), Make(Grant::CAS_READ)});
  EXPECT_TRUE(IsSubset(List({}), parent).ok());
  EXPECT_TRUE(IsSubset(List({}), List({})).ok());
  EXPECT_TRUE(IsSubset(parent, parent).ok());
  EXPECT_TRUE(
      IsSubset(List({Read("/vault/pub/x"), Write("/vault/pub/out/y"), Net("api.example.com", 443),
                     Send("agent-7"), Migrate({"vault-c"}), ReadHash('z')}),
               parent)
          .ok());
}

TEST(IsSubset, DeniedNamesTheFirstUncoveredGrant) {
  const Grants parent = List({Read("/vault/pub"), Write("/vault/pub")});
  absl::Status s =
      IsSubset(List({Read("/vault/pub/a"), Write("/vault/public"), Write("/other")}), parent);
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(), "grant write /vault/public is not within the parent's grants");

  s = IsSubset(List({Net("api.example.com", 0)}), List({Net("*.example.com", 443)}));
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(), "grant network api.example.com:* is not within the parent's grants");

  s = IsSubset(List({Read("/a")}), List({}));
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(), "grant read /a is not within the parent's grants");
}

// --- Constraints -------------------------------------------------------------------------------

TEST(ConstraintsSubset, AbsentIsUnlimited) {
  Constraints none;
  Constraints some;
  some.set_max_memory_bytes(1024);
  some.set_expires_unix_ms(100);
  EXPECT_TRUE(ConstraintsSubset(none, none).ok());
  EXPECT_TRUE(ConstraintsSubset(some, none).ok());
  EXPECT_TRUE(ConstraintsSubset(some, some).ok());
  Constraints smaller = some;
  smaller.set_max_memory_bytes(1000);
  smaller.set_expires_unix_ms(99);
  smaller.set_max_processes(2);
  EXPECT_TRUE(ConstraintsSubset(smaller, some).ok());
}

TEST(GrantAttack, DroppingAParentLimitIsDenied) {
  Constraints parent;
  parent.set_max_runtime_ms(1000);
  absl::Status s = ConstraintsSubset(Constraints(), parent);
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(), "constraint max_runtime_ms: the parent's is 1000 but the child has none");
}

TEST(GrantAttack, RaisingALimitIsDenied) {
  Constraints parent;
  parent.set_max_memory_bytes(1024);
  parent.set_max_open_files(10);
  Constraints child = parent;
  child.set_max_open_files(11);
  absl::Status s = ConstraintsSubset(child, parent);
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(),
            "constraint max_open_files: the child's 11 is larger than the parent's 10");
  child = parent;
  child.set_max_memory_bytes(2048);
  child.set_max_open_files(11);
  EXPECT_EQ(ConstraintsSubset(child, parent).message(),
            "constraint max_memory_bytes: the child's 2048 is larger than the parent's 1024");
  for (auto set : {+[](Constraints* c) { c->set_max_storage_bytes(2); },
                   +[](Constraints* c) { c->set_max_cpu_ms(2); },
                   +[](Constraints* c) { c->set_max_processes(2); },
                   +[](Constraints* c) { c->set_max_migrations(2); }}) {
    Constraints p;
    Constraints c;
    set(&p);
    set(&c);
    EXPECT_TRUE(ConstraintsSubset(c, p).ok());
    EXPECT_EQ(ConstraintsSubset(Constraints(), p).code(), kDenied);
    EXPECT_TRUE(ConstraintsSubset(p, Constraints()).ok());
  }
}

TEST(GrantAttack, LaterExpiryIsDenied) {
  Constraints parent;
  parent.set_expires_unix_ms(100);
  Constraints child;
  child.set_expires_unix_ms(200);
  absl::Status s = ConstraintsSubset(child, parent);
  EXPECT_EQ(s.code(), kDenied);
  EXPECT_EQ(s.message(),
            "constraint expires_unix_ms: the child's 200 is later than the parent's 100");
  EXPECT_EQ(ConstraintsSubset(Constraints(), parent).code(), kDenied);
  child.set_expires_unix_ms(100);
  EXPECT_TRUE(ConstraintsSubset(child, parent).ok());
}

TEST(IntersectConstraints, TighterOfEach) {
  Constraints a;
  a.set_max_runtime_ms(10);
  a.set_max_memory_bytes(500);
  a.set_expires_unix_ms(-5);
  a.set_max_migrations(3);
  Constraints b;
  b.set_max_runtime_ms(20);
  b.set_max_memory_bytes(100);
  b.set_max_open_files(7);
  b.set_expires_unix_ms(50);
  const Constraints c = IntersectConstraints(a, b);
  EXPECT_EQ(c.max_runtime_ms(), 10u);
  EXPECT_EQ(c.max_memory_bytes(), 100u);
  EXPECT_EQ(c.max_open_files(), 7u);
  EXPECT_EQ(c.max_migrations(), 3u);
  EXPECT_EQ(c.expires_unix_ms(), -5);
  EXPECT_FALSE(c.has_max_storage_bytes());
  EXPECT_FALSE(c.has_max_cpu_ms());
  EXPECT_FALSE(c.has_max_processes());
  EXPECT_TRUE(ConstraintsSubset(c, a).ok());
  EXPECT_TRUE(ConstraintsSubset(c, b).ok());
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(c, IntersectConstraints(b, a)));
  EXPECT_FALSE(IntersectConstraints(Constraints(), Constraints()).has_max_runtime_ms());
}

// --- Intersect ---------------------------------------------------------------------------------

std::vector<std::string> IntersectStrings(const Grants& a, const Grants& b) {
  return Strings(Intersect(a, b));
}

TEST(IntersectOne, PerKind) {
  Grant out;
  ASSERT_TRUE(IntersectOne(Read("/a"), Read("/a/b"), &out));
  EXPECT_EQ(GrantToString(out), "read /a/b");
  ASSERT_TRUE(IntersectOne(Net("*.example.com", 0), Net("*.a.example.com", 443), &out));
  EXPECT_EQ(GrantToString(out), "network *.a.example.com:443");
  ASSERT_TRUE(IntersectOne(ReadHash('a'), Make(Grant::CAS_READ), &out));
  EXPECT_EQ(GrantToString(out), GrantToString(ReadHash('a')));
  ASSERT_TRUE(IntersectOne(Send("*"), Send("agent-7"), &out));
  EXPECT_EQ(GrantToString(out), "send agent-7");
  out = Read("/unchanged");
  EXPECT_FALSE(IntersectOne(Read("/a"), Read("/b"), &out));
  EXPECT_FALSE(IntersectOne(Read("/a"), Write("/a"), &out));
  EXPECT_FALSE(IntersectOne(Read("/a"), ReadHash('a'), &out));
  EXPECT_FALSE(IntersectOne(Migrate({"a"}), Migrate({"b"}), &out));
  EXPECT_EQ(GrantToString(out), "read /unchanged");
}

TEST(Intersect, Examples) {
  using V = std::vector<std::string>;
  EXPECT_EQ(IntersectStrings(List({Read("/vault")}), List({Read("/vault/pub")})),
            V{"read /vault/pub"});
  EXPECT_EQ(IntersectStrings(List({Read("/a")}), List({Read("/b")})), V{});
  EXPECT_EQ(IntersectStrings(List({Net("*.example.com", 0)}), List({Net("a.example.com", 0)})),
            V{"network a.example.com:*"});
  EXPECT_EQ(IntersectStrings(List({Net("*.example.com", 0)}), List({Net("*.a.example.com", 0)})),
            V{"network *.a.example.com:*"});
  EXPECT_EQ(
      IntersectStrings(List({Net("api.example.com", 0)}), List({Net("api.example.com", 443)})),
      V{"network api.example.com:443"});
  EXPECT_EQ(
      IntersectStrings(List({Net("api.example.com", 80)}), List({Net("api.example.com", 443)})),
      V{});
  EXPECT_EQ(IntersectStrings(List({Migrate({"a", "b", "c"})}), List({Migrate({"b", "c", "d"})})),
            V{"migrate b c"});
  EXPECT_EQ(IntersectStrings(List({Migrate({"a"})}), List({Migrate({"b"})})), V{});
  EXPECT_EQ(IntersectStrings(List({Send("*"), Receive("x")}), List({Send("y"), Receive("*")})),
            (V{"send y", "receive x"}));
  EXPECT_EQ(IntersectStrings(List({Make(Grant::CAS_READ), Make(Grant::SPAWN)}),
                             List({ReadHash('a'), Make(Grant::CAS_READ)})),
            V{"cas-read"});
  EXPECT_EQ(IntersectStrings(List({Read("/a")}), List({})), V{});
}

TEST(Intersect, CanonicalOutput) {
  using V = std::vector<std::string>;
  const Grants a = List({Write("/z"), Read("/b"), Read("/a"), Net("*.example.com", 0), Send("*")});
  const Grants b =
      List({Send("q"), Read("/a/x"), Read("/"), Net("c.example.com", 8080), Write("/")});
  const std::vector<Grant> ab = Intersect(a, b);
  const std::vector<Grant> ba = Intersect(b, a);
  EXPECT_TRUE(SameList(ab, ba)) << testing::PrintToString(Strings(ab)) << " vs "
                                << testing::PrintToString(Strings(ba));
  // Sorted by kind (READ, WRITE, NETWORK, SEND), then scope; "/a/x" is covered by "/a".
  EXPECT_EQ(Strings(ab),
            (V{"read /a", "read /b", "write /z", "network c.example.com:8080", "send q"}));
  // Duplicates and covered grants collapse.
  EXPECT_EQ(IntersectStrings(List({Read("/a"), Read("/a"), Read("/a/b"), Read("/")}),
                             List({Read("/a/b/c"), Read("/a"), Read("/a")})),
            V{"read /a"});
  EXPECT_EQ(IntersectStrings(List({Net("*.example.com", 0), Net("a.example.com", 443)}),
                             List({Net("a.example.com", 0)})),
            V{"network a.example.com:*"});
  EXPECT_EQ(
      IntersectStrings(List({Make(Grant::CAS_READ), ReadHash('a')}), List({Make(Grant::CAS_READ)})),
      V{"cas-read"});
}

TEST(GrantAttack, InvalidGrantsNeverEnterTheIntersection) {
  EXPECT_TRUE(Intersect(List({Read("/a/../b")}), List({Read("/")})).empty());
  EXPECT_TRUE(Intersect(List({Net("*.com", 0)}), List({Net("evil.com", 0)})).empty());
  EXPECT_TRUE(Intersect(List({Migrate({"b", "a"})}), List({Migrate({"a", "b"})})).empty());
}

TEST(GrantAttack, LargeGrantListsStayCheap) {
  // 256 x 256 overlapping grants give 65536 pairwise meets; dropping covered ones must not
  // compare every pair with every other.
  Grants a;
  Grants b;
  for (int i = 0; i < 256; ++i) {
    *a.Add() = Read(absl::StrCat("/d", i % 16, "/f", i));
    *b.Add() = Read(absl::StrCat("/d", i % 16));
  }
  for (int i = 0; i < 240; ++i) *b.Mutable(i + 16) = Net(absl::StrCat("h", i, ".example.com"), 0);
  const std::vector<Grant> out = Intersect(a, b);
  EXPECT_EQ(out.size(), 256u);
  Grants wide;
  Grants narrow;
  for (int i = 0; i < 256; ++i) {
    *wide.Add() = Net(absl::StrCat("*.s", i % 8, ".example.com"), 0);
    *narrow.Add() = Net(absl::StrCat("h", i, ".s", i % 8, ".example.com"), 443);
  }
  EXPECT_EQ(Intersect(wide, narrow).size(), 256u);
  EXPECT_TRUE(IsSubset(narrow, wide).ok());
}

TEST(MessageTypeIntersect, EmptyIsAnyType) {
  Grant out;
  // Both empty: empty.
  ASSERT_TRUE(IntersectOne(Send("*"), Send("a-7"), &out));
  EXPECT_EQ(GrantToString(out), "send a-7");
  EXPECT_EQ(out.message_types_size(), 0);
  // One empty: the other's.
  ASSERT_TRUE(IntersectOne(Send("a-7"), Typed(Send("*"), {"ping", "stop"}), &out));
  EXPECT_EQ(GrantToString(out), "send a-7 types=ping,stop");
  ASSERT_TRUE(IntersectOne(Typed(Receive("x"), {"ping"}), Receive("*"), &out));
  EXPECT_EQ(GrantToString(out), "receive x types=ping");
  // Both: the common types.
  ASSERT_TRUE(IntersectOne(Typed(Send("*"), {"a", "ping", "stop"}),
                           Typed(Send("a-7"), {"ping", "stop", "z"}), &out));
  EXPECT_EQ(GrantToString(out), "send a-7 types=ping,stop");
  // No common type: no grant (never "any type").
  out = Read("/unchanged");
  EXPECT_FALSE(IntersectOne(Typed(Send("*"), {"ping"}), Typed(Send("*"), {"stop"}), &out));
  EXPECT_FALSE(IntersectOne(Typed(Send("a-7"), {"ping"}), Typed(Send("a-8"), {"ping"}), &out));
  EXPECT_EQ(GrantToString(out), "read /unchanged");
  using V = std::vector<std::string>;
  EXPECT_EQ(
      IntersectStrings(List({Typed(Send("*"), {"ping"})}), List({Typed(Send("*"), {"stop"})})),
      V{});
}

TEST(MessageTypeIntersect, CoveredGrantsAreDropped) {
  using V = std::vector<std::string>;
  // Found by the coverage rule, not only by looking for an untyped "*" grant.
  EXPECT_EQ(
      IntersectStrings(List({Typed(Send("*"), {"ping", "stop"}), Typed(Send("a-7"), {"ping"})}),
                       List({Send("*")})),
      V{"send * types=ping,stop"});
  EXPECT_EQ(
      IntersectStrings(List({Typed(Send("a-7"), {"ping"}), Typed(Send("a-7"), {"ping", "stop"}),
                             Typed(Send("a-7"), {"stop"})}),
                       List({Send("*")})),
      V{"send a-7 types=ping,stop"});
  EXPECT_EQ(IntersectStrings(List({Send("a-7"), Typed(Send("a-7"), {"ping"})}), List({Send("*")})),
            V{"send a-7"});
  EXPECT_EQ(IntersectStrings(List({Send("*"), Typed(Send("a-7"), {"ping"})}), List({Send("*")})),
            V{"send *"});
  // An untyped grant for one agent is not covered by a typed "*": both stay.
  EXPECT_EQ(IntersectStrings(List({Typed(Send("*"), {"ping"}), Send("a-7")}), List({Send("*")})),
            (V{"send * types=ping", "send a-7"}));
  // Different types of one agent are different grants: neither is lost as a duplicate.
  EXPECT_EQ(IntersectStrings(List({Typed(Receive("x"), {"stop"}), Typed(Receive("x"), {"ping"})}),
                             List({Receive("*")})),
            (V{"receive x types=ping", "receive x types=stop"}));
  // Send and receive never cover each other.
  EXPECT_EQ(IntersectStrings(List({Send("*"), Typed(Receive("*"), {"ping"})}),
                             List({Typed(Send("*"), {"ping"}), Receive("*")})),
            (V{"send * types=ping", "receive * types=ping"}));
}

TEST(GrantAttack, ManyTypedGrantsStayCheap) {
  // 256 agents x 256 types give 65536 meets, none covering another. Dropping covered ones
  // compares each only with the grants of its own agent and of "*", not with all 65536.
  Grants agents;
  Grants types;
  for (int i = 0; i < 256; ++i) {
    *agents.Add() = Send(absl::StrCat("agent-", i));
    *types.Add() = Typed(Send("*"), {absl::StrCat("type-", i).c_str()});
  }
  const std::vector<Grant> out = Intersect(agents, types);
  ASSERT_EQ(out.size(), 65536u);
  EXPECT_EQ(GrantToString(out.front()), "send agent-0 types=type-0");
}

// --- Properties --------------------------------------------------------------------------------

class GrantProperty : public testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device()();
    if (const char* env = std::getenv("GRANT_TEST_SEED")) seed_ = std::strtoull(env, nullptr, 10);
    std::cout << "GrantProperty seed " << seed_ << " (rerun with GRANT_TEST_SEED=" << seed_
              << ")\n";
    rng_.seed(seed_);
  }

  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  Grant RandomGrant() {
    static const char* const kPaths[] = {"/", "/a", "/a/b", "/a/b/c", "/a/c", "/ab", "/a-b", "/b"};
    static const char* const kHosts[] = {"a.example.com",   "b.example.com",   "*.example.com",
                                         "*.a.example.com", "x.a.example.com", "example.com",
                                         "*.other.org",     "c.other.org"};
    static const uint32_t kPorts[] = {0, 80, 443};
    static const char* const kAgents[] = {"*", "a1", "a2"};
    static const char* const kVaults[] = {"v-a", "v-b", "v-c"};
    static const char* const kTypes[] = {"ping", "stop", "vault.answer"};
    switch (Pick(9)) {
      case 0:
        return Read(kPaths[Pick(8)]);
      case 1:
        return ReadHash(Pick(2) == 0 ? 'x' : 'y');
      case 2:
        return Write(kPaths[Pick(8)]);
      case 3:
        return Make(Pick(2) == 0 ? Grant::CAS_READ : Grant::CAS_WRITE);
      case 4:
        return Make(Grant::SPAWN);
      case 5:
        return Net(kHosts[Pick(8)], kPorts[Pick(3)]);
      case 6: {
        Grant g = Pick(2) == 0 ? Send(kAgents[Pick(3)]) : Receive(kAgents[Pick(3)]);
        const size_t mask = Pick(8);  // a subset of the types, in sorted order; 0: any type
        for (size_t i = 0; i < 3; ++i) {
          if (mask & (size_t{1} << i)) g.add_message_types(kTypes[i]);
        }
        return g;
      }
      default: {
        Grant g = Make(Grant::MIGRATE);
        const size_t mask = 1 + Pick(7);  // a non-empty subset, in sorted order
        for (size_t i = 0; i < 3; ++i) {
          if (mask & (size_t{1} << i)) g.add_vaults(kVaults[i]);
        }
        return g;
      }
    }
  }

  Grants RandomGrants() {
    Grants out;
    const size_t n = Pick(7);
    for (size_t i = 0; i < n; ++i) *out.Add() = RandomGrant();
    return out;
  }

  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

constexpr int kIterations = 2000;

TEST_F(GrantProperty, RandomGrantsAreValid) {
  for (int i = 0; i < kIterations; ++i) {
    const Grant g = RandomGrant();
    ASSERT_TRUE(ValidateGrant(g).ok()) << ValidateGrant(g);
  }
}

TEST_F(GrantProperty, IntersectionIsWithinBoth) {
  for (int i = 0; i < kIterations; ++i) {
    const Grants a = RandomGrants();
    const Grants b = RandomGrants();
    const Grants meet = ToGrants(Intersect(a, b));
    ASSERT_TRUE(ValidateGrants(meet).ok());
    ASSERT_TRUE(IsSubset(meet, a).ok()) << IsSubset(meet, a) << " seed " << seed_;
    ASSERT_TRUE(IsSubset(meet, b).ok()) << IsSubset(meet, b) << " seed " << seed_;
  }
}

TEST_F(GrantProperty, SubsetIsReflexiveAndTransitive) {
  int chains = 0;
  for (int i = 0; i < kIterations; ++i) {
    const Grants a = RandomGrants();
    ASSERT_TRUE(IsSubset(a, a).ok()) << " seed " << seed_;
    const Grants b = RandomGrants();
    const Grants c = RandomGrants();
    if (IsSubset(a, b).ok() && IsSubset(b, c).ok()) {
      ++chains;
      ASSERT_TRUE(IsSubset(a, c).ok()) << " seed " << seed_;
    }
    // Chains built from intersections are never vacuous: x ⊆ y ⊆ c.
    const Grants y = ToGrants(Intersect(b, c));
    const Grants x = ToGrants(Intersect(a, y));
    ASSERT_TRUE(IsSubset(x, y).ok() && IsSubset(y, c).ok()) << " seed " << seed_;
    ASSERT_TRUE(IsSubset(x, c).ok()) << " seed " << seed_;
    // Single grants too.
    const Grant g1 = RandomGrant();
    const Grant g2 = RandomGrant();
    const Grant g3 = RandomGrant();
    ASSERT_TRUE(Covers(g1, g1));
    if (Covers(g2, g1) && Covers(g3, g2)) {
      ++chains;
      ASSERT_TRUE(Covers(g3, g1)) << GrantToString(g3) << " / " << GrantToString(g1);
    }
    // Antisymmetry, which the canonical form of Intersect relies on.
    if (Covers(g1, g2) && Covers(g2, g1)) {
      ASSERT_TRUE(google::protobuf::util::MessageDifferencer::Equals(g1, g2));
    }
  }
  EXPECT_GT(chains, 0);
}

TEST_F(GrantProperty, IntersectionIsTheGreatestLowerBound) {
  int hits = 0;
  for (int i = 0; i < kIterations; ++i) {
    const Grants a = RandomGrants();
    const Grants b = RandomGrants();
    const Grants meet = ToGrants(Intersect(a, b));
    for (int j = 0; j < 8; ++j) {
      Grants g;
      *g.Add() = RandomGrant();
      if (IsSubset(g, a).ok() && IsSubset(g, b).ok()) {
        ++hits;
        ASSERT_TRUE(IsSubset(g, meet).ok()) << GrantToString(g[0]) << " seed " << seed_ << " meet "
                                            << testing::PrintToString(Strings(Intersect(a, b)));
      }
    }
    // Every grant of the result is needed: none covers another.
    for (int p = 0; p < meet.size(); ++p) {
      for (int q = 0; q < meet.size(); ++q) {
        ASSERT_TRUE(p == q || !Covers(meet[p], meet[q]))
            << GrantToString(meet[p]) << " covers " << GrantToString(meet[q]) << " seed " << seed_;
      }
    }
  }
  EXPECT_GT(hits, kIterations / 10);
}

TEST_F(GrantProperty, IntersectIsCommutativeAndIdempotent) {
  for (int i = 0; i < kIterations; ++i) {
    const Grants a = RandomGrants();
    const Grants b = RandomGrants();
    const std::vector<Grant> ab = Intersect(a, b);
    ASSERT_TRUE(SameList(ab, Intersect(b, a))) << " seed " << seed_;
    const Grants meet = ToGrants(ab);
    ASSERT_TRUE(SameList(ab, Intersect(meet, meet))) << " seed " << seed_;
    // Intersect(a, a) is a's canonical form: the same authority, and a fixed point.
    const std::vector<Grant> aa = Intersect(a, a);
    ASSERT_TRUE(IsSubset(a, ToGrants(aa)).ok() && IsSubset(ToGrants(aa), a).ok());
    ASSERT_TRUE(SameList(aa, Intersect(ToGrants(aa), a))) << " seed " << seed_;
    // Order of the inputs does not matter.
    Grants reversed;
    for (int j = a.size() - 1; j >= 0; --j) *reversed.Add() = a[j];
    ASSERT_TRUE(SameList(ab, Intersect(reversed, b))) << " seed " << seed_;
  }
}

}  // namespace
}  // namespace vault::capability
