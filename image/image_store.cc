#include "image/image_store.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "rocksdb/db.h"
#include "rocksdb/write_batch.h"

namespace vault::image {
namespace {

constexpr absl::string_view kImages = "images";
constexpr absl::string_view kRecordPrefix = "m/";
constexpr absl::string_view kNamePrefix = "n/";
constexpr size_t kMinPrefix = 12;
// A manifest or config read from the CAS is parsed in memory: at most this large.
constexpr uint64_t kMaxStoredDocument = 4 << 20;
// Layers stream from the CAS in pieces of this size.
constexpr uint64_t kStorePiece = 1 << 20;

std::string RecordKey(absl::string_view hex) { return absl::StrCat(kRecordPrefix, hex); }
std::string NameKey(absl::string_view name) { return absl::StrCat(kNamePrefix, name); }

std::string Hex(const vault::v1::ImageRecord& r) {
  absl::string_view id = r.id();
  absl::ConsumePrefix(&id, "sha256:");
  return std::string(id);
}

void ToProto(const cas::Digest& d, vault::v1::Digest* out) {
  out->set_sha256(d.sha256());
  out->set_size(d.size());
}

void RemoveTree(const std::string& path) {
  std::error_code ignored;
  std::filesystem::remove_all(path, ignored);
}

}  // namespace

std::vector<storage::ColumnFamilySpec> ImageStore::ColumnFamilies() {
  return {storage::ColumnFamilySpec{.name = std::string(kImages)}};
}

absl::StatusOr<std::unique_ptr<ImageStore>> ImageStore::Open(storage::Database* db,
                                                             cas::Store* store, Options options) {
  if (options.rootfs_dir.empty()) return absl::InvalidArgumentError("no rootfs directory");
  std::error_code ec;
  std::filesystem::create_directories(options.rootfs_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot make ", options.rootfs_dir, ": ", ec.message()));
  }
  // Searchable by containers' host ids (0711: not listable), whatever vaultd's umask.
  if (chmod(options.rootfs_dir.c_str(), 0711) != 0) {
    return common::PosixError(errno, "chmod " + options.rootfs_dir);
  }
  std::unique_ptr<ImageStore> images(new ImageStore(db, store, std::move(options)));
  // Roots a crash left half made, and roots no record stands for (an import that failed after
  // its root was in place): never trusted, removed.
  for (const auto& e : std::filesystem::directory_iterator(images->options_.rootfs_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (absl::StartsWith(name, ".staging-") || absl::IsNotFound(images->Load(name).status())) {
      RemoveTree(e.path());
    }
  }
  return images;
}

absl::Status ImageStore::CheckName(absl::string_view name) {
  if (name.empty() || name.size() > 255) {
    return absl::InvalidArgumentError("an image name has 1 to 255 characters");
  }
  if (absl::StartsWith(name, "sha256:")) {
    return absl::InvalidArgumentError(
        "an image name cannot start with \"sha256:\" (that is how ids are written)");
  }
  if (name.size() >= kMinPrefix && name.size() <= 64 &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return absl::ascii_isxdigit(static_cast<unsigned char>(c)) &&
               !absl::ascii_isupper(static_cast<unsigned char>(c));
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image name \"", name, "\" looks like an image id: give a name with other characters"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && !absl::StrContains("._:/@+-", c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image name \"", name, "\": only letters, digits and . _ : / @ + - are allowed"));
    }
  }
  return absl::OkStatus();
}

std::string ImageStore::RootfsPath(const vault::v1::ImageRecord& image) const {
  return absl::StrCat(options_.rootfs_dir, "/", Hex(image));
}

