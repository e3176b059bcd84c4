#include "replication/follower.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "replication/internal/rpc.h"
#include "rocksdb/write_batch.h"
#include "storage/keys.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::replication {
namespace {

using internal::Context;
using internal::FromGrpc;
using internal::ToProto;

constexpr char kColumnFamily[] = "replication";
constexpr uint32_t kFeedPage = 1000;
constexpr uint64_t kSmallObject = 1 << 20;  // fetched with BatchGet below this
constexpr uint64_t kBatchBytes = 3 << 20;
constexpr absl::Duration kCallTimeout = absl::Seconds(30);
constexpr uint64_t kMinRate = 4 << 20;  // bytes per second a Get stream is given time for

std::string CursorKey(const std::string& peer) { return absl::StrCat("follow/", peer); }

// A failure of the bytes themselves (the object is refused), as opposed to one of the transfer.
bool Refusal(const absl::Status& s) { return absl::IsInvalidArgument(s) || absl::IsDataLoss(s); }

}  // namespace

std::vector<storage::ColumnFamilySpec> Follower::ColumnFamilies() {
  return {{.name = kColumnFamily, .point_lookups = true}};
}

absl::StatusOr<uint64_t> Follower::LoadCursor(storage::Database* db, const std::string& peer) {
  std::string value;
  rocksdb::Status s =
      db->db()->Get(rocksdb::ReadOptions(), db->Handle(kColumnFamily), CursorKey(peer), &value);
  if (s.IsNotFound()) return 0;
  VAULT_RETURN_IF_ERROR(storage::ToStatus(s, "read follow cursor"));
  if (value.size() != 8) return absl::DataLossError("follow cursor is not 8 bytes");
  return storage::ParseBigEndian64(value);
}

class Follower::Peer {
 public:
  Peer(const FollowerDeps& deps, vault::v1::FollowConfig config,
       std::shared_ptr<grpc::Channel> channel)
      : deps_(deps),
        config_(std::move(config)),
        stub_(vault::v1::Cas::NewStub(std::move(channel))) {}
  ~Peer() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  bool stopping() {
    absl::MutexLock lock(&mu_);
    return stop_;
  }

