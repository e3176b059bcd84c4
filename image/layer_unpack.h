// image/layer_unpack: applies OCI image layers (tar, plain, gzip or zstd) to a root file system
// directory, in the vault's own confined code over libarchive's tar reader.
//
// Layers are untrusted input. Every entry is created relative to a directory opened inside the
// root with openat2(RESOLVE_IN_ROOT), and its last component with a call that never follows a
// symlink, so no entry, however its path or earlier entries' symlinks are crafted, touches a file
// outside the root. What an entry may be (docs/containers.md, "Unpacking"):
//   - refused (INVALID_ARGUMENT, the layer fails): an absolute path or a `..` component, a path
//     or component past the kernel's lengths, a folder more than 128 deep (however symlinks
//     reach it), a symlink target past 1024 bytes, a hard link to a directory or to nothing, a
//     whiteout of "", "." or "..", a second opaque marker in one folder, an entry of a type tar
//     cannot carry safely;
//   - neutralised: setuid, setgid bits dropped; owners ignored (files are the vault's);
//     extended attributes ignored; device nodes and fifos skipped (the container's /dev is the
//     runtime's own);
//   - bounded (RESOURCE_EXHAUSTED, naming the limit): entries, bytes of file content and bytes
//     of tar read (which bounds a decompression bomb), over all layers of an image together.
// Whiteouts (`.wh.NAME`) and opaque directories (`.wh..wh..opq`) remove what lower layers put
// there, per the OCI image spec.
//
//   UnpackBudget budget(limits);
//   for (const Layer& l : layers) {
//     VAULT_ASSIGN_OR_RETURN(Compression c, CompressionOf(l.media_type));
//     VAULT_RETURN_IF_ERROR(ApplyLayer(source_of(l), c, root_fd, &budget, &report));
//   }
//
// Thread-safety: ApplyLayer is thread-compatible; one root directory per call at a time.
#ifndef VAULT_IMAGE_LAYER_UNPACK_H_
#define VAULT_IMAGE_LAYER_UNPACK_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vault::image {

enum class Compression { kNone, kGzip, kZstd };

// The compression of a layer of media type `media_type` (OCI and Docker layer types).
// INVALID_ARGUMENT, naming the type, for anything else.
absl::StatusOr<Compression> CompressionOf(absl::string_view media_type);

struct UnpackLimits {
  uint64_t max_entries = 500'000;           // tar entries, all layers
  uint64_t max_bytes = 8ull << 30;          // bytes of file content, all layers
  uint64_t max_tar_bytes_per_entry = 4096;  // tar bytes read beyond the content, per entry
};

// What the layers of one image may still use; shared by its layers in order.
class UnpackBudget {
 public:
  explicit UnpackBudget(const UnpackLimits& limits) : limits_(limits) {}
  const UnpackLimits& limits() const { return limits_; }
  uint64_t entries = 0;
  uint64_t bytes = 0;      // file content and symlink targets written
  uint64_t tar_bytes = 0;  // uncompressed tar bytes read
  // Asked before every entry: a non-OK answer (the caller gone, a deadline passed) ends the
  // unpacking with it.
  std::function<absl::Status()> keep_going;
  // The depth of every folder the layers made, by (device, inode): a folder reached through a
  // symlink is as deep as it really is, whatever path named it.
  absl::flat_hash_map<std::pair<uint64_t, uint64_t>, uint32_t> depths;

 private:
  UnpackLimits limits_;
};

// What unpacking did, for the image's record and the operator.
struct UnpackReport {
  uint64_t files = 0, dirs = 0, symlinks = 0, hardlinks = 0, whiteouts = 0;
  uint64_t skipped_devices = 0;  // device nodes and fifos, not created
  uint64_t dropped_setid = 0;    // entries whose setuid/setgid bits were dropped
  uint64_t ignored_xattrs = 0;   // extended attributes not applied
  uint64_t bytes = 0;            // file content written
};

// The next bytes of a layer blob; an empty view at its end. A view stays valid until the next
// call.
using ByteSource = std::function<absl::StatusOr<absl::string_view>()>;

// Applies one layer read from `source` to the directory `root_fd` (a descriptor of a directory
// the caller made and nobody else writes to). `budget` carries the image's limits over its
// layers. On an error the root holds part of the layer: the caller removes it.
absl::Status ApplyLayer(const ByteSource& source, Compression compression, int root_fd,
                        UnpackBudget* budget, UnpackReport* report);

// Makes, in an unpacked root, the mount points a container runtime needs and cannot make in a
// read-only root (sandbox/container/oci_config.h): the folders /proc, /dev, /sys, /work and
// /tmp, and the file /.vault/init. INVALID_ARGUMENT when the image has one of them as something
// else (a symlink, a file), or has /.vault at all: that name is the vault's.
absl::Status PrepareMountPoints(int root_fd);

}  // namespace vault::image

#endif  // VAULT_IMAGE_LAYER_UNPACK_H_