absl::StatusOr<UnpackReport> ImageStore::Unpack(const BlobReader& read, const ArchivePlan& plan,
                                                const std::string& hex,
                                                const std::function<absl::Status()>& keep_going) {
  VAULT_ASSIGN_OR_RETURN(std::string tag, common::RandomHex(8));
  const std::string staging = absl::StrCat(options_.rootfs_dir, "/.staging-", hex, "-", tag);
  if (mkdir(staging.c_str(), 0755) != 0) return common::PosixError(errno, "mkdir " + staging);
  // Whatever vaultd's umask: a container's own host id passes through its root.
  if (chmod(staging.c_str(), 0755) != 0) return common::PosixError(errno, "chmod " + staging);
  UnpackReport report;
  absl::Status s = [&]() -> absl::Status {
    common::UniqueFd root(open(staging.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!root.valid()) return common::PosixError(errno, "open " + staging);
    UnpackBudget budget(options_.limits);
    budget.keep_going = keep_going;
    for (size_t i = 0; i < plan.layers.size(); ++i) {
      const PlannedBlob& layer = plan.layers[i];
      VAULT_ASSIGN_OR_RETURN(Compression c, CompressionOf(layer.media_type));
      absl::Status applied = read(layer, [&](const ByteSource& source) {
        return ApplyLayer(source, c, root.get(), &budget, &report);
      });
      if (!applied.ok()) {
        return absl::Status(
            applied.code(),
            absl::StrCat("layer ", i, " (sha256:", layer.digest.hex(), "): ", applied.message()));
      }
    }
    VAULT_RETURN_IF_ERROR(PrepareMountPoints(root.get()));
    // The root is a cache the record stands for: on disk before the record is.
    if (syncfs(root.get()) != 0) return common::PosixError(errno, "syncfs " + staging);
    return absl::OkStatus();
  }();
  if (!s.ok()) {
    RemoveTree(staging);
    return s;
  }
  const std::string final_path = absl::StrCat(options_.rootfs_dir, "/", hex);
  if (rename(staging.c_str(), final_path.c_str()) != 0) {
    const int err = errno;
    RemoveTree(staging);
    return common::PosixError(err, "rename " + staging);
  }
  return report;
}

vault::v1::ImageRecord ImageStore::RecordOf(const ArchivePlan& plan, const UnpackReport& report) {
  vault::v1::ImageRecord record;
  record.set_id(absl::StrCat("sha256:", plan.manifest.digest.hex()));
  ToProto(plan.manifest.digest, record.mutable_manifest());
  ToProto(plan.config.digest, record.mutable_config());
  for (const PlannedBlob& l : plan.layers) {
    vault::v1::ImageLayer* layer = record.add_layers();
    ToProto(l.digest, layer->mutable_blob());
    layer->set_media_type(l.media_type);
  }
  const vault::v1::OciImageConfig& c = plan.image_config;
  record.set_architecture(c.architecture());
  record.set_os(c.os());
  *record.mutable_entrypoint() = c.config().entrypoint();
  *record.mutable_cmd() = c.config().cmd();
  *record.mutable_env() = c.config().env();
  record.set_working_dir(c.config().working_dir());
  record.set_user(c.config().user());
  record.set_imported_unix_ms(absl::ToUnixMillis(absl::Now()));
  record.set_source_format(plan.source_format);
  record.set_files(report.files + report.hardlinks + report.symlinks);
  record.set_unpacked_bytes(report.bytes);
  record.set_dropped(report.skipped_devices + report.dropped_setid + report.ignored_xattrs);
  return record;
}

absl::StatusOr<vault::v1::ImageRecord> ImageStore::ImportFromStore(const cas::Digest& manifest) {
  const std::string hex = manifest.hex();
  absl::MutexLock lock(&mu_);
  absl::StatusOr<vault::v1::ImageRecord> before = Load(hex);
  if (before.ok() || !absl::IsNotFound(before.status())) return before;
  auto refused = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("CAS object sha256:", hex, " is not an image this vault runs: ", why));
  };
  if (manifest.size() > kMaxStoredDocument) return refused("it is too large for a manifest");
  ArchivePlan plan;
  plan.source_format = "cas";
  // Confirmed, as its blobs are below: no collection takes it before the record holds it.
  VAULT_ASSIGN_OR_RETURN(bool stored, cas::TouchIfStored(*store_, manifest));
  if (!stored) {
    return absl::NotFoundError(
        absl::StrCat("the manifest sha256:", hex, " is not in this vault's CAS"));
  }
  VAULT_ASSIGN_OR_RETURN(plan.manifest_bytes, store_->ReadAll(manifest));
  vault::v1::OciManifest parsed;
  if (absl::Status s = ParseOciJson("the manifest", plan.manifest_bytes, &parsed); !s.ok()) {
    return refused(s.message());
  }
  if (parsed.schema_version() != 2) return refused("its schemaVersion is not 2");
  if (!parsed.media_type().empty() && !IsImageManifestType(parsed.media_type())) {
    return refused(absl::StrCat("its media type is \"", parsed.media_type(),
                                "\", not an OCI or Docker image manifest"));
  }
  plan.manifest = {manifest, parsed.media_type(), ""};
  BlobFinder finder;
  finder.find = [&](const vault::v1::OciDescriptor& d,
                    absl::string_view role) -> absl::StatusOr<PlannedBlob> {
    absl::string_view blob_hex = d.digest();
    std::string raw;
    if (!absl::ConsumePrefix(&blob_hex, "sha256:") || blob_hex.size() != 64 ||
        !std::all_of(blob_hex.begin(), blob_hex.end(),
                     [](char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); }) ||
        d.size() < 0) {
      return refused(absl::StrCat(role, " digest \"", absl::CHexEscape(d.digest()),
                                  "\" is not sha256:<64 hex digits>"));
    }
    raw = absl::HexStringToBytes(blob_hex);
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest,
                           cas::Digest::FromParts(raw, static_cast<uint64_t>(d.size())));
    VAULT_ASSIGN_OR_RETURN(bool present, cas::TouchIfStored(*store_, digest));
    if (!present) {
      return absl::NotFoundError(absl::StrCat("the ", role, " of image sha256:", hex, " (",
                                              digest.ToString(), ") is not in this vault's CAS"));
    }
    return PlannedBlob{digest, d.media_type(), ""};
  };
  finder.read = [&](const PlannedBlob& b) -> absl::StatusOr<std::string> {
    if (b.digest.size() > kMaxStoredDocument) return refused("its config is too large");
    return store_->ReadAll(b.digest);
  };
  VAULT_RETURN_IF_ERROR(CompleteManifest(parsed, finder, &plan));
  // Layers stream from the CAS, each piece checked against its chunk's hash as it is read.
  BlobReader read = [&](const PlannedBlob& blob,
                        const std::function<absl::Status(const ByteSource&)>& use) -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(std::unique_ptr<cas::ObjectReader> reader,
                           store_->OpenReader(blob.digest));
    uint64_t offset = 0;
    std::string piece;
    ByteSource source = [&]() -> absl::StatusOr<absl::string_view> {
      piece.clear();
      if (offset >= blob.digest.size()) return absl::string_view();
      VAULT_RETURN_IF_ERROR(
          reader->Read(offset, kStorePiece, kStorePiece, [&](uint64_t, absl::string_view bytes) {
            piece.append(bytes.data(), bytes.size());
            return absl::OkStatus();
          }));
      offset += piece.size();
      if (piece.empty()) return absl::DataLossError("a layer ended before its size");
      return absl::string_view(piece);
    };
    return use(source);
  };
  const std::string root = absl::StrCat(options_.rootfs_dir, "/", hex);
  if (struct stat st; stat(root.c_str(), &st) == 0) RemoveTree(root);  // no record stands for it
  VAULT_ASSIGN_OR_RETURN(UnpackReport report, Unpack(read, plan, hex, nullptr));
  vault::v1::ImageRecord record = RecordOf(plan, report);
  rocksdb::WriteBatch batch;
  batch.Put(db_->Handle(kImages), storage::ToSlice(RecordKey(hex)), record.SerializeAsString());
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  return record;
}

