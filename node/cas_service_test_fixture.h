// Shared fixture of the Cas service tests (cas_service_test.cc, membership_test.cc): a real
// in-process gRPC server over a real Store in a fresh directory.
#ifndef VAULT_NODE_CAS_SERVICE_TEST_FIXTURE_H_
#define VAULT_NODE_CAS_SERVICE_TEST_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "audit/log.h"
#include "capability/principal.h"
#include "cas/chunker.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "common/executor.h"
#include "common/testing/temp_dir.h"
#include "gtest/gtest.h"
#include "node/cas_service.h"
#include "node/membership.h"
#include "node/tls_material.h"
#include "storage/database.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::node {
namespace {

using vault::v1::BatchGetRequest;
using vault::v1::BatchGetResponse;
using vault::v1::BatchPutRequest;
using vault::v1::BatchPutResponse;
using vault::v1::FeedRequest;
using vault::v1::FeedResponse;
using vault::v1::FindMissingRequest;
using vault::v1::FindMissingResponse;
using vault::v1::GetRequest;
using vault::v1::GetResponse;
using vault::v1::PutRequest;
using vault::v1::PutResponse;
using vault::v1::StatRequest;
using vault::v1::StatResponse;

constexpr size_t kChunkAvg = 64 << 10;
constexpr uint64_t kChunkingThreshold = 256 << 10;
constexpr size_t kPiece = 100 << 10;  // client message size for streaming Put
constexpr int kInvalidArgument = static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT);
constexpr int kNotFound = static_cast<int>(grpc::StatusCode::NOT_FOUND);
constexpr int kResourceExhausted = static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED);

constexpr CasLimits kLimits{.max_batch_bytes = 256 << 10,
                            .max_find_missing = 8,
                            .max_batch_items = 50,
                            .get_piece_bytes = 100 << 10,
                            .feed_page = 2};

inline std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

inline vault::v1::Digest DigestOf(absl::string_view data) {
  vault::v1::Digest d;
  d.set_sha256(cas::Sha256::Hash(data));
  d.set_size(data.size());
  return d;
}

inline bool SameDigest(const vault::v1::Digest& a, const vault::v1::Digest& b) {
  return a.sha256() == b.sha256() && a.size() == b.size();
}

// The number of chunks the store makes of `data` (the chunker is deterministic).
inline uint32_t ExpectedChunkCount(absl::string_view data) {
  absl::StatusOr<cas::ChunkerParams> params = cas::ChunkerParams::ForAverage(kChunkAvg);
  if (!params.ok()) return 0;
  cas::Chunker chunker(*params);
  chunker.Append(data);
  uint32_t n = 0;
  while (chunker.Next(/*eof=*/true)) ++n;
  return n;
}

inline void SetDeadline(grpc::ClientContext* ctx, absl::Duration timeout = absl::Seconds(30)) {
  ctx->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
}

// Polls `done` every 10 ms for up to `timeout`.
inline bool WaitFor(const std::function<bool()>& done, absl::Duration timeout = absl::Seconds(10)) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

struct GetResult {
  grpc::Status status;
  std::string data;
  int messages = 0;
  bool contiguous = true;  // every message's offset continues the previous one
};

struct FeedResult {
  grpc::Status status;
  std::vector<FeedResponse> messages;
  std::vector<uint64_t> seqs;
};

// A wire digest as text: sha256:<hex>/<size>.
inline std::string DigestText(const vault::v1::Digest& d) {
  return absl::StrCat("sha256:", absl::BytesToHexString(d.sha256()), "/", d.size());
}

class CasServiceTest : public ::testing::Test {
 protected:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies() {
    std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
    for (storage::ColumnFamilySpec& cf : audit::LogStore::ColumnFamilies()) cfs.push_back(cf);
    return cfs;
  }

  // The audit entries written so far, parsed.
  std::vector<vault::v1::AuditEntry> AuditEntries() {
    std::vector<vault::v1::AuditEntry> out;
    absl::StatusOr<std::vector<std::string>> raw =
        audit_log_->store().ReadEntries(0, audit_log_->size(), 1 << 20, 1 << 30);
    EXPECT_TRUE(raw.ok()) << raw.status();
    if (!raw.ok()) return out;
    for (const std::string& r : *raw) out.emplace_back().ParseFromString(r);
    return out;
  }

