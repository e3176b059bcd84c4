// image/image_store: the vault's container images. An image's blobs (manifest, config, layers)
// are CAS objects under their OCI digests; its record (vault.v1.ImageRecord) and its names live
// in the "images" column family; its layers are unpacked once into a read-only root file system
// under `rootfs_dir/<manifest hex>` (layer_unpack.h), which container agents run from.
//
//   VAULT_ASSIGN_OR_RETURN(auto images, ImageStore::Open(db, cas, {.rootfs_dir = dir}));
//   VAULT_ASSIGN_OR_RETURN(ImageStore::Imported got, images->Import("/tmp/img.tar", "web:1"));
//   VAULT_ASSIGN_OR_RETURN(vault::v1::ImageRecord r, images->Resolve("web:1"));
//
// An import stores nothing until the whole archive is checked and every layer unpacked: a
// refused archive leaves no blob, record or root behind. A crash during the storing leaves at
// most blobs no record names (garbage, never a half image).
//
// Thread-safety: thread-safe.
#ifndef VAULT_IMAGE_IMAGE_STORE_H_
#define VAULT_IMAGE_IMAGE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cas/store.h"
#include "image/archive_reader.h"
#include "image/layer_unpack.h"
#include "storage/database.h"
#include "vault/v1/image.pb.h"

namespace vault::image {

class ImageStore {
 public:
  struct Options {
    std::string rootfs_dir;  // made if missing
    UnpackLimits limits;
    std::string host_arch = "amd64";  // the image an index's several ones are chosen by
    uint64_t max_archive_bytes = uint64_t{16} << 30;  // of tar, once decompressed
  };
  struct Imported {
    vault::v1::ImageRecord record;
    bool already_present = false;  // the vault had this image before
    uint64_t blobs_stored = 0;     // blobs the CAS did not hold before
  };

  static std::vector<storage::ColumnFamilySpec> ColumnFamilies();
  static absl::StatusOr<std::unique_ptr<ImageStore>> Open(storage::Database* db, cas::Store* store,
                                                          Options options);

  // Imports the archive at `archive_path` (archive_reader.h), named `name` (which moves to it
  // from any image it named), or by the name the archive suggests when that names no image yet.
  // INVALID_ARGUMENT for a bad archive or name. `keep_going`, asked as the import reads and
  // unpacks, ends it with its answer (a cancelled call, a deadline). Removals wait for an
  // import in progress.
  absl::StatusOr<Imported> Import(const std::string& archive_path, const std::string& name,
                                  std::function<absl::Status()> keep_going = nullptr);
  // The image whose manifest is the CAS object `manifest`, imported from the CAS when the vault
  // has no record of it yet: its config and layers must be stored (a container agent arriving
  // from another vault brings the blobs this vault lacks). The same checks and unpacking as an
  // archive's import; no name. NOT_FOUND naming a missing blob; INVALID_ARGUMENT when the object
  // is no image manifest or the image is refused.
  absl::StatusOr<vault::v1::ImageRecord> ImportFromStore(const cas::Digest& manifest);
  // Every image, by id.
  absl::StatusOr<std::vector<vault::v1::ImageRecord>> List() const;
  // "sha256:<hex>", a unique prefix of at least 12 hex digits (with or without "sha256:"), or a
  // name. NOT_FOUND or INVALID_ARGUMENT (an ambiguous prefix) with the fix.
  absl::StatusOr<vault::v1::ImageRecord> Resolve(absl::string_view ref) const;
  // Removes the record, its names and its root; the blobs stay in the CAS.
  absl::StatusOr<vault::v1::ImageRecord> Remove(absl::string_view ref);
  // Where the image's root file system is.
  std::string RootfsPath(const vault::v1::ImageRecord& image) const;

  // A name an operator may give: 1-255 of [A-Za-z0-9._:/@+-], not starting with "sha256:", and
  // not 12 to 64 lowercase hex digits (what an id or its prefix looks like).
  static absl::Status CheckName(absl::string_view name);

 private:
  ImageStore(storage::Database* db, cas::Store* store, Options options)
      : db_(db), store_(store), options_(std::move(options)) {}
  absl::StatusOr<vault::v1::ImageRecord> Load(absl::string_view hex) const;
  // Streams one planned blob to `use`.
  using BlobReader = std::function<absl::Status(
      const PlannedBlob& blob, const std::function<absl::Status(const ByteSource&)>& use)>;
  // Unpacks the planned layers, each read through `read`, into a fresh root, renamed into place
  // at the end.
  absl::StatusOr<UnpackReport> Unpack(const BlobReader& read, const ArchivePlan& plan,
                                      const std::string& hex,
                                      const std::function<absl::Status()>& keep_going)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record of a plan's image, unpacked as `report` says.
  static vault::v1::ImageRecord RecordOf(const ArchivePlan& plan, const UnpackReport& report);

  storage::Database* const db_;
  cas::Store* const store_;
  const Options options_;
  // Imports and removals, one at a time: records, names and roots change together under this.
  mutable absl::Mutex mu_;
};

}  // namespace vault::image

#endif  // VAULT_IMAGE_IMAGE_STORE_H_