absl::StatusOr<ImageStore::Imported> ImageStore::Import(const std::string& archive_path,
                                                        const std::string& name,
                                                        std::function<absl::Status()> keep_going) {
  if (!name.empty()) VAULT_RETURN_IF_ERROR(CheckName(name));
  absl::MutexLock lock(&mu_);
  ArchiveLimits limits{.host_arch = options_.host_arch,
                       .max_bytes = options_.max_archive_bytes,
                       .keep_going = std::move(keep_going)};
  VAULT_ASSIGN_OR_RETURN(ArchivePlan plan, ReadArchive(archive_path, limits));
  const std::string hex = plan.manifest.digest.hex();
  // The archive's own name is only a suggestion: taken when valid and naming no image yet.
  std::string chosen = name;
  if (chosen.empty() && !plan.suggested_name.empty() && CheckName(plan.suggested_name).ok()) {
    std::string named;
    rocksdb::Status g = db_->db()->Get(rocksdb::ReadOptions(), db_->Handle(kImages),
                                       storage::ToSlice(NameKey(plan.suggested_name)), &named);
    if (g.IsNotFound()) {
      chosen = plan.suggested_name;
    } else if (!g.ok()) {
      return storage::ToStatus(g, "read an image name");
    }
  }
  Imported out;
  absl::StatusOr<vault::v1::ImageRecord> before = Load(hex);
  if (before.ok()) {
    out.already_present = true;
  } else if (!absl::IsNotFound(before.status())) {
    return before.status();
  }

  // Unpacking checks every layer entry: a hostile layer stops the import before anything is
  // stored. A root is trusted only when a record stands for it.
  UnpackReport report;
  const std::string root = absl::StrCat(options_.rootfs_dir, "/", hex);
  struct stat st;
  const bool have_root = stat(root.c_str(), &st) == 0;
  if (!out.already_present || !have_root) {
    if (have_root) RemoveTree(root);
    VAULT_ASSIGN_OR_RETURN(report,
                           Unpack(
                               [&](const PlannedBlob& blob,
                                   const std::function<absl::Status(const ByteSource&)>& use) {
                                 return ForBlob(archive_path, blob.path, limits, use);
                               },
                               plan, hex, limits.keep_going));
  }

  // The blobs, each hashed again by the CAS as it stores it.
  std::vector<const PlannedBlob*> blobs{&plan.config};
  for (const PlannedBlob& l : plan.layers) blobs.push_back(&l);
  for (const PlannedBlob* b : blobs) {
    // A blob stored before is confirmed: no collection takes it before the record holds it.
    VAULT_ASSIGN_OR_RETURN(bool present, cas::TouchIfStored(*store_, b->digest));
    if (present) continue;
    VAULT_ASSIGN_OR_RETURN(std::unique_ptr<cas::Upload> up, store_->StartUpload(b->digest, 0));
    VAULT_RETURN_IF_ERROR(ForBlob(archive_path, b->path, limits, [&](const ByteSource& source) {
      for (;;) {
        VAULT_ASSIGN_OR_RETURN(absl::string_view piece, source());
        if (piece.empty()) return absl::OkStatus();
        VAULT_RETURN_IF_ERROR(up->Append(piece));
      }
    }));
    VAULT_ASSIGN_OR_RETURN(cas::PutOutcome put, up->Finish());
    if (!put.already_present) ++out.blobs_stored;
  }
  VAULT_ASSIGN_OR_RETURN(cas::PutOutcome put,
                         store_->Put(plan.manifest.digest, plan.manifest_bytes));
  if (!put.already_present) ++out.blobs_stored;

  vault::v1::ImageRecord record = out.already_present ? *before : RecordOf(plan, report);

  rocksdb::WriteBatch batch;
  rocksdb::ColumnFamilyHandle* cf = db_->Handle(kImages);
  if (!chosen.empty()) {
    bool has = false;
    for (const std::string& n : record.names()) has = has || n == chosen;
    if (!has) {
      // A name names one image: it moves from the one it named before.
      std::string old_hex;
      rocksdb::Status g =
          db_->db()->Get(rocksdb::ReadOptions(), cf, storage::ToSlice(NameKey(chosen)), &old_hex);
      if (g.ok() && old_hex != hex) {
        absl::StatusOr<vault::v1::ImageRecord> old = Load(old_hex);
        if (old.ok()) {
          vault::v1::ImageRecord moved = *old;
          moved.clear_names();
          for (const std::string& n : old->names()) {
            if (n != chosen) moved.add_names(n);
          }
          batch.Put(cf, storage::ToSlice(RecordKey(old_hex)), moved.SerializeAsString());
        }
      } else if (!g.ok() && !g.IsNotFound()) {
        return storage::ToStatus(g, "read an image name");
      }
      record.add_names(chosen);
      batch.Put(cf, storage::ToSlice(NameKey(chosen)), storage::ToSlice(hex));
    }
  }
  batch.Put(cf, storage::ToSlice(RecordKey(hex)), record.SerializeAsString());
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  out.record = std::move(record);
  return out;
}