  void SetUp() override {
    dir_ = tmp_.path();
    absl::StatusOr<std::unique_ptr<storage::Database>> db = storage::Database::Open(
        {.path = dir_ + "/db", .sync_writes = false, .block_cache_mb = 8}, ColumnFamilies());
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    absl::StatusOr<std::unique_ptr<cas::Store>> store = cas::Store::Open(
        db_.get(),
        cas::StoreOptions{.chunking_threshold = kChunkingThreshold, .chunk_avg_bytes = kChunkAvg});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<capability::PrivateKey> key = capability::PrivateKey::Generate();
    ASSERT_TRUE(key.ok()) << key.status();
    key_ = std::make_unique<capability::PrivateKey>(*std::move(key));
    absl::StatusOr<std::unique_ptr<audit::AuditLog>> log = audit::AuditLog::Open(
        db_.get(), key_.get(), {.vault_name = "vault-t", .background_checkpoints = false});
    ASSERT_TRUE(log.ok()) << log.status();
    audit_log_ = *std::move(log);
    auditor_ = std::make_unique<Auditor>(audit_log_.get(), vault::v1::VaultConfig(),
                                         key_->public_key().ToText());
    executor_ = std::make_unique<common::Executor>(/*threads=*/4, /*max_queue=*/256);
    service_ = std::make_unique<CasService>(store_.get(), executor_.get(), kLimits, auditor_.get());
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = vault::v1::Cas::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }

  void TearDown() override {
    stub_.reset();
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      server_->Wait();
    }
    if (executor_ != nullptr) executor_->Shutdown();
    server_.reset();
    service_.reset();
    executor_.reset();
    auditor_.reset();
    audit_log_.reset();
    store_.reset();
    db_.reset();
  }

  vault::v1::Cas::StubInterface* stub() { return stub_.get(); }

  // Stores `objects` with one BatchPut and expects every item to succeed.
  std::vector<uint64_t> MustBatchPut(const std::vector<std::string>& objects) {
    BatchPutRequest req;
    for (const std::string& o : objects) {
      BatchPutRequest::Item* item = req.add_items();
      *item->mutable_digest() = DigestOf(o);
      item->set_data(o);
    }
    BatchPutResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub()->BatchPut(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<uint64_t> seqs;
    for (const vault::v1::PutResult& r : resp.results()) {
      EXPECT_EQ(r.status().code(), 0) << r.status().message();
      seqs.push_back(r.seq());
    }
    return seqs;
  }

  StatResponse MustStat(const vault::v1::Digest& digest) {
    StatRequest req;
    *req.mutable_digest() = digest;
    StatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    grpc::Status s = stub()->Stat(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  // A streaming Put: the first message carries `digest` and `offset`, `data` goes out in
  // messages of `piece` bytes (one message when `data` is empty).
  grpc::Status Put(const vault::v1::Digest& digest, uint64_t offset, absl::string_view data,
                   PutResponse* resp = nullptr, size_t piece = kPiece) {
    PutResponse ignored;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::unique_ptr<grpc::ClientWriterInterface<PutRequest>> writer =
        stub()->Put(&ctx, resp != nullptr ? resp : &ignored);
    size_t pos = 0;
    do {
      PutRequest req;
      if (pos == 0) {
        *req.mutable_digest() = digest;
        req.set_offset(offset);
      }
      const size_t n = std::min(piece, data.size() - pos);
      req.set_data(std::string(data.substr(pos, n)));
      pos += n;
      if (!writer->Write(req)) break;  // the server finished early: Finish has its status
    } while (pos < data.size());
    writer->WritesDone();
    return writer->Finish();
  }

  GetResult Get(const vault::v1::Digest& digest, uint64_t offset, uint64_t limit) {
    GetRequest req;
    *req.mutable_digest() = digest;
    req.set_offset(offset);
    req.set_limit(limit);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::unique_ptr<grpc::ClientReaderInterface<GetResponse>> reader = stub()->Get(&ctx, req);
    GetResult out;
    GetResponse resp;
    while (reader->Read(&resp)) {
      if (resp.offset() != offset + out.data.size()) out.contiguous = false;
      if (resp.data().size() > kLimits.get_piece_bytes) out.contiguous = false;
      out.data += resp.data();
      ++out.messages;
    }
    out.status = reader->Finish();
    return out;
  }

  FeedResult Feed(uint64_t after_seq, uint32_t limit) {
    FeedRequest req;
    req.set_after_seq(after_seq);
    req.set_limit(limit);
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    std::unique_ptr<grpc::ClientReaderInterface<FeedResponse>> reader = stub()->Feed(&ctx, req);
    FeedResult out;
    FeedResponse resp;
    while (reader->Read(&resp)) {
      for (const vault::v1::FeedEntry& e : resp.entries()) out.seqs.push_back(e.seq());
      out.messages.push_back(resp);
    }
    out.status = reader->Finish();
    return out;
  }

  common::testing::TempDir tmp_{"cas_service_test"};
  std::string dir_;
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<cas::Store> store_;
  std::unique_ptr<capability::PrivateKey> key_;
  std::unique_ptr<audit::AuditLog> audit_log_;
  std::unique_ptr<Auditor> auditor_;
  std::unique_ptr<common::Executor> executor_;
  std::unique_ptr<CasService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<vault::v1::Cas::Stub> stub_;
};

}  // namespace
}  // namespace vault::node

#endif  // VAULT_NODE_CAS_SERVICE_TEST_FIXTURE_H_
