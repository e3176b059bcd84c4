#include "replication/scrubber.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_macros.h"
#include "replication/fetcher.h"
#include "rocksdb/write_batch.h"
#include "storage/keys.h"

namespace vault::replication {
namespace {

constexpr char kColumnFamily[] = "replication";  // declared by Follower::ColumnFamilies
constexpr char kPositionKey[] = "scrub/position";
constexpr size_t kPage = 64;                   // keys listed at once
constexpr uint64_t kObjectCost = 512;          // bytes each object counts beyond its size
constexpr uint64_t kMaxRepairBytes = 1 << 30;  // repaired objects are held in memory
constexpr size_t kPieceBytes = 1 << 20;
constexpr absl::Duration kSaveEvery = absl::Seconds(1);

}  // namespace

absl::StatusOr<std::unique_ptr<Scrubber>> Scrubber::Start(ScrubberDeps deps,
                                                          const vault::v1::ScrubConfig& config) {
  if (config.bytes_per_second() == 0) {
    return absl::InvalidArgumentError("the scrub needs scrub.bytes_per_second");
  }
  VAULT_RETURN_IF_ERROR(LoadPosition(deps.db).status());  // a damaged position fails the start
  std::unique_ptr<Scrubber> s(new Scrubber(std::move(deps), config));
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

Scrubber::Scrubber(ScrubberDeps deps, vault::v1::ScrubConfig config)
    : deps_(std::move(deps)), config_(std::move(config)) {}

Scrubber::~Scrubber() { Stop(); }

void Scrubber::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

ScrubCounters Scrubber::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

bool Scrubber::stopping() {
  absl::MutexLock lock(&mu_);
  return stop_;
}

bool Scrubber::Sleep(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
  return !mu_.AwaitWithTimeout(absl::Condition(&stop), d);
}

bool Scrubber::Spend(uint64_t bytes) {
  window_bytes_ += bytes;
  const absl::Duration due = absl::Seconds(static_cast<double>(window_bytes_) /
                                           static_cast<double>(config_.bytes_per_second()));
  const absl::Duration ahead = due - (absl::Now() - window_start_);
  if (ahead > absl::ZeroDuration()) return Sleep(ahead);
  if (ahead < -absl::Seconds(1)) {
    // Far behind (a slow disk, a long repair): do not burst to catch up.
    window_start_ = absl::Now();
    window_bytes_ = 0;
  }
  return !stopping();
}

absl::StatusOr<std::string> Scrubber::LoadPosition(storage::Database* db) {
  std::string value;
  rocksdb::Status s =
      db->db()->Get(rocksdb::ReadOptions(), db->Handle(kColumnFamily), kPositionKey, &value);
  if (s.IsNotFound()) return std::string();
  VAULT_RETURN_IF_ERROR(storage::ToStatus(s, "read scrub position"));
  return value;
}

absl::Status Scrubber::SavePosition(const std::string& key) {
  rocksdb::WriteBatch wb;
  wb.Put(deps_.db->Handle(kColumnFamily), kPositionKey, key);
  return deps_.db->Write(&wb);
}

void Scrubber::Loop() {
  absl::StatusOr<std::string> loaded = LoadPosition(deps_.db);
  std::string position = loaded.ok() ? *loaded : std::string();
  std::string saved = position;
  absl::Time last_save = absl::Now();
  window_start_ = absl::Now();
  window_bytes_ = 0;
  while (!stopping()) {
    // The first key after the position ("\0" sorts right after it).
    const std::string from = position.empty() ? std::string() : position + std::string(1, '\0');
    absl::StatusOr<std::vector<cas::Digest>> page = deps_.store->ListKeys(from, kPage);
    if (!page.ok()) {
      if (!Sleep(absl::Seconds(1))) break;
      continue;
    }
    if (page->empty()) {
      position.clear();
      (void)SavePosition(position);
      saved = position;
      {
        absl::MutexLock lock(&mu_);
        ++counters_.passes;
      }
      if (!Sleep(absl::Milliseconds(config_.interval_ms()))) break;
      window_start_ = absl::Now();
      window_bytes_ = 0;
      continue;
    }
    for (const cas::Digest& d : *page) {
      absl::Status s = Check(d);
      if (absl::IsCancelled(s)) break;
      position = d.Key();
      const uint64_t rest = d.size() > object_spent_ ? d.size() - object_spent_ : 0;
      if (!Spend(rest + kObjectCost)) break;
    }
    if (position != saved && absl::Now() - last_save >= kSaveEvery) {
      if (SavePosition(position).ok()) saved = position;
      last_save = absl::Now();
    }
  }
  if (position != saved) (void)SavePosition(position);
}

absl::Status Scrubber::Verify(const cas::Digest& d, bool throttle) {
  cas::Sha256 hash;
  uint64_t read = 0;
  object_spent_ = 0;
  absl::Status s = deps_.store->Read(d, 0, 0, kPieceBytes,
                                     [&](uint64_t, absl::string_view piece) -> absl::Status {
                                       hash.Update(piece);
                                       read += piece.size();
                                       // Large objects are paced piece by piece (the object's own
                                       // Spend covers the rest).
                                       if (throttle && piece.size() == kPieceBytes) {
                                         object_spent_ += piece.size();
                                         if (!Spend(piece.size()))
                                           return absl::CancelledError("stopping");
                                       }
                                       return absl::OkStatus();
                                     });
  if (!s.ok()) return s;
  if (read != d.size() || hash.Finish() != d.sha256()) {
    return absl::DataLossError(
        absl::StrCat("its stored bytes (", read, ") do not hash to the digest"));
  }
  return absl::OkStatus();
}

absl::Status Scrubber::Check(const cas::Digest& d) {
  absl::Status s = Verify(d, /*throttle=*/true);
  if (absl::IsCancelled(s)) return s;
  {
    absl::MutexLock lock(&mu_);
    ++counters_.objects;
    counters_.bytes += d.size();
    if (!s.ok()) ++counters_.damaged;
  }
  if (s.ok()) return s;
  // Every failure is a finding: DATA_LOSS for damaged bytes, NOT_FOUND for a lost chunk or record
  // (objects are never deleted, and this one was just listed).
  Repair(d, s);
  return absl::OkStatus();
}

void Scrubber::Repair(const cas::Digest& d, const absl::Status& problem) {
  std::string from;
  std::vector<std::string> attempts;
  if (deps_.members == nullptr) {
    attempts.push_back("no TLS material: no member can be asked");
  } else if (d.size() > kMaxRepairBytes) {
    attempts.push_back(absl::StrCat("larger than ", kMaxRepairBytes, " bytes: not repaired"));
  } else {
    std::vector<std::string> peers(config_.repair_from().begin(), config_.repair_from().end());
    if (peers.empty()) peers = deps_.members->Peers();
    if (peers.empty()) attempts.push_back("no member to ask");
    for (const std::string& peer : peers) {
      absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = deps_.members->Get(peer);
      if (!channel.ok()) {
        attempts.push_back(absl::StrCat(peer, ": ", channel.status().message()));
        continue;
      }
      Fetcher fetcher(deps_.store, *channel, peer, [this] { return stopping(); });
      absl::StatusOr<std::string> data = fetcher.ReadVerified(d, kMaxRepairBytes);
      absl::Status s = data.status();
      if (s.ok()) s = deps_.store->Repair(d, *data);
      if (s.ok()) s = Verify(d, /*throttle=*/false);
      if (s.ok()) {
        from = peer;
        break;
      }
      attempts.push_back(absl::StrCat(peer, ": ", s.message()));
      if (stopping()) break;
    }
  }
  const bool repaired = !from.empty();
  if (repaired) {
    reported_.erase(d);
    absl::MutexLock lock(&mu_);
    ++counters_.repaired;
  } else if (!reported_.insert(d).second) {
    return;  // audited already in this run
  }
  std::vector<std::pair<std::string, std::string>> details = {
      {"problem", std::string(problem.message())},
      {"code", absl::StatusCodeToString(problem.code())},
      {"repaired", repaired ? "true" : "false"}};
  if (repaired) {
    details.emplace_back("from", from);
  } else {
    details.emplace_back("attempts", absl::StrJoin(attempts, "; "));
  }
  if (deps_.log == nullptr) return;
  std::vector<vault::v1::AuditEntry> entries = {
      audit::MakeEntry(deps_.self_key, "cas.scrub", d.ToString(),
                       repaired ? vault::v1::AuditEntry::ALLOWED : vault::v1::AuditEntry::DENIED,
                       repaired ? absl::StrCat("damaged object repaired from ", from)
                                : std::string("damaged object could not be repaired"),
                       std::move(details))};
  (void)deps_.log->AppendMany(absl::MakeSpan(entries));
}

}  // namespace vault::replication
