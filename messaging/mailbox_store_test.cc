// Tests of the durable mailboxes (messaging/mailbox_store.h) on a real RocksDB database: what is
// written reads back after the database is reopened, a hop's transfer carries exactly one
// agent's messages, and removing an agent leaves its neighbours (ids that share a prefix) alone.
#include "messaging/mailbox_store.h"

#include <memory>
#include <string>

#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"

namespace vault::messaging {
namespace {

vault::v1::SignedMessage Message(const std::string& to, uint64_t seq, const std::string& data) {
  vault::v1::MessageRecord r;
  r.set_to(to);
  r.set_seq(seq);
  vault::v1::SignedMessage m;
  r.SerializeToString(m.mutable_record());
  m.set_data(data);
  return m;
}

class MailboxStoreTest : public ::testing::Test {
 protected:
  void Open() {
    store_.reset();
    db_.reset();
    absl::StatusOr<std::unique_ptr<storage::Database>> d =
        storage::Database::Open({.path = dir_.Path("db")}, MailboxStore::ColumnFamilies());
    ASSERT_TRUE(d.ok()) << d.status();
    db_ = *std::move(d);
    store_ = std::make_unique<MailboxStore>(db_.get());
  }
  void SetUp() override { Open(); }

  common::testing::TempDir dir_{"mailbox_store_test"};
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<MailboxStore> store_;
};

TEST_F(MailboxStoreTest, SurvivesReopen) {
  rocksdb::WriteBatch batch;
  store_->AddMail(&batch, "a-1", 1, Message("a-1", 5, "one"));
  store_->AddMail(&batch, "a-1", 2, Message("a-1", 6, "two"));
  store_->SetSeen(&batch, "a-1", "a-2", 6);
  store_->AddOutbox(&batch, "a-1", 9, Message("a-3", 9, "out"));
  ASSERT_TRUE(store_->Write(&batch).ok());
  rocksdb::WriteBatch del;
  store_->DeleteMail(&del, "a-1", 1);
  ASSERT_TRUE(store_->WriteUnsynced(&del).ok());
  Open();
  absl::StatusOr<MailboxStore::Loaded> l = store_->Load("a-1");
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(l->mailbox.size(), 1u);
  EXPECT_EQ(l->mailbox[0].n, 2u);
  EXPECT_EQ(l->mailbox[0].message.data(), "two");
  EXPECT_EQ(l->next_n, 3u);
  EXPECT_EQ(l->seen.at("a-2"), 6u);
  ASSERT_EQ(l->outbox.size(), 1u);
  EXPECT_EQ(l->outbox[0].first, 9u);
  EXPECT_EQ(l->outbox[0].second.data(), "out");
  absl::StatusOr<std::vector<std::string>> with_outbox = store_->AgentsWithOutbox();
  ASSERT_TRUE(with_outbox.ok());
  EXPECT_EQ(*with_outbox, std::vector<std::string>{"a-1"});
}

TEST_F(MailboxStoreTest, TransferMovesOneAgent) {
  rocksdb::WriteBatch batch;
  for (uint64_t n = 1; n <= 3; ++n) {
    store_->AddMail(&batch, "a-1", n + 10, Message("a-1", n, std::to_string(n)));
  }
  store_->AddMail(&batch, "a-10", 1, Message("a-10", 1, "neighbour"));
  store_->SetSeen(&batch, "a-1", "a-2", 3);
  store_->SetSeen(&batch, "a-10", "a-2", 99);
  store_->AddOutbox(&batch, "a-1", 4, Message("a-9", 4, "pending"));
  ASSERT_TRUE(store_->Write(&batch).ok());

  absl::StatusOr<vault::v1::MailboxTransfer> t = store_->TransferOf("a-1");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->mailbox_size(), 3);
  EXPECT_EQ(t->mailbox(0).data(), "1");
  EXPECT_EQ(t->mailbox(2).data(), "3");
  ASSERT_EQ(t->seen_size(), 1);
  EXPECT_EQ(t->seen(0).seq(), 3u);
  ASSERT_EQ(t->outbox_size(), 1);

  // The agent leaves: nothing of it stays, its neighbour keeps everything.
  rocksdb::WriteBatch gone;
  store_->DeleteAgent(&gone, "a-1");
  ASSERT_TRUE(store_->Write(&gone).ok());
  absl::StatusOr<MailboxStore::Loaded> l = store_->Load("a-1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->mailbox.empty());
  EXPECT_TRUE(l->seen.empty());
  EXPECT_TRUE(l->outbox.empty());
  l = store_->Load("a-10");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->mailbox.size(), 1u);
  EXPECT_EQ(l->seen.at("a-2"), 99u);

  // It arrives elsewhere (here, under another id): renumbered from 1, in order.
  rocksdb::WriteBatch in;
  store_->AddTransfer(&in, "a-7", *t);
  ASSERT_TRUE(store_->Write(&in).ok());
  l = store_->Load("a-7");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->mailbox.size(), 3u);
  EXPECT_EQ(l->mailbox[0].n, 1u);
  EXPECT_EQ(l->mailbox[2].message.data(), "3");
  EXPECT_EQ(l->seen.at("a-2"), 3u);
  ASSERT_EQ(l->outbox.size(), 1u);
  EXPECT_EQ(l->outbox[0].first, 4u);
}

}  // namespace
}  // namespace vault::messaging