  void Loop() {
    (void)Audit({audit::MakeEntry(deps_.self_key, "replication.follow", config_.peer(),
                                  vault::v1::AuditEntry::ALLOWED, "",
                                  {{"stage", "started"},
                                   {"min_bytes", absl::StrCat(config_.selection().min_bytes())},
                                   {"max_bytes", absl::StrCat(config_.selection().max_bytes())}})});
    while (!stopping()) {
      absl::StatusOr<bool> more = Round();
      if (more.ok() && *more) continue;  // a full page: read on at once
      absl::MutexLock lock(&mu_);
      auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
      mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Milliseconds(config_.interval_ms()));
    }
  }

  absl::Status Audit(std::vector<vault::v1::AuditEntry> entries) {
    if (entries.empty() || deps_.log == nullptr) return absl::OkStatus();
    return deps_.log->AppendMany(absl::MakeSpan(entries)).status();
  }

  bool Selected(const cas::Digest& d) const {
    const auto& s = config_.selection();
    return d.size() >= s.min_bytes() && (s.max_bytes() == 0 || d.size() <= s.max_bytes());
  }

  // One page of the feed. True when the page was full and fully done (more may follow).
  absl::StatusOr<bool> Round() {
    VAULT_ASSIGN_OR_RETURN(const uint64_t cursor, LoadCursor(deps_.db, config_.peer()));
    std::vector<std::pair<uint64_t, cas::Digest>> entries;
    {
      vault::v1::FeedRequest req;
      req.set_after_seq(cursor);
      req.set_limit(kFeedPage);
      std::unique_ptr<grpc::ClientContext> ctx = Context(kCallTimeout);
      std::unique_ptr<grpc::ClientReader<vault::v1::FeedResponse>> reader =
          stub_->Feed(ctx.get(), req);
      vault::v1::FeedResponse page;
      uint64_t expect = cursor;
      while (reader->Read(&page)) {
        for (const vault::v1::FeedEntry& e : page.entries()) {
          absl::StatusOr<cas::Digest> d = internal::FromProto(e.digest());
          if (!d.ok() || e.seq() <= expect) {
            ctx->TryCancel();
            (void)reader->Finish();
            return absl::DataLossError(
                absl::StrCat("Feed of ", config_.peer(), ": malformed or out-of-order entry"));
          }
          expect = e.seq();
          entries.emplace_back(e.seq(), *std::move(d));
        }
      }
      VAULT_RETURN_IF_ERROR(FromGrpc(reader->Finish(), absl::StrCat("Feed of ", config_.peer())));
    }
    if (entries.empty()) return false;

    std::vector<cas::Digest> wanted;
    for (const auto& [seq, d] : entries) {
      if (Selected(d)) wanted.push_back(d);
    }
    VAULT_ASSIGN_OR_RETURN(std::vector<cas::Digest> missing, deps_.store->FindMissing(wanted));
    absl::flat_hash_set<cas::Digest> failed;  // not stored this round: the cursor stays before
    std::vector<vault::v1::AuditEntry> refusals;
    uint64_t stored = 0, stored_bytes = 0, first_seq = 0, last_seq = 0;
    std::string listing;
    auto record = [&](const cas::Digest& d, const absl::StatusOr<cas::PutOutcome>& outcome) {
      if (outcome.ok()) {
        if (outcome->already_present) return;
        ++stored;
        stored_bytes += d.size();
        if (first_seq == 0) first_seq = outcome->seq;
        last_seq = outcome->seq;
        absl::StrAppend(&listing, d.ToString(), "\n");
        return;
      }
      failed.insert(d);
      if (Refusal(outcome.status()) && refused_.insert(d).second && refusals.size() < 16) {
        refusals.push_back(
            audit::MakeEntry(deps_.self_key, "replication.follow", d.ToString(),
                             vault::v1::AuditEntry::DENIED, std::string(outcome.status().message()),
                             {{"peer", config_.peer()},
                              {"stage", "refused"},
                              {"code", absl::StatusCodeToString(outcome.status().code())}}));
      }
    };

    absl::Status transfer = absl::OkStatus();
    std::vector<cas::Digest> batch;
    uint64_t batch_bytes = 0;
    auto flush = [&]() -> absl::Status {
      if (batch.empty()) return absl::OkStatus();
      VAULT_RETURN_IF_ERROR(FetchBatch(batch, record));
      batch.clear();
      batch_bytes = 0;
      return absl::OkStatus();
    };
    for (const cas::Digest& d : missing) {
      if (stopping()) {
        transfer = absl::CancelledError("stopping");
        break;
      }
      if (d.size() >= kSmallObject) {
        absl::StatusOr<cas::PutOutcome> outcome = FetchLarge(d);
        if (!outcome.ok() && !Refusal(outcome.status())) {
          transfer = outcome.status();
          break;
        }
        record(d, outcome);
        continue;
      }
      if (!batch.empty() && batch_bytes + d.size() > kBatchBytes) {
        transfer = flush();
        if (!transfer.ok()) break;
      }
      batch.push_back(d);
      batch_bytes += d.size();
    }
    if (transfer.ok()) transfer = flush();

    // The cursor passes every entry before the first one not stored; after a transfer failure it
    // stays (what was stored is found present next round).
    uint64_t next = cursor;
    if (transfer.ok()) {
      for (const auto& [seq, d] : entries) {
        if (failed.contains(d)) break;
        next = seq;
      }
    }
    if (stored > 0) {
      refusals.insert(
          refusals.begin(),
          audit::MakeEntry(deps_.self_key, "replication.follow", config_.peer(),
                           vault::v1::AuditEntry::ALLOWED, "",
                           {{"stage", "stored"},
                            {"objects", absl::StrCat(stored)},
                            {"bytes", absl::StrCat(stored_bytes)},
                            {"feed_first", absl::StrCat(first_seq)},
                            {"feed_last", absl::StrCat(last_seq)},
                            {"digests_sha256", absl::BytesToHexString(cas::Sha256::Hash(listing))},
                            {"peer_cursor", absl::StrCat(next)}}));
    }
    VAULT_RETURN_IF_ERROR(Audit(std::move(refusals)));
    if (next > cursor) {
      // Every object before `next` is durable (the store acknowledges only durable writes).
      rocksdb::WriteBatch wb;
      wb.Put(deps_.db->Handle(kColumnFamily), CursorKey(config_.peer()),
             storage::BigEndian64(next));
      VAULT_RETURN_IF_ERROR(deps_.db->Write(&wb));
    }
    VAULT_RETURN_IF_ERROR(transfer);
    return entries.size() == kFeedPage && failed.empty();
  }

  template <typename Record>
  absl::Status FetchBatch(const std::vector<cas::Digest>& digests, Record& record) {
    vault::v1::BatchGetRequest req;
    for (const cas::Digest& d : digests) ToProto(d, req.add_digests());
    vault::v1::BatchGetResponse resp;
    VAULT_RETURN_IF_ERROR(FromGrpc(stub_->BatchGet(Context(kCallTimeout).get(), req, &resp),
                                   absl::StrCat("BatchGet from ", config_.peer())));
    if (resp.items_size() != req.digests_size()) {
      return absl::DataLossError("BatchGet: the peer answered the wrong number of items");
    }
    std::vector<cas::PutItem> items;
    std::vector<size_t> index;
    for (int i = 0; i < resp.items_size(); ++i) {
      absl::Status s = internal::FromItem(resp.items(i).status());
      if (!s.ok()) {
        // The peer could not serve it (not a refusal of bytes): the cursor waits for it.
        record(digests[i], absl::StatusOr<cas::PutOutcome>(
                               absl::UnavailableError(absl::StrCat("peer: ", s.message()))));
        continue;
      }
      items.push_back(cas::PutItem{digests[i], resp.items(i).data()});
      index.push_back(static_cast<size_t>(i));
    }
    // The store hashes every item and refuses a mismatch (INVALID_ARGUMENT).
    std::vector<absl::StatusOr<cas::PutOutcome>> outcomes = deps_.store->PutMany(items);
    for (size_t k = 0; k < outcomes.size(); ++k) record(digests[index[k]], outcomes[k]);
    return absl::OkStatus();
  }

  // A large object: resumed at this vault's durable offset, chunks stored here taken from here,
  // the rest fetched with Get; verified by the store before it is stored.
  absl::StatusOr<cas::PutOutcome> FetchLarge(const cas::Digest& d) {
    VAULT_ASSIGN_OR_RETURN(uint64_t offset, deps_.store->UploadOffset(d));
    absl::StatusOr<std::unique_ptr<cas::Upload>> started = deps_.store->StartUpload(d, offset);
    if (absl::IsFailedPrecondition(started.status())) {
      offset = 0;
      started = deps_.store->StartUpload(d, 0);
    }
    if (!started.ok()) return started.status();
    std::unique_ptr<cas::Upload> upload = *std::move(started);

    // The peer's chunks; a manifest that does not add up is ignored (it only decides what is
    // taken from here: the object's hash is checked either way).
    std::vector<cas::ChunkInfo> chunks;
    {
      vault::v1::GetManifestRequest req;
      ToProto(d, req.mutable_digest());
      vault::v1::GetManifestResponse resp;
      if (stub_->GetManifest(Context(kCallTimeout).get(), req, &resp).ok()) {
        uint64_t total = 0;
        for (const vault::v1::ChunkDigest& c : resp.chunks()) {
          chunks.push_back({c.sha256(), c.size()});
          total += c.size();
        }
        if (total != d.size() || chunks.size() < 2) chunks.clear();
      }
    }
    absl::flat_hash_set<std::string> lacking;
    if (!chunks.empty()) {
      VAULT_ASSIGN_OR_RETURN(std::vector<cas::ChunkInfo> missing,
                             deps_.store->FindMissingChunks(chunks));
      for (const cas::ChunkInfo& c : missing) lacking.insert(c.sha256);
    }
    uint64_t pending_from = offset, pending_to = offset;  // bytes still to fetch
    auto fetch_pending = [&]() -> absl::Status {
      if (pending_to > pending_from) {
        VAULT_RETURN_IF_ERROR(Fetch(d, pending_from, pending_to - pending_from, upload.get()));
      }
      pending_from = pending_to;
      return absl::OkStatus();
    };
    if (chunks.empty()) {
      pending_to = d.size();
    } else {
      uint64_t at = 0;
      for (const cas::ChunkInfo& c : chunks) {
        const uint64_t start = at, end = at + c.size;
        at = end;
        if (end <= offset) continue;
        if (start >= offset && !lacking.contains(c.sha256)) {
          VAULT_RETURN_IF_ERROR(fetch_pending());
          absl::Status s = upload->AppendStoredChunk(c.sha256, c.size);
          if (s.ok()) {
            pending_from = pending_to = end;
            continue;
          }
          if (!absl::IsFailedPrecondition(s) && !absl::IsDataLoss(s)) return s;
        }
        pending_to = end;  // fetched
      }
    }
    VAULT_RETURN_IF_ERROR(fetch_pending());
    return upload->Finish();
  }

  absl::Status Fetch(const cas::Digest& d, uint64_t offset, uint64_t limit, cas::Upload* upload) {
    vault::v1::GetRequest req;
    ToProto(d, req.mutable_digest());
    req.set_offset(offset);
    req.set_limit(limit);
    std::unique_ptr<grpc::ClientContext> ctx =
        Context(kCallTimeout + absl::Seconds(static_cast<double>(limit) / kMinRate));
    std::unique_ptr<grpc::ClientReader<vault::v1::GetResponse>> reader = stub_->Get(ctx.get(), req);
    vault::v1::GetResponse piece;
    uint64_t at = offset;
    absl::Status local = absl::OkStatus();
    while (local.ok() && reader->Read(&piece)) {
      if (piece.offset() != at || piece.data().size() > offset + limit - at) {
        local = absl::DataLossError(absl::StrCat("Get from ", config_.peer(), ": piece at ",
                                                 piece.offset(), ", expected ", at));
        break;
      }
      at += piece.data().size();
      local = upload->Append(piece.data());
      if (stopping()) local = absl::CancelledError("stopping");
    }
    if (!local.ok()) ctx->TryCancel();
    absl::Status finished = FromGrpc(reader->Finish(), absl::StrCat("Get from ", config_.peer()));
    VAULT_RETURN_IF_ERROR(local);
    VAULT_RETURN_IF_ERROR(finished);
    if (at != offset + limit) {
      return absl::DataLossError(absl::StrCat("Get from ", config_.peer(), ": ended at ", at,
                                              ", expected ", offset + limit));
    }
    return absl::OkStatus();
  }

  const FollowerDeps deps_;
  const vault::v1::FollowConfig config_;
  std::unique_ptr<vault::v1::Cas::Stub> stub_;
  absl::flat_hash_set<cas::Digest> refused_;  // audited already (the follower's thread only)
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<Follower>> Follower::Start(
    FollowerDeps deps, const std::vector<vault::v1::FollowConfig>& follows) {
  std::unique_ptr<Follower> f(new Follower());
  for (const vault::v1::FollowConfig& c : follows) {
    if (deps.members == nullptr) {
      return absl::FailedPreconditionError("following a peer needs TLS material");
    }
    VAULT_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, deps.members->Get(c.peer()));
    f->peers_.push_back(std::make_unique<Peer>(deps, c, std::move(channel)));
  }
  for (auto& p : f->peers_) p->Start();
  return f;
}

Follower::~Follower() { Stop(); }

void Follower::Stop() {
  for (auto& p : peers_) p->Stop();
}

}  // namespace vault::replication
