// Tests of a message's signature and its checks (messaging/signed_message.h): a message as its
// vault signs it verifies; each forgery (another member's key, an altered payload, record or
// chain, a chain that places the sender elsewhere or names another agent or principal) is
// refused with UNAUTHENTICATED and the reason.
#include "messaging/signed_message.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "capability/chain.h"
#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::messaging {
namespace {

using ::testing::HasSubstr;
using vault::v1::MessageRecord;
using vault::v1::SignedMessage;

capability::PrivateKey Key(char seed) {
  absl::StatusOr<capability::PrivateKey> k =
      capability::PrivateKey::FromRawSeed(std::string(32, seed));
  if (!k.ok()) std::abort();
  return *std::move(k);
}

class SignedMessageTest : public ::testing::Test {
 protected:
  SignedMessageTest()
      : principal_(Key('p')), vault_a_(Key('a')), vault_b_(Key('b')), vault_c_(Key('c')) {
    context_.vault_key = [this](absl::string_view name) -> std::optional<capability::PublicKey> {
      if (name == "vault-a") return vault_a_.public_key();
      if (name == "vault-b") return vault_b_.public_key();
      if (name == "vault-c") return vault_c_.public_key();
      return std::nullopt;
    };
  }

  // P -SPAWN-> vault-a for `agent`, then (with `hop_to_b`) vault-a -MIGRATE-> vault-b.
  std::string ChainBytes(const std::string& agent, bool hop_to_b) {
    vault::v1::LinkPayload spawn;
    spawn.set_version(1);
    spawn.set_kind(vault::v1::LinkPayload::SPAWN);
    spawn.set_issuer(principal_.public_key().raw());
    spawn.set_audience(vault_a_.public_key().raw());
    spawn.set_agent_id(agent);
    spawn.mutable_code()->set_sha256(common::Sha256::Hash("code"));
    spawn.mutable_code()->set_size(4);
    vault::v1::Grant* migrate = spawn.add_grants();
    migrate->set_kind(vault::v1::Grant::MIGRATE);
    migrate->add_vaults("vault-b");
    spawn.mutable_constraints()->set_max_migrations(3);
    const int64_t now = absl::ToUnixMillis(absl::Now());
    spawn.set_not_before_unix_ms(now - 60000);
    spawn.set_not_after_unix_ms(now + 3600000);
    vault::v1::Chain chain;
    absl::StatusOr<vault::v1::SignedLink> l0 = capability::SignLink(spawn, principal_);
    EXPECT_TRUE(l0.ok()) << l0.status();
    *chain.add_links() = *l0;
    if (hop_to_b) {
      vault::v1::LinkPayload hop = spawn;
      hop.set_kind(vault::v1::LinkPayload::MIGRATE);
      hop.set_parent(capability::LinkHash(*l0));
      hop.set_issuer(vault_a_.public_key().raw());
      hop.set_audience(vault_b_.public_key().raw());
      hop.set_hop(1);
      hop.set_transfer_id(std::string(16, 't'));
      hop.mutable_state()->set_sha256(common::Sha256::Hash(""));
      absl::StatusOr<vault::v1::SignedLink> l1 = capability::SignLink(hop, vault_a_);
      EXPECT_TRUE(l1.ok()) << l1.status();
      *chain.add_links() = *l1;
    }
    return chain.SerializeAsString();
  }

  MessageRecord Record(const std::string& from, const std::string& vault) {
    MessageRecord r;
    r.set_from(from);
    r.set_to("a-receiver");
    r.set_type("work.item");
    r.set_seq(7);
    r.set_sending_vault(vault);
    r.set_sent_unix_ms(1700000000000);
    r.set_from_principal(principal_.public_key().ToText());
    return r;
  }

  SignedMessage Signed(const std::string& vault, const capability::PrivateKey& key, bool hop_to_b) {
    absl::StatusOr<SignedMessage> m = SignMessage(Record("a-sender", vault), "payload-bytes",
                                                  ChainBytes("a-sender", hop_to_b), key);
    EXPECT_TRUE(m.ok()) << m.status();
    return *m;
  }

  absl::Status Check(const SignedMessage& m) { return verifier_.Verify(m, context_).status(); }

