// image/archive_reader: an image archive (an OCI image layout as a tar, or a `docker save`
// archive; plain or gzip) read into a verified plan of an image: its manifest, config and layers,
// each a blob whose every byte was hashed here and matched its digest. Nothing is stored: the
// plan names where each blob is in the archive, and ForBlob streams it again.
//
//   VAULT_ASSIGN_OR_RETURN(ArchivePlan plan, ReadArchive("/tmp/img.tar", ArchiveLimits{}));
//   VAULT_RETURN_IF_ERROR(ForBlob("/tmp/img.tar", plan.layers[0].path, ArchiveLimits{},
//                                 [&](const ByteSource& s) {...}));
//
// Thread-safety: pure functions over a file nobody changes meanwhile.
#ifndef VAULT_IMAGE_ARCHIVE_READER_H_
#define VAULT_IMAGE_ARCHIVE_READER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cas/digest.h"
#include "image/layer_unpack.h"
#include "vault/v1/image.pb.h"

namespace vault::image {

// One blob of the image and where it is in the archive ("" for the manifest of a `docker save`
// archive, which the plan holds as bytes).
struct PlannedBlob {
  cas::Digest digest;
  std::string media_type;
  std::string path;
};

struct ArchivePlan {
  std::string source_format;  // "oci-layout" or "docker-archive"
  PlannedBlob manifest;
  std::string manifest_bytes;  // the manifest itself (made here for a docker archive)
  PlannedBlob config;
  std::vector<PlannedBlob> layers;
  vault::v1::OciImageConfig image_config;
  std::string suggested_name;  // from the archive's annotations or RepoTags; may be empty
};

inline constexpr uint64_t kMaxArchiveEntries = 100'000;
inline constexpr size_t kMaxArchiveLayers = 128;

struct ArchiveLimits {
  std::string host_arch = "amd64";  // the image an index's several ones are chosen by
  // Bytes of tar one pass may read (a gzip archive's, once decompressed): RESOURCE_EXHAUSTED
  // past it.
  uint64_t max_bytes = uint64_t{16} << 30;
  // Asked as the archive is read: a non-OK answer ends the pass with it.
  std::function<absl::Status()> keep_going;
};

// How CompleteManifest finds the blobs a manifest names: in an archive, or in the CAS.
struct BlobFinder {
  // The blob `d` names, checked against it (its digest's form, its presence, its size); `role`
  // ("config", "layer 2") for errors.
  std::function<absl::StatusOr<PlannedBlob>(const vault::v1::OciDescriptor& d,
                                            absl::string_view role)>
      find;
  // A small document's bytes (the config).
  std::function<absl::StatusOr<std::string>(const PlannedBlob& blob)> read;
};

// Checks a manifest's config and layers the way ReadArchive does (media types, an image for
// linux, 1 to kMaxArchiveLayers layers of a known compression), and fills plan->config,
// plan->image_config and plan->layers. INVALID_ARGUMENT naming what does not hold.
absl::Status CompleteManifest(const vault::v1::OciManifest& manifest, const BlobFinder& finder,
                              ArchivePlan* plan);
// An OCI JSON document (unknown fields ignored) into `out`; INVALID_ARGUMENT naming `what`.
absl::Status ParseOciJson(absl::string_view what, const std::string& text,
                          google::protobuf::Message* out);
// An OCI or Docker image manifest's media type (not an index's).
bool IsImageManifestType(absl::string_view media_type);

// Reads and checks the archive at `path`. INVALID_ARGUMENT, naming the blob or document and the
// fix, for anything that does not hold: a blob that does not hash to its name, a missing blob, a
// size that differs from its descriptor, a media type this vault does not know, an image for
// another OS, more than kMaxArchiveLayers layers, an entry name past 4095 bytes, or an index
// with several images of which none is for `host_arch` on linux.
absl::StatusOr<ArchivePlan> ReadArchive(const std::string& path, const ArchiveLimits& limits);

// Streams the archive entry at `entry_path` to `use` (NOT_FOUND when it is not there).
absl::Status ForBlob(const std::string& archive_path, const std::string& entry_path,
                     const ArchiveLimits& limits,
                     const std::function<absl::Status(const ByteSource&)>& use);

}  // namespace vault::image

#endif  // VAULT_IMAGE_ARCHIVE_READER_H_
