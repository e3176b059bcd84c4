#include "agent/agent_store.h"

#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "storage/keys.h"

namespace vault::agent {
namespace {

constexpr char kAgents[] = "agents";
constexpr char kLogs[] = "agent_logs";

std::string LogPrefix(const std::string& id) { return absl::StrCat(id, std::string(1, '\0')); }
std::string LogKey(const std::string& id, uint64_t seq) {
  return absl::StrCat(LogPrefix(id), storage::BigEndian64(seq));
}

}  // namespace

// Agent ids: 1-64 of [a-z0-9-], starting with a letter or digit ("a-" + hex by vaultctl).
absl::Status ValidateAgentId(const std::string& id) {
  bool ok = !id.empty() && id.size() <= 64 && id.front() != '-';
  for (char c : id) ok = ok && (absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-');
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent id \"", absl::CHexEscape(id), "\" must be 1-64 of [a-z0-9-]"));
  }
  return absl::OkStatus();
}

std::string StateName(vault::v1::AgentState state) {
  std::string name = vault::v1::AgentState_Name(state);
  return absl::AsciiStrToLower(name);
}

std::vector<storage::ColumnFamilySpec> AgentStore::ColumnFamilies() {
  return {{.name = kAgents}, {.name = kLogs, .point_lookups = false}};
}

absl::Status AgentStore::Put(const vault::v1::AgentRecord& record) {
  rocksdb::WriteBatch batch;
  batch.Put(db_->Handle(kAgents), storage::ToSlice(record.id()), record.SerializeAsString());
  return db_->Write(&batch);
}

absl::Status AgentStore::PutUnsynced(const vault::v1::AgentRecord& record) {
  rocksdb::WriteBatch batch;
  AddPut(&batch, record);
  return db_->WriteUnsynced(&batch);
}

void AgentStore::AddPut(rocksdb::WriteBatch* batch, const vault::v1::AgentRecord& record) const {
  batch->Put(db_->Handle(kAgents), storage::ToSlice(record.id()), record.SerializeAsString());
}

absl::StatusOr<vault::v1::AgentRecord> AgentStore::Get(const std::string& id) const {
  std::string value;
  rocksdb::Status s =
      db_->db()->Get(rocksdb::ReadOptions(), db_->Handle(kAgents), storage::ToSlice(id), &value);
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat("no agent ", id, " on this vault"));
  VAULT_RETURN_IF_ERROR(storage::ToStatus(s, "read an agent record"));
  vault::v1::AgentRecord record;
  if (!record.ParseFromString(value)) {
    return absl::DataLossError(absl::StrCat("the record of agent ", id, " does not parse"));
  }
  return record;
}

absl::StatusOr<std::vector<vault::v1::AgentRecord>> AgentStore::LoadAll() const {
  std::vector<vault::v1::AgentRecord> out;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle(kAgents)));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    vault::v1::AgentRecord record;
    if (!record.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError(
          absl::StrCat("the record of agent ", it->key().ToString(), " does not parse"));
    }
    out.push_back(std::move(record));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "read the agent records"));
  return out;
}

uint64_t AgentStore::NextSeqLocked(const std::string& id) {
  auto it = next_seq_.find(id);
  if (it != next_seq_.end()) return it->second;
  uint64_t next = 1;
  std::string upper = LogKey(id, ~uint64_t{0});
  std::unique_ptr<rocksdb::Iterator> iter(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle(kLogs)));
  iter->SeekForPrev(storage::ToSlice(upper));
  std::string prefix = LogPrefix(id);
  if (iter->Valid() && iter->key().starts_with(storage::ToSlice(prefix))) {
    next = storage::ParseBigEndian64(storage::View(iter->key()).substr(prefix.size())) + 1;
  }
  next_seq_[id] = next;
  return next;
}

absl::Status AgentStore::AppendLog(const std::string& id, vault::v1::AgentLogLine line) {
  absl::MutexLock lock(&log_mu_);
  uint64_t seq = NextSeqLocked(id);
  line.set_seq(seq);
  rocksdb::WriteBatch batch;
  batch.Put(db_->Handle(kLogs), storage::ToSlice(LogKey(id, seq)), line.SerializeAsString());
  // Keep the newest kLogLinesKept lines: drop older ones every 1000 lines.
  if (seq > kLogLinesKept && seq % 1000 == 0) {
    batch.DeleteRange(db_->Handle(kLogs), storage::ToSlice(LogKey(id, 0)),
                      storage::ToSlice(LogKey(id, seq - kLogLinesKept)));
  }
  VAULT_RETURN_IF_ERROR(db_->WriteUnsynced(&batch));
  next_seq_[id] = seq + 1;
  log_cv_.SignalAll();
  return absl::OkStatus();
}

std::vector<vault::v1::AgentLogLine> AgentStore::ReadLogs(const std::string& id, uint64_t from_seq,
                                                          size_t max) const {
  std::vector<vault::v1::AgentLogLine> out;
  std::string prefix = LogPrefix(id);
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle(kLogs)));
  for (it->Seek(storage::ToSlice(LogKey(id, from_seq)));
       it->Valid() && it->key().starts_with(storage::ToSlice(prefix)) && out.size() < max;
       it->Next()) {
    vault::v1::AgentLogLine line;
    if (line.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      out.push_back(std::move(line));
    }
  }
  return out;
}

bool AgentStore::WaitForLogs(const std::string& id, uint64_t from_seq, absl::Time deadline) {
  absl::MutexLock lock(&log_mu_);
  while (!woken_ && NextSeqLocked(id) <= from_seq) {
    if (log_cv_.WaitWithDeadline(&log_mu_, deadline)) break;  // timed out
  }
  return NextSeqLocked(id) > from_seq;
}

void AgentStore::WakeAll() {
  absl::MutexLock lock(&log_mu_);
  woken_ = true;
  log_cv_.SignalAll();
}

}  // namespace vault::agent
