#include "audit/internal/entry_fields.h"

#include <cstdint>
#include <random>
#include <string>

#include "gtest/gtest.h"
#include "vault/v1/audit.pb.h"

namespace vault::audit::internal {
namespace {

vault::v1::AuditEntry FullEntry(uint64_t seq) {
  vault::v1::AuditEntry e;
  e.set_sequence(seq);
  e.set_time_unix_micros(1700000000000000 + static_cast<int64_t>(seq));
  e.set_vault("vault-a");
  e.set_actor("ed25519:0123456789abcdef");
  e.set_action("cas.put");
  e.set_subject("sha256:abcd/4096");
  e.set_decision(vault::v1::AuditEntry::DENIED);
  e.set_motivation("a reason");
  e.set_priority(vault::v1::AuditEntry::HIGH);
  for (int i = 0; i < 3; ++i) {
    vault::v1::AuditEntry::Detail* d = e.add_details();
    d->set_key("key" + std::to_string(i));
    d->set_value("value " + std::to_string(i));
  }
  e.set_prev_hash(std::string(32, '\xa5'));
  return e;
}

void ExpectSameAsProtobuf(const std::string& bytes) {
  std::optional<EntryFields> f = ReadPlainEntry(bytes);
  if (!f.has_value()) return;  // protobuf decides; nothing to compare
  vault::v1::AuditEntry e;
  ASSERT_TRUE(e.ParseFromString(bytes)) << "read plain, but protobuf rejects it";
  EXPECT_EQ(f->sequence, e.sequence());
  EXPECT_EQ(f->vault, e.vault());
  EXPECT_EQ(f->prev_hash, e.prev_hash());
}

TEST(AuditEntryFields, ReadsWhatAppendWrites) {
  for (uint64_t seq : {uint64_t{0}, uint64_t{1}, uint64_t{300}, uint64_t{1} << 40, ~uint64_t{0}}) {
    const std::string bytes = FullEntry(seq).SerializeAsString();
    std::optional<EntryFields> f = ReadPlainEntry(bytes);
    ASSERT_TRUE(f.has_value()) << seq;
    EXPECT_EQ(f->sequence, seq);
    EXPECT_EQ(f->vault, "vault-a");
    EXPECT_EQ(f->prev_hash, std::string(32, '\xa5'));
  }
  // The empty entry (every field at its default) parses too.
  std::optional<EntryFields> empty = ReadPlainEntry("");
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(empty->sequence, 0u);
  EXPECT_TRUE(empty->vault.empty());
  EXPECT_TRUE(empty->prev_hash.empty());
}

TEST(AuditEntryFields, LastOccurrenceWins) {
  vault::v1::AuditEntry a = FullEntry(5);
  vault::v1::AuditEntry b;
  b.set_sequence(7);
  b.set_vault("vault-b");
  const std::string bytes = a.SerializeAsString() + b.SerializeAsString();
  std::optional<EntryFields> f = ReadPlainEntry(bytes);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->sequence, 7u);
  EXPECT_EQ(f->vault, "vault-b");
  ExpectSameAsProtobuf(bytes);
}

TEST(AuditEntryFields, LeavesAnythingElseToProtobuf) {
  // Non-ASCII text (valid UTF-8 here; protobuf accepts it).
  vault::v1::AuditEntry e = FullEntry(1);
  e.set_motivation("caf\xc3\xa9");
  EXPECT_FALSE(ReadPlainEntry(e.SerializeAsString()).has_value());
  // Invalid UTF-8 in a string: protobuf rejects it, so must not be read as plain.
  std::string bad = FullEntry(1).SerializeAsString();
  const size_t at = bad.find("vault-a");
  ASSERT_NE(at, std::string::npos);
  bad[at] = '\xff';
  EXPECT_FALSE(ReadPlainEntry(bad).has_value());
  vault::v1::AuditEntry check;
  EXPECT_FALSE(check.ParseFromString(bad));
  // An unknown field (number 12, varint).
  EXPECT_FALSE(ReadPlainEntry(FullEntry(1).SerializeAsString() + "\x60\x01").has_value());
  // A known field with another wire type (sequence as fixed64).
  EXPECT_FALSE(ReadPlainEntry(std::string("\x09", 1) + std::string(8, '\0')).has_value());
  // Truncated: a length past the end, a varint cut short.
  EXPECT_FALSE(ReadPlainEntry("\x1a\x05vau").has_value());
  EXPECT_FALSE(ReadPlainEntry("\x08\x80").has_value());
  // An 11-byte varint.
  EXPECT_FALSE(ReadPlainEntry("\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01").has_value());
}

TEST(AuditEntryFields, FindsANonAsciiByteAnywhereInAString) {
  for (size_t n = 1; n <= 24; ++n) {
    for (size_t at = 0; at < n; ++at) {
      std::string text(n, 'a');
      text[at] = '\x80';
      vault::v1::AuditEntry e = FullEntry(1);
      e.set_actor(text);
      EXPECT_FALSE(ReadPlainEntry(e.SerializeAsString()).has_value()) << n << " " << at;
      e = FullEntry(1);
      e.mutable_details(1)->set_value(text);
      EXPECT_FALSE(ReadPlainEntry(e.SerializeAsString()).has_value()) << n << " " << at;
    }
    vault::v1::AuditEntry e = FullEntry(1);
    e.set_actor(std::string(n, '\x7f'));
    EXPECT_TRUE(ReadPlainEntry(e.SerializeAsString()).has_value()) << n;
  }
}

// Random damage to real entries: whenever the fast reader accepts the bytes, protobuf accepts
// them too and reads the same sequence, vault and prev_hash.
TEST(AuditEntryFields, AgreesWithProtobufOnDamagedEntries) {
  std::mt19937_64 rng(20261122);
  const std::string base = FullEntry(123456).SerializeAsString();
  int plain = 0;
  for (int round = 0; round < 200000; ++round) {
    std::string bytes = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < edits && !bytes.empty(); ++k) {
      const size_t pos = rng() % bytes.size();
      switch (rng() % 5) {
        case 0:
          bytes[pos] = static_cast<char>(rng());
          break;
        case 1:
          bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (rng() % 8)));
          break;
        case 2:
          bytes.erase(pos, 1 + rng() % 4);
          break;
        case 3:
          bytes.insert(pos, 1, static_cast<char>(rng()));
          break;
        default:
          bytes.resize(pos);
          break;
      }
    }
    if (ReadPlainEntry(bytes).has_value()) ++plain;
    ExpectSameAsProtobuf(bytes);
    if (HasFatalFailure() || HasNonfatalFailure()) {
      ADD_FAILURE() << "round " << round;
      return;
    }
  }
  EXPECT_GT(plain, 1000);  // the comparison did run on many accepted inputs
}

}  // namespace
}  // namespace vault::audit::internal
