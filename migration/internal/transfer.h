// migration/internal/transfer: what both sides of a hop name the same way (source.cc,
// destination.cc). Private to migration/.
#ifndef VAULT_MIGRATION_INTERNAL_TRANSFER_H_
#define VAULT_MIGRATION_INTERNAL_TRANSFER_H_

#include <cstdint>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "vault/v1/migration.pb.h"

namespace vault::migration {

// The column family of transfer records (by transfer id) and fences.
inline constexpr char kTransfers[] = "migration_transfers";
// The column family of agents' locations, at their home vault (location.cc).
inline constexpr char kLocations[] = "agent_locations";
// A state of at most this size travels in the Commit itself (CommitRequest.state).
inline constexpr uint64_t kStateInCommit = 1 << 20;

inline std::string TransferText(const std::string& transfer_id) {
  return absl::BytesToHexString(transfer_id);
}

// Where `member`'s fence for `transfer_id` is kept (a transfer id is 16 bytes: no collision with
// a committed record's key).
inline std::string FenceKey(const std::string& transfer_id, const std::string& member) {
  return absl::StrCat(transfer_id, "/fence/", member);
}

// "committed", "aborted", "not committed".
std::string TransferStatusOutcomeName(vault::v1::TransferStatusResponse::Outcome o);

}  // namespace vault::migration

#endif  // VAULT_MIGRATION_INTERNAL_TRANSFER_H_
