#include "messaging/mailbox_store.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/keys.h"

namespace vault::messaging {

using vault::v1::SignedMessage;

namespace {

constexpr char kMessages[] = "messages";

std::string Prefix(char kind, const std::string& agent) {
  return absl::StrCat(std::string(1, kind), agent, std::string(1, '\0'));
}
std::string NumberKey(char kind, const std::string& agent, uint64_t n) {
  return absl::StrCat(Prefix(kind, agent), storage::BigEndian64(n));
}
// The first key after every key that starts with `prefix`.
std::string PrefixEnd(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

}  // namespace

std::vector<storage::ColumnFamilySpec> MailboxStore::ColumnFamilies() {
  return {{.name = kMessages, .point_lookups = false}};
}

absl::StatusOr<MailboxStore::Loaded> MailboxStore::Load(const std::string& agent) const {
  Loaded out;
  rocksdb::ColumnFamilyHandle* cf = db_->Handle(kMessages);
  for (char kind : {'m', 's', 'o'}) {
    const std::string prefix = Prefix(kind, agent);
    std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), cf));
    for (it->Seek(storage::ToSlice(prefix));
         it->Valid() && it->key().starts_with(storage::ToSlice(prefix)); it->Next()) {
      absl::string_view rest = storage::View(it->key()).substr(prefix.size());
      absl::string_view value = storage::View(it->value());
      if (kind == 's') {
        if (value.size() != 8) return absl::DataLossError("a seen number is not 8 bytes");
        out.seen[std::string(rest)] = storage::ParseBigEndian64(value);
        continue;
      }
      if (rest.size() != 8) return absl::DataLossError("a message key is malformed");
      SignedMessage m;
      if (!m.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
        return absl::DataLossError(
            absl::StrCat("a stored message of agent ", agent, " does not parse"));
      }
      const uint64_t n = storage::ParseBigEndian64(rest);
      if (kind == 'm') {
        out.mailbox.push_back({n, std::move(m)});
        out.next_n = n + 1;
      } else {
        out.outbox.emplace_back(n, std::move(m));
      }
    }
    VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "read an agent's messages"));
  }
  return out;
}

void MailboxStore::AddMail(rocksdb::WriteBatch* batch, const std::string& agent, uint64_t n,
                           const SignedMessage& message) const {
  batch->Put(db_->Handle(kMessages), NumberKey('m', agent, n), message.SerializeAsString());
}

void MailboxStore::DeleteMail(rocksdb::WriteBatch* batch, const std::string& agent,
                              uint64_t n) const {
  batch->Delete(db_->Handle(kMessages), NumberKey('m', agent, n));
}

void MailboxStore::SetSeen(rocksdb::WriteBatch* batch, const std::string& agent,
                           const std::string& from, uint64_t seq) const {
  batch->Put(db_->Handle(kMessages), absl::StrCat(Prefix('s', agent), from),
             storage::BigEndian64(seq));
}

void MailboxStore::DeleteSeen(rocksdb::WriteBatch* batch, const std::string& agent,
                              const std::string& from) const {
  batch->Delete(db_->Handle(kMessages), absl::StrCat(Prefix('s', agent), from));
}

void MailboxStore::AddOutbox(rocksdb::WriteBatch* batch, const std::string& agent, uint64_t seq,
                             const SignedMessage& message) const {
  batch->Put(db_->Handle(kMessages), NumberKey('o', agent, seq), message.SerializeAsString());
}

void MailboxStore::DeleteOutbox(rocksdb::WriteBatch* batch, const std::string& agent,
                                uint64_t seq) const {
  batch->Delete(db_->Handle(kMessages), NumberKey('o', agent, seq));
}

absl::StatusOr<vault::v1::MailboxTransfer> MailboxStore::TransferOf(
    const std::string& agent, const absl::flat_hash_set<uint64_t>& leave_out) const {
  VAULT_ASSIGN_OR_RETURN(Loaded l, Load(agent));
  vault::v1::MailboxTransfer t;
  for (Mail& m : l.mailbox) {
    if (!leave_out.contains(m.n)) *t.add_mailbox() = std::move(m.message);
  }
  std::vector<std::pair<std::string, uint64_t>> seen(l.seen.begin(), l.seen.end());
  std::sort(seen.begin(), seen.end());
  for (const auto& [from, seq] : seen) {
    vault::v1::MailboxTransfer::Seen* s = t.add_seen();
    s->set_from(from);
    s->set_seq(seq);
  }
  for (auto& [seq, m] : l.outbox) *t.add_outbox() = std::move(m);
  return t;
}

void MailboxStore::AddTransfer(rocksdb::WriteBatch* batch, const std::string& agent,
                               const vault::v1::MailboxTransfer& transfer) const {
  uint64_t n = 1;
  for (const SignedMessage& m : transfer.mailbox()) AddMail(batch, agent, n++, m);
  for (const auto& s : transfer.seen()) SetSeen(batch, agent, s.from(), s.seq());
  for (const SignedMessage& m : transfer.outbox()) {
    vault::v1::MessageRecord r;
    if (r.ParseFromString(m.record())) AddOutbox(batch, agent, r.seq(), m);
  }
}

void MailboxStore::DeleteAgent(rocksdb::WriteBatch* batch, const std::string& agent,
                               bool keep_outbox) const {
  for (char kind : {'m', 's', 'o'}) {
    if (kind == 'o' && keep_outbox) continue;
    const std::string prefix = Prefix(kind, agent);
    batch->DeleteRange(db_->Handle(kMessages), prefix, PrefixEnd(prefix));
  }
}

absl::StatusOr<std::vector<std::string>> MailboxStore::AgentsWithOutbox() const {
  std::vector<std::string> out;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle(kMessages)));
  for (it->Seek("o"); it->Valid() && it->key().starts_with("o");) {
    absl::string_view key = storage::View(it->key()).substr(1);
    size_t nul = key.find('\0');
    if (nul == absl::string_view::npos) return absl::DataLossError("an outbox key is malformed");
    std::string agent(key.substr(0, nul));
    out.push_back(agent);
    it->Seek(PrefixEnd(Prefix('o', agent)));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "list outboxes"));
  return out;
}

}  // namespace vault::messaging
