#include "cas/pins.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"
#include "vault/v1/cas_records.pb.h"

namespace vault::cas {
namespace {

constexpr char kPins[] = "cas_pins";
constexpr size_t kMaxReasonBytes = 1024;

absl::StatusOr<Pin> FromRecord(const Digest& digest, absl::string_view value) {
  vault::v1::PinRecord r;
  if (!r.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return absl::DataLossError(absl::StrCat("pin of ", digest.ToString(), " does not parse"));
  }
  return Pin{.digest = digest,
             .reason = r.reason(),
             .until = r.until_unix_ms() == 0 ? absl::InfiniteFuture()
                                             : absl::FromUnixMillis(r.until_unix_ms()),
             .by = r.by(),
             .pinned_at = absl::FromUnixMillis(r.pinned_unix_ms())};
}

}  // namespace

std::vector<storage::ColumnFamilySpec> Pins::ColumnFamilies() { return {{.name = kPins}}; }

Pins::Pins(storage::Database* db, Store* store) : db_(db), store_(store), cf_(db->Handle(kPins)) {}

absl::StatusOr<std::unique_ptr<Pins>> Pins::Open(storage::Database* db, Store* store) {
  return std::unique_ptr<Pins>(new Pins(db, store));
}

absl::Status Pins::Add(Pin pin) {
  const absl::Time now = absl::Now();
  if (pin.reason.size() > kMaxReasonBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a pin's reason is at most ", kMaxReasonBytes, " bytes"));
  }
  if (pin.until <= now) {
    return absl::InvalidArgumentError(absl::StrCat("the pin of ", pin.digest.ToString(),
                                                   " would end at ", absl::FormatTime(pin.until),
                                                   ", which is not in the future"));
  }
  auto not_stored = [&] {
    return absl::NotFoundError(absl::StrCat("object ", pin.digest.ToString(),
                                            " is not stored here: only a stored object is pinned"));
  };
  VAULT_ASSIGN_OR_RETURN(bool stored, store_->Contains(pin.digest));
  if (!stored) return not_stored();
  vault::v1::PinRecord r;
  r.set_reason(pin.reason);
  r.set_until_unix_ms(pin.until == absl::InfiniteFuture() ? 0 : absl::ToUnixMillis(pin.until));
  r.set_by(pin.by);
  r.set_pinned_unix_ms(absl::ToUnixMillis(now));
  rocksdb::WriteBatch batch;
  batch.Put(cf_, pin.digest.Key(), r.SerializeAsString());
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  // Then confirmed, in the order of removals: a collection that read the pins before this one
  // was written leaves the object alone, or removed it first and the pin goes again.
  absl::Status touched = store_->Touch(pin.digest);
  if (touched.ok()) return absl::OkStatus();
  rocksdb::WriteBatch undo;
  undo.Delete(cf_, pin.digest.Key());
  VAULT_RETURN_IF_ERROR(db_->Write(&undo));
  return absl::IsNotFound(touched) ? not_stored() : touched;
}

absl::Status Pins::Remove(const Digest& digest) {
  VAULT_RETURN_IF_ERROR(Get(digest).status());
  rocksdb::WriteBatch batch;
  batch.Delete(cf_, digest.Key());
  return db_->Write(&batch);
}

absl::StatusOr<Pin> Pins::Get(const Digest& digest) const {
  rocksdb::PinnableSlice value;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), cf_, digest.Key(), &value);
  if (s.IsNotFound()) {
    return absl::NotFoundError(absl::StrCat("object ", digest.ToString(), " is not pinned"));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(s, "read pin"));
  return FromRecord(digest, absl::string_view(value.data(), value.size()));
}

absl::StatusOr<std::vector<Pin>> Pins::List() const {
  std::vector<Pin> out;
  std::unique_ptr<rocksdb::Iterator> it(db_->db()->NewIterator(rocksdb::ReadOptions(), cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::StatusOr<Digest> d = Digest::FromKey(storage::View(it->key()));
    if (!d.ok()) return absl::DataLossError("a pin's key is not an object key");
    VAULT_ASSIGN_OR_RETURN(Pin p, FromRecord(*d, storage::View(it->value())));
    out.push_back(std::move(p));
  }
  VAULT_RETURN_IF_ERROR(storage::ToStatus(it->status(), "list pins"));
  return out;
}

bool Pins::Holds(const Digest& digest, absl::Time now) const {
  absl::StatusOr<Pin> p = Get(digest);
  // (A pin that cannot be read holds: keeping an object is the safe answer.)
  if (absl::IsNotFound(p.status())) return false;
  return !p.ok() || p->until > now;
}

}  // namespace vault::cas
