// messaging/mailbox_store: agents' messages in the vault's RocksDB (column family "messages"),
// durable from the moment a sender is told they are accepted (docs/messages.md):
//   m <agent> \0 be64(n)     -> SignedMessage: its mailbox, undelivered, in arrival order
//   s <agent> \0 <sender>    -> be64(seq): the last sequence number accepted from that sender
//   o <agent> \0 be64(seq)   -> SignedMessage: its outbox, accepted from it, not yet delivered
// Writes go through batches so that a message lands with what it depends on (its sender's
// record of it, the receiver's seen number, a hop's Commit).
//
//   MailboxStore store(db);
//   rocksdb::WriteBatch batch;
//   store.AddMail(&batch, "a-1", n, message);
//   store.SetSeen(&batch, "a-1", "a-2", 7);
//   VAULT_RETURN_IF_ERROR(store.Write(&batch));
//   VAULT_ASSIGN_OR_RETURN(MailboxStore::Loaded l, store.Load("a-1"));
//
// Thread-safety: thread-safe (RocksDB is); callers order the writes of one agent.
#ifndef VAULT_MESSAGING_MAILBOX_STORE_H_
#define VAULT_MESSAGING_MAILBOX_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "storage/database.h"
#include "vault/v1/message.pb.h"

namespace vault::messaging {

class MailboxStore {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  explicit MailboxStore(const storage::Database* db) : db_(db) {}

  struct Mail {
    uint64_t n = 0;  // its place in the mailbox
    vault::v1::SignedMessage message;
  };
  struct Loaded {
    std::vector<Mail> mailbox;                        // oldest first
    absl::flat_hash_map<std::string, uint64_t> seen;  // sender -> last accepted seq
    std::vector<std::pair<uint64_t, vault::v1::SignedMessage>> outbox;  // by seq
    uint64_t next_n = 1;                                                // after the newest mail
  };
  absl::StatusOr<Loaded> Load(const std::string& agent) const;

  void AddMail(rocksdb::WriteBatch* batch, const std::string& agent, uint64_t n,
               const vault::v1::SignedMessage& message) const;
  void DeleteMail(rocksdb::WriteBatch* batch, const std::string& agent, uint64_t n) const;
  void SetSeen(rocksdb::WriteBatch* batch, const std::string& agent, const std::string& from,
               uint64_t seq) const;
  void DeleteSeen(rocksdb::WriteBatch* batch, const std::string& agent,
                  const std::string& from) const;
  void AddOutbox(rocksdb::WriteBatch* batch, const std::string& agent, uint64_t seq,
                 const vault::v1::SignedMessage& message) const;
  void DeleteOutbox(rocksdb::WriteBatch* batch, const std::string& agent, uint64_t seq) const;

  // Everything of `agent`, as it travels in a hop (but the mail numbered in `leave_out`).
  absl::StatusOr<vault::v1::MailboxTransfer> TransferOf(
      const std::string& agent, const absl::flat_hash_set<uint64_t>& leave_out = {}) const;
  // Adds a hop's transfer for `agent` (mail numbered from 1, after DeleteAgent in the same batch).
  void AddTransfer(rocksdb::WriteBatch* batch, const std::string& agent,
                   const vault::v1::MailboxTransfer& transfer) const;
  // Removes everything of `agent` (but its outbox, with `keep_outbox`).
  void DeleteAgent(rocksdb::WriteBatch* batch, const std::string& agent,
                   bool keep_outbox = false) const;
  // The agents with an outbox entry (to drain at start).
  absl::StatusOr<std::vector<std::string>> AgentsWithOutbox() const;

  // Synced (accepted messages).
  absl::Status Write(rocksdb::WriteBatch* batch) const { return db_->Write(batch); }
  // In the write-ahead log only (a delivery's removal: lost only with the machine).
  absl::Status WriteUnsynced(rocksdb::WriteBatch* batch) const { return db_->WriteUnsynced(batch); }

 private:
  const storage::Database* const db_;
};

}  // namespace vault::messaging

#endif  // VAULT_MESSAGING_MAILBOX_STORE_H_
