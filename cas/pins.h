// cas/pins: operator pins (design §12): objects kept whatever else refers to them, each with a
// reason and, optionally, a time it ends. Column family cas_pins, key = the object's key.
//
//   VAULT_ASSIGN_OR_RETURN(auto pins, cas::Pins::Open(db.get(), store.get()));
//   VAULT_RETURN_IF_ERROR(pins->Pin(digest, {.reason = "release 1.2", .by = "local-admin"}));
//   bool kept = pins->Holds(digest, absl::Now());
//
// Thread-safety: thread-safe (each call is one RocksDB read or write).
#ifndef VAULT_CAS_PINS_H_
#define VAULT_CAS_PINS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "storage/database.h"

namespace vault::cas {

struct Pin {
  Digest digest;
  std::string reason;
  absl::Time until = absl::InfiniteFuture();  // when the pin ends by itself
  std::string by;
  absl::Time pinned_at;
};

class Pins {
 public:
  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  // `store` (which must outlive the pins) answers whether an object is stored; a pin confirms
  // its object there (Store::Touch).
  static absl::StatusOr<std::unique_ptr<Pins>> Open(storage::Database* db, Store* store);

  // Pins a stored object (NOT_FOUND naming it otherwise); a second pin replaces the first's
  // reason and end. INVALID_ARGUMENT for an end in the past or a reason over 1,024 bytes.
  // Sets pin.pinned_at.
  absl::Status Add(Pin pin);
  // NOT_FOUND when the object is not pinned.
  absl::Status Remove(const Digest& digest);
  // The pin of `digest`, expired or not; NOT_FOUND when there is none.
  absl::StatusOr<Pin> Get(const Digest& digest) const;
  // Every pin in key order, expired ones included (Holds says which still hold).
  absl::StatusOr<std::vector<Pin>> List() const;
  // Whether a pin keeps `digest` at `now`.
  bool Holds(const Digest& digest, absl::Time now) const;

 private:
  Pins(storage::Database* db, Store* store);
  storage::Database* const db_;
  Store* const store_;
  rocksdb::ColumnFamilyHandle* const cf_;
};

}  // namespace vault::cas

#endif  // VAULT_CAS_PINS_H_
