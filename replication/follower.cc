#include "replication/follower.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "replication/fetcher.h"
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
constexpr absl::Duration kCallTimeout = absl::Seconds(30);

std::string CursorKey(const std::string& peer) { return absl::StrCat("follow/", peer); }

bool Refusal(const absl::Status& s) { return Fetcher::Refusal(s); }

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
        stub_(vault::v1::Cas::NewStub(channel)),
        fetcher_(deps.store, channel, config_.peer(), [this] { return stopping(); }) {}
  ~Peer() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }
  FollowStatus Status() const {
    absl::MutexLock lock(&status_mu_);
    return status_;
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
    SetCursor(cursor);
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
        {
          absl::MutexLock lock(&status_mu_);
          status_.peer_last_seq = page.last_seq();
        }
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
      // Removed at the peer since its feed listed it (deletion is local to each vault): skipped.
      if (Fetcher::RemovedAtPeer(outcome.status())) return;
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

    absl::Status transfer = fetcher_.FetchAll(missing, record);

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
      SetCursor(next);
    }
    VAULT_RETURN_IF_ERROR(transfer);
    return entries.size() == kFeedPage && failed.empty();
  }

  void SetCursor(uint64_t cursor) {
    absl::MutexLock lock(&status_mu_);
    status_.cursor = cursor;
  }

  const FollowerDeps deps_;
  const vault::v1::FollowConfig config_;
  std::unique_ptr<vault::v1::Cas::Stub> stub_;
  Fetcher fetcher_;
  absl::flat_hash_set<cas::Digest> refused_;  // audited already (the follower's thread only)
  std::thread thread_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::Mutex status_mu_;
  FollowStatus status_ ABSL_GUARDED_BY(status_mu_){.peer = config_.peer()};
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

std::vector<FollowStatus> Follower::Statuses() const {
  std::vector<FollowStatus> out;
  out.reserve(peers_.size());
  for (const auto& p : peers_) out.push_back(p->Status());
  return out;
}

}  // namespace vault::replication