absl::StatusOr<vault::v1::ImageRecord> ImageStore::Load(absl::string_view hex) const {
  std::string value;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), db_->Handle(kImages),
                                     storage::ToSlice(RecordKey(hex)), &value);
  if (s.IsNotFound()) return absl::NotFoundError(absl::StrCat("no image sha256:", hex));
  if (!s.ok()) return storage::ToStatus(s, "read an image record");
  vault::v1::ImageRecord r;
  if (!r.ParseFromString(value)) {
    return absl::DataLossError(absl::StrCat("the record of image sha256:", hex, " is damaged"));
  }
  return r;
}

absl::StatusOr<std::vector<vault::v1::ImageRecord>> ImageStore::List() const {
  std::vector<vault::v1::ImageRecord> out;
  std::unique_ptr<rocksdb::Iterator> it(
      db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle(kImages)));
  for (it->Seek(storage::ToSlice(kRecordPrefix));
       it->Valid() && absl::StartsWith(storage::View(it->key()), kRecordPrefix); it->Next()) {
    vault::v1::ImageRecord r;
    if (!r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
      return absl::DataLossError("an image record is damaged");
    }
    out.push_back(std::move(r));
  }
  if (!it->status().ok()) return storage::ToStatus(it->status(), "list images");
  return out;
}