  capability::PrivateKey principal_, vault_a_, vault_b_, vault_c_;
  capability::LinkCache cache_;
  MessageVerifier verifier_{&cache_};
  MessageContext context_;
};

TEST_F(SignedMessageTest, VerifiesAsSigned) {
  SignedMessage m = Signed("vault-a", vault_a_, /*hop_to_b=*/false);
  absl::StatusOr<VerifiedMessage> v = verifier_.Verify(m, context_);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->record.from(), "a-sender");
  EXPECT_EQ(v->record.seq(), 7u);
  EXPECT_EQ(v->record.payload_sha256(), common::Sha256::Hash("payload-bytes"));
  ASSERT_TRUE(v->chain.has_value());
  EXPECT_EQ(v->chain->agent_id, "a-sender");
  // After a hop, the vault it went to speaks for it.
  absl::Status after_hop = Check(Signed("vault-b", vault_b_, /*hop_to_b=*/true));
  EXPECT_TRUE(after_hop.ok()) << after_hop;
}

TEST_F(SignedMessageTest, AnotherVaultsSignatureIsRefused) {
  // vault-c signs, claiming vault-a.
  SignedMessage m = Signed("vault-a", vault_c_, false);
  absl::Status s = Check(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("signature does not verify against vault-a's key"));
  // A vault that is no member.
  m = Signed("vault-x", vault_c_, false);
  s = Check(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("\"vault-x\" as its vault, which is no member"));
}

TEST_F(SignedMessageTest, AlteredPayloadOrRecordIsRefused) {
  SignedMessage m = Signed("vault-a", vault_a_, false);
  SignedMessage altered = m;
  altered.set_data("payload-bytez");
  absl::Status s = Check(altered);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("its payload is not the one vault-a signed"));
  // The record with a larger sequence number: the signature no longer covers it.
  MessageRecord r;
  ASSERT_TRUE(r.ParseFromString(m.record()));
  r.set_seq(8);
  altered = m;
  altered.set_record(r.SerializeAsString());
  s = Check(altered);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("signature does not verify"));
}

TEST_F(SignedMessageTest, MemberCannotSpeakForAnAgentItDoesNotHost) {
  // vault-c signs honestly with its own key, for an agent whose chain ends at vault-a.
  SignedMessage m = Signed("vault-c", vault_c_, false);
  absl::Status s = Check(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("does not place agent a-sender on vault-c"));
  // Or with another agent's chain.
  absl::StatusOr<SignedMessage> other =
      SignMessage(Record("a-sender", "vault-a"), "x", ChainBytes("a-other", false), vault_a_);
  ASSERT_TRUE(other.ok());
  s = Check(*other);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("chain is agent a-other's, not a-sender's"));
  // Or under another principal's name.
  MessageRecord r = Record("a-sender", "vault-a");
  r.set_from_principal(vault_c_.public_key().ToText());
  other = SignMessage(r, "x", ChainBytes("a-sender", false), vault_a_);
  ASSERT_TRUE(other.ok());
  s = Check(*other);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("principal is not"));
  // A chain swapped after signing.
  SignedMessage swapped = Signed("vault-a", vault_a_, false);
  swapped.set_chain(ChainBytes("a-sender", true));
  s = Check(swapped);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("chain is not the one vault-a signed"));
}

TEST_F(SignedMessageTest, MalformedRecordsAreRefused) {
  SignedMessage m = Signed("vault-a", vault_a_, false);
  MessageRecord r;
  ASSERT_TRUE(r.ParseFromString(m.record()));
  // Unknown fields: one record, one encoding.
  std::string extended = m.record() + std::string("\xf8\x07\x01", 3);  // field 127, varint 1
  EXPECT_EQ(ParseRecord(extended).status().code(), absl::StatusCode::kInvalidArgument);
  r.set_version(2);
  EXPECT_THAT(ParseRecord(r.SerializeAsString()).status().message(), HasSubstr("version 2"));
  r.set_version(1);
  r.set_seq(0);
  EXPECT_THAT(ParseRecord(r.SerializeAsString()).status().message(),
              HasSubstr("no sequence number"));
  r.set_seq(1);
  r.set_type("Bad Type");
  EXPECT_EQ(ParseRecord(r.SerializeAsString()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseRecord(std::string(kMaxRecordBytes + 1, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SignedMessageTest, HashNamesOneMessage) {
  SignedMessage a = Signed("vault-a", vault_a_, false);
  SignedMessage b = a;
  b.set_data("other data does not change the hash of what was signed");
  EXPECT_EQ(MessageHash(a), MessageHash(b));
  EXPECT_EQ(MessageHash(a).size(), 64u);
  SignedMessage c = Signed("vault-b", vault_b_, true);
  EXPECT_NE(MessageHash(a), MessageHash(c));
}

}  // namespace
}  // namespace vault::messaging
