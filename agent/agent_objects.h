// agent/agent_objects: which agent stored, or was given, which CAS object, and which principal
// was charged for it (design §12). The collector holds an agent's objects while the agent may
// read them; when it removes one, the bytes go back to the principal charged, in the same write
// (AddRemoval), so storage accounting stays exact across deletions and restarts.
//
// Column families: "agent_objects" (object key (40 bytes) + agent id -> AgentObjectRecord) and
// "storage_refunds" (principal \0 object key + agent id + time -> bytes, big-endian 64-bit): the
// bytes given back, summed per principal at start.
//
//   AgentObjects objects(db);
//   VAULT_RETURN_IF_ERROR(objects.Record(agent_id, principal, digest, /*charged=*/size));
//   ... store the object (its synced write makes the entry durable) ...
//
// Thread-safety: thread-safe.
#ifndef VAULT_AGENT_AGENT_OBJECTS_H_
#define VAULT_AGENT_AGENT_OBJECTS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cas/digest.h"
#include "rocksdb/write_batch.h"
#include "storage/database.h"

namespace vault::agent {

struct AgentObject {
  cas::Digest digest;
  std::string agent_id;
  std::string principal;
  uint64_t charged = 0;  // bytes charged to the principal for it (0: stored before, or given)
};

struct StorageRefund {
  std::string principal;
  uint64_t bytes = 0;
};

class AgentObjects {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  explicit AgentObjects(const storage::Database* db);

  // Records that `agent_id` holds `digest`, before the object is stored or given: unsynced, made
  // durable by the store's own synced write that follows (a crash before leaves an entry
  // without an object, which nothing reads). A second record of the same pair replaces it.
  absl::Status Record(const std::string& agent_id, const std::string& principal,
                      const cas::Digest& digest, uint64_t charged);
  // Every entry, in object key order.
  absl::Status ForEach(const std::function<void(const AgentObject&)>& fn) const;
  // Adds to `batch` the deletion of the entries of `digest` whose agent `keep` does not name,
  // and the refunds of the bytes charged for them, which are appended to *refunds (applied to
  // the quotas once written). (An agent that recorded the object after the collector read the
  // roots is about to store it again: its entry stays.) Nothing is added on an error.
  absl::Status AddRemoval(const cas::Digest& digest,
                          const std::function<bool(const std::string& agent_id)>& keep,
                          rocksdb::WriteBatch* batch, std::vector<StorageRefund>* refunds) const;
  // The bytes given back to each principal since the vault began.
  absl::StatusOr<absl::flat_hash_map<std::string, uint64_t>> Refunds() const;

 private:
  const storage::Database* const db_;
  rocksdb::ColumnFamilyHandle* const objects_;
  rocksdb::ColumnFamilyHandle* const refunds_;
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_AGENT_OBJECTS_H_