absl::StatusOr<vault::v1::ImageRecord> ImageStore::Resolve(absl::string_view ref) const {
  absl::string_view hex = ref;
  const bool prefixed = absl::ConsumePrefix(&hex, "sha256:");
  const bool all_hex =
      !hex.empty() && hex.size() <= 64 && std::all_of(hex.begin(), hex.end(), [](char c) {
        return absl::ascii_isxdigit(static_cast<unsigned char>(c)) &&
               !absl::ascii_isupper(static_cast<unsigned char>(c));
      });
  if (!prefixed) {
    std::string named;
    rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), db_->Handle(kImages),
                                       storage::ToSlice(NameKey(ref)), &named);
    if (s.ok()) return Load(named);
    if (!s.IsNotFound()) return storage::ToStatus(s, "read an image name");
  }
  if (all_hex && hex.size() == 64) return Load(hex);
  if (all_hex && hex.size() >= kMinPrefix) {
    std::vector<vault::v1::ImageRecord> found;
    std::unique_ptr<rocksdb::Iterator> it(
        db_->db()->NewIterator(rocksdb::ReadOptions(), db_->Handle(kImages)));
    const std::string start = RecordKey(hex);
    for (it->Seek(storage::ToSlice(start));
         it->Valid() && absl::StartsWith(storage::View(it->key()), start); it->Next()) {
      vault::v1::ImageRecord r;
      if (!r.ParseFromArray(it->value().data(), static_cast<int>(it->value().size()))) {
        return absl::DataLossError("an image record is damaged");
      }
      found.push_back(std::move(r));
    }
    if (found.size() == 1) return found[0];
    if (found.size() > 1) {
      return absl::InvalidArgumentError(absl::StrCat("\"", ref, "\" is the start of ", found.size(),
                                                     " image ids: give more digits"));
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "no image \"", ref, "\" on this vault (vaultctl image ls lists them; an id prefix needs ",
      kMinPrefix, " hex digits)"));
}

absl::StatusOr<vault::v1::ImageRecord> ImageStore::Remove(absl::string_view ref) {
  absl::MutexLock lock(&mu_);
  VAULT_ASSIGN_OR_RETURN(vault::v1::ImageRecord r, Resolve(ref));
  rocksdb::WriteBatch batch;
  rocksdb::ColumnFamilyHandle* cf = db_->Handle(kImages);
  for (const std::string& n : r.names()) batch.Delete(cf, storage::ToSlice(NameKey(n)));
  batch.Delete(cf, storage::ToSlice(RecordKey(Hex(r))));
  VAULT_RETURN_IF_ERROR(db_->Write(&batch));
  // The root goes once the record has: renamed aside first, so that a crash mid-removal leaves
  // a staging folder the next start removes, never a half root under the image's name.
  VAULT_ASSIGN_OR_RETURN(std::string tag, common::RandomHex(8));
  const std::string aside = absl::StrCat(options_.rootfs_dir, "/.staging-removed-", tag);
  if (rename(RootfsPath(r).c_str(), aside.c_str()) == 0) RemoveTree(aside);
  return r;
}

}  // namespace vault::image
