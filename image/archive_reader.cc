#include "image/archive_reader.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace vault::image {
namespace {

constexpr size_t kMaxDocumentBytes = 1 << 20;  // a JSON document kept in memory
constexpr size_t kMaxKeptBytes = 64ull << 20;  // all of them together
constexpr size_t kMaxNestedIndexes = 4;

constexpr absl::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
constexpr absl::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
constexpr absl::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
constexpr absl::string_view kDockerList =
    "application/vnd.docker.distribution.manifest.list.v2+json";
constexpr absl::string_view kOciConfig = "application/vnd.oci.image.config.v1+json";
constexpr absl::string_view kDockerConfig = "application/vnd.docker.container.image.v1+json";
constexpr absl::string_view kOciLayerTar = "application/vnd.oci.image.layer.v1.tar";

struct ArchiveFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<archive, ArchiveFree>;

constexpr size_t kMaxNameBytes = 4095;
constexpr uint64_t kMaxNameTotal = 16 << 20;

absl::Status Check(archive* a, const ArchiveLimits& limits) {
  const la_int64_t read = archive_filter_bytes(a, 0);
  if (read > 0 && static_cast<uint64_t>(read) > limits.max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the archive holds more than ", limits.max_bytes,
                     " bytes once decompressed (containers.max_import_bytes in the vault's "
                     "config)"));
  }
  if (limits.keep_going) return limits.keep_going();
  return absl::OkStatus();
}

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("image archive refused: ", what));
}

absl::StatusOr<ArchivePtr> Open(const std::string& path) {
  ArchivePtr a(archive_read_new());
  if (a == nullptr) return absl::ResourceExhaustedError("archive_read_new");
  archive_read_support_format_tar(a.get());
  archive_read_support_filter_gzip(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 20) != ARCHIVE_OK) {
    return Bad(
        absl::StrCat("not a tar or a gzip-compressed tar (", archive_error_string(a.get()), ")"));
  }
  return a;
}

// The archive's next entry; nullptr at its end.
absl::StatusOr<archive_entry*> NextEntry(archive* a) {
  archive_entry* e = nullptr;
  const int r = archive_read_next_header(a, &e);
  if (r == ARCHIVE_EOF) return nullptr;
  if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
    return Bad(absl::StrCat("its tar cannot be read (", archive_error_string(a), ")"));
  }
  return e;
}

std::string Normal(absl::string_view p) {
  while (absl::ConsumePrefix(&p, "./")) {
  }
  return std::string(p);
}

struct Seen {
  cas::Digest digest;
  std::string magic;  // the first bytes
};

class Reader {
 public:
  Reader(std::string path, const ArchiveLimits& limits)
      : path_(std::move(path)), host_arch_(limits.host_arch), limits_(limits) {}

  absl::StatusOr<ArchivePlan> Read() {
    VAULT_RETURN_IF_ERROR(HashEverything());
    if (kept_.contains("index.json")) return FromOciLayout();
    if (kept_.contains("manifest.json")) return FromDockerArchive();
    return Bad(
        "neither an OCI image layout (index.json) nor a `docker save` archive (manifest.json) "
        "at its top");
  }

 private:
  // Pass over the whole archive: every regular file hashed, blobs checked against their names,
  // small files kept for the JSON documents among them.
  absl::Status HashEverything() {
    VAULT_ASSIGN_OR_RETURN(ArchivePtr a, Open(path_));
    uint64_t entries = 0;
    for (;;) {
      VAULT_ASSIGN_OR_RETURN(archive_entry * e, NextEntry(a.get()));
      if (e == nullptr) break;
      if (++entries > kMaxArchiveEntries) {
        return Bad(absl::StrCat("more than ", kMaxArchiveEntries, " entries"));
      }
      VAULT_RETURN_IF_ERROR(Check(a.get(), limits_));
      if (archive_entry_filetype(e) != AE_IFREG || archive_entry_pathname(e) == nullptr) continue;
      const std::string name = Normal(archive_entry_pathname(e));
      if (name.size() > kMaxNameBytes) {
        return Bad(absl::StrCat("an entry's name is longer than ", kMaxNameBytes, " bytes"));
      }
      name_bytes_ += name.size();
      if (name_bytes_ > kMaxNameTotal) {
        return Bad(
            absl::StrCat("its entries' names add up to more than ", kMaxNameTotal, " bytes"));
      }
      // One entry per path: the bytes hashed here are the bytes read again later.
      if (seen_.contains(name)) {
        return Bad(absl::StrCat("entry \"", absl::CHexEscape(name), "\" appears twice"));
      }
      const la_int64_t declared = archive_entry_size(e);
      const bool keep = declared >= 0 && static_cast<uint64_t>(declared) <= kMaxDocumentBytes &&
                        kept_bytes_ + static_cast<uint64_t>(declared) <= kMaxKeptBytes;
      common::Sha256 h;
      uint64_t size = 0;
      std::string content, magic;
      const void* block = nullptr;
      size_t len = 0;
      la_int64_t offset = 0;
      for (;;) {
        const int d = archive_read_data_block(a.get(), &block, &len, &offset);
        if (d == ARCHIVE_EOF) break;
        if (d != ARCHIVE_OK && d != ARCHIVE_WARN) {
          return Bad(absl::StrCat("entry \"", absl::CHexEscape(name), "\" cannot be read (",
                                  archive_error_string(a.get()), ")"));
        }
        if (static_cast<uint64_t>(offset) != size) {
          return Bad(absl::StrCat("entry \"", absl::CHexEscape(name), "\" is sparse"));
        }
        VAULT_RETURN_IF_ERROR(Check(a.get(), limits_));
        const absl::string_view piece(static_cast<const char*>(block), len);
        h.Update(piece);
        if (magic.size() < 4) absl::StrAppend(&magic, piece.substr(0, 4 - magic.size()));
        if (keep) absl::StrAppend(&content, piece);
        size += len;
      }
      const std::string raw = h.Finish();
      VAULT_ASSIGN_OR_RETURN(cas::Digest digest, cas::Digest::FromParts(raw, size));
      absl::string_view rest = name;
      if (absl::ConsumePrefix(&rest, "blobs/")) {
        absl::string_view hex = rest;
        if (!absl::ConsumePrefix(&hex, "sha256/")) {
          return Bad(absl::StrCat("blob \"", absl::CHexEscape(name),
                                  "\": only sha256 digests are supported"));
        }
        if (absl::AsciiStrToLower(hex) != digest.hex()) {
          return Bad(absl::StrCat("blob sha256:", absl::CHexEscape(hex), " hashes to sha256:",
                                  digest.hex(), "; the archive is damaged or was altered"));
        }
      }
      if (keep) {
        kept_bytes_ += content.size();
        kept_[name] = std::move(content);
      }
      seen_[name] = Seen{digest, std::move(magic)};
    }
    return absl::OkStatus();
  }

  template <typename M>
  absl::Status ParseJson(absl::string_view what, const std::string& text, M* out) {
    return ParseOciJson(what, text, out);
  }

  absl::StatusOr<std::string> Document(const std::string& name) {
    auto it = kept_.find(name);
    if (it == kept_.end()) {
      if (seen_.contains(name)) {
        return Bad(absl::StrCat("\"", absl::CHexEscape(name), "\" is larger than ",
                                kMaxDocumentBytes, " bytes"));
      }
      return Bad(absl::StrCat("\"", absl::CHexEscape(name), "\" is missing"));
    }
    return it->second;
  }

  // The blob a descriptor names, checked against it.
  absl::StatusOr<PlannedBlob> Blob(const vault::v1::OciDescriptor& d, absl::string_view role) {
    absl::string_view hex = d.digest();
    if (!absl::ConsumePrefix(&hex, "sha256:") || hex.size() != 64) {
      return Bad(absl::StrCat(role, " digest \"", absl::CHexEscape(d.digest()),
                              "\" is not sha256:<64 hex digits>"));
    }
    const std::string path = absl::StrCat("blobs/sha256/", absl::AsciiStrToLower(hex));
    auto it = seen_.find(path);
    if (it == seen_.end()) {
      if (!d.urls().empty()) {
        return Bad(absl::StrCat(role, " ", absl::CHexEscape(d.digest()),
                                " is a foreign layer (fetched from a URL): this vault reaches no "
                                "registry; import an archive that holds it"));
      }
      return Bad(absl::StrCat(role, " ", absl::CHexEscape(d.digest()), " is not in the archive"));
    }
    if (d.size() < 0 || static_cast<uint64_t>(d.size()) != it->second.digest.size()) {
      return Bad(absl::StrCat(role, " ", absl::CHexEscape(d.digest()), " has ",
                              it->second.digest.size(), " bytes; its descriptor says ", d.size()));
    }
    return PlannedBlob{it->second.digest, d.media_type(), path};
  }

  absl::StatusOr<ArchivePlan> FromOciLayout() {
    VAULT_ASSIGN_OR_RETURN(std::string text, Document("index.json"));
    vault::v1::OciManifest index;
    VAULT_RETURN_IF_ERROR(ParseJson("index.json", text, &index));
    ArchivePlan plan;
    plan.source_format = "oci-layout";
    for (size_t depth = 0;; ++depth) {
      if (depth > kMaxNestedIndexes) return Bad("indexes nested more than 4 deep");
      VAULT_ASSIGN_OR_RETURN(vault::v1::OciDescriptor chosen, Choose(index));
      if (plan.suggested_name.empty()) plan.suggested_name = NameFrom(chosen.annotations());
      if (chosen.media_type() == kOciIndex || chosen.media_type() == kDockerList) {
        VAULT_ASSIGN_OR_RETURN(PlannedBlob nested, Blob(chosen, "index"));
        VAULT_ASSIGN_OR_RETURN(std::string nested_text, Document(nested.path));
        index.Clear();
        VAULT_RETURN_IF_ERROR(
            ParseJson(absl::StrCat("index ", chosen.digest()), nested_text, &index));
        continue;
      }
      if (chosen.media_type() != kOciManifest && chosen.media_type() != kDockerManifest) {
        return Bad(absl::StrCat("manifest ", absl::CHexEscape(chosen.digest()),
                                " has media type \"", absl::CHexEscape(chosen.media_type()),
                                "\", not an OCI or Docker image manifest"));
      }
      VAULT_ASSIGN_OR_RETURN(plan.manifest, Blob(chosen, "manifest"));
      break;
    }
    VAULT_ASSIGN_OR_RETURN(plan.manifest_bytes, Document(plan.manifest.path));
    vault::v1::OciManifest manifest;
    VAULT_RETURN_IF_ERROR(ParseJson(absl::StrCat("manifest ", plan.manifest.digest.hex()),
                                    plan.manifest_bytes, &manifest));
    if (manifest.schema_version() != 2) {
      return Bad(absl::StrCat("manifest has schemaVersion ", manifest.schema_version(),
                              "; only 2 is supported"));
    }
    if (!manifest.media_type().empty() && manifest.media_type() != plan.manifest.media_type) {
      return Bad(absl::StrCat("manifest says media type \"",
                              absl::CHexEscape(manifest.media_type()), "\", its index \"",
                              plan.manifest.media_type, "\""));
    }
    if (plan.suggested_name.empty()) plan.suggested_name = NameFrom(manifest.annotations());
    return Finish(std::move(plan), manifest);
  }

  // Checks the config and the layers, and reads the config.
  absl::StatusOr<ArchivePlan> Finish(ArchivePlan plan, const vault::v1::OciManifest& manifest) {
    BlobFinder finder;
    finder.find = [this](const vault::v1::OciDescriptor& d, absl::string_view role) {
      return Blob(d, role);
    };
    finder.read = [this](const PlannedBlob& b) { return Document(b.path); };
    VAULT_RETURN_IF_ERROR(CompleteManifest(manifest, finder, &plan));
    return plan;
  }

  // The one image of an index, or its linux/<host arch> one.
  absl::StatusOr<vault::v1::OciDescriptor> Choose(const vault::v1::OciManifest& index) {
    if (index.manifests().empty()) return Bad("its index lists no image");
    if (index.manifests_size() == 1) return index.manifests(0);
    std::vector<std::string> listed;
    for (const vault::v1::OciDescriptor& d : index.manifests()) {
      if (d.platform().os() == "linux" && d.platform().architecture() == host_arch_) return d;
      listed.push_back(
          absl::CHexEscape(absl::StrCat(d.platform().os(), "/", d.platform().architecture())));
    }
    return Bad(absl::StrCat("its index lists ", index.manifests_size(),
                            " images and none for linux/", host_arch_, " (",
                            absl::StrJoin(listed, ", "), ")"));
  }

  static std::string NameFrom(const google::protobuf::Map<std::string, std::string>& a) {
    for (const char* key : {"io.containerd.image.name", "org.opencontainers.image.ref.name"}) {
      auto it = a.find(key);
      if (it != a.end()) return it->second;
    }
    return "";
  }

  absl::StatusOr<ArchivePlan> FromDockerArchive() {
    VAULT_ASSIGN_OR_RETURN(std::string text, Document("manifest.json"));
    vault::v1::DockerArchiveManifest m;
    VAULT_RETURN_IF_ERROR(ParseJson("manifest.json", absl::StrCat("{\"entries\":", text, "}"), &m));
    if (m.entries_size() != 1) {
      return Bad(absl::StrCat("its manifest.json lists ", m.entries_size(),
                              " images; save one image per archive"));
    }
    const vault::v1::DockerArchiveEntry& entry = m.entries(0);
    ArchivePlan plan;
    plan.source_format = "docker-archive";
    if (!entry.repo_tags().empty()) plan.suggested_name = entry.repo_tags(0);
    // The manifest a registry would serve for it, made here: OCI types, the config and layers
    // under the digests their bytes hash to.
    vault::v1::OciManifest manifest;
    manifest.set_schema_version(2);
    manifest.set_media_type(std::string(kOciManifest));
    auto describe = [&](const std::string& path, std::string media_type,
                        vault::v1::OciDescriptor* d) -> absl::Status {
      auto it = seen_.find(Normal(path));
      if (it == seen_.end()) {
        return Bad(absl::StrCat("\"", absl::CHexEscape(path),
                                "\", which manifest.json names, is not in the archive"));
      }
      d->set_media_type(std::move(media_type));
      d->set_digest(absl::StrCat("sha256:", it->second.digest.hex()));
      d->set_size(static_cast<int64_t>(it->second.digest.size()));
      return absl::OkStatus();
    };
    VAULT_RETURN_IF_ERROR(
        describe(entry.config(), std::string(kOciConfig), manifest.mutable_config()));
    for (const std::string& layer : entry.layers()) {
      auto it = seen_.find(Normal(layer));
      const std::string magic = it == seen_.end() ? "" : it->second.magic;
      std::string type(kOciLayerTar);
      if (absl::StartsWith(magic, "\x1f\x8b")) absl::StrAppend(&type, "+gzip");
      if (absl::StartsWith(magic, "\x28\xb5\x2f\xfd")) absl::StrAppend(&type, "+zstd");
      VAULT_RETURN_IF_ERROR(describe(layer, type, manifest.add_layers()));
    }
    // Blob() looks blobs up by their path under blobs/sha256/: this archive's live elsewhere.
    std::vector<std::pair<std::string, Seen>> aliases;
    for (const vault::v1::OciDescriptor* d : AllOf(manifest)) {
      for (const auto& [name, seen] : seen_) {
        if (absl::StrCat("sha256:", seen.digest.hex()) != d->digest()) continue;
        paths_[seen.digest.hex()] = name;
        aliases.emplace_back(name, seen);
        break;
      }
    }
    for (auto& [name, seen] : aliases) {
      const std::string alias = absl::StrCat("blobs/sha256/", seen.digest.hex());
      if (auto k = kept_.find(name); k != kept_.end()) {
        std::string copy = k->second;
        kept_[alias] = std::move(copy);
      }
      seen_[alias] = std::move(seen);
    }
    std::string json;
    google::protobuf::util::JsonPrintOptions print;
    print.preserve_proto_field_names = false;
    if (!google::protobuf::util::MessageToJsonString(manifest, &json, print).ok()) {
      return absl::InternalError("cannot write the manifest");
    }
    plan.manifest_bytes = json;
    plan.manifest = PlannedBlob{cas::Digest::Of(json), std::string(kOciManifest), ""};
    VAULT_ASSIGN_OR_RETURN(ArchivePlan done, Finish(std::move(plan), manifest));
    // Back to where the blobs really are in this archive.
    done.config.path = paths_[done.config.digest.hex()];
    for (PlannedBlob& l : done.layers) l.path = paths_[l.digest.hex()];
    return done;
  }

  static std::vector<const vault::v1::OciDescriptor*> AllOf(const vault::v1::OciManifest& m) {
    std::vector<const vault::v1::OciDescriptor*> out{&m.config()};
    for (const vault::v1::OciDescriptor& l : m.layers()) out.push_back(&l);
    return out;
  }

  const std::string path_;
  const std::string host_arch_;
  const ArchiveLimits& limits_;
  uint64_t name_bytes_ = 0;
  absl::flat_hash_map<std::string, Seen> seen_;
  absl::flat_hash_map<std::string, std::string> kept_;
  absl::flat_hash_map<std::string, std::string> paths_;  // docker archive: hex -> entry path
  uint64_t kept_bytes_ = 0;
};

}  // namespace

absl::Status ParseOciJson(absl::string_view what, const std::string& text,
                          google::protobuf::Message* out) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  const auto s = google::protobuf::util::JsonStringToMessage(text, out, options);
  if (!s.ok()) return Bad(absl::StrCat(what, " is not valid JSON of its kind: ", s.ToString()));
  return absl::OkStatus();
}

bool IsImageManifestType(absl::string_view media_type) {
  return media_type == kOciManifest || media_type == kDockerManifest;
}

absl::Status CompleteManifest(const vault::v1::OciManifest& manifest, const BlobFinder& finder,
                              ArchivePlan* plan) {
  if (!manifest.has_config()) return Bad("the manifest names no config");
  if (manifest.config().media_type() != kOciConfig &&
      manifest.config().media_type() != kDockerConfig) {
    return Bad(absl::StrCat("config has media type \"",
                            absl::CHexEscape(manifest.config().media_type()),
                            "\", not an OCI or Docker image config"));
  }
  VAULT_ASSIGN_OR_RETURN(plan->config, finder.find(manifest.config(), "config"));
  VAULT_ASSIGN_OR_RETURN(std::string config_text, finder.read(plan->config));
  VAULT_RETURN_IF_ERROR(ParseOciJson("the image config", config_text, &plan->image_config));
  if (plan->image_config.os() != "linux") {
    return Bad(absl::StrCat("the image is for os \"", absl::CHexEscape(plan->image_config.os()),
                            "\"; this vault runs linux images"));
  }
  if (manifest.layers().empty()) return Bad("the manifest names no layers");
  if (static_cast<size_t>(manifest.layers_size()) > kMaxArchiveLayers) {
    return Bad(absl::StrCat("the manifest names ", manifest.layers_size(),
                            " layers; this vault takes at most ", kMaxArchiveLayers));
  }
  for (int i = 0; i < manifest.layers_size(); ++i) {
    const vault::v1::OciDescriptor& l = manifest.layers(i);
    VAULT_RETURN_IF_ERROR(CompressionOf(l.media_type()).status());
    VAULT_ASSIGN_OR_RETURN(PlannedBlob blob, finder.find(l, absl::StrCat("layer ", i)));
    plan->layers.push_back(std::move(blob));
  }
  return absl::OkStatus();
}

absl::StatusOr<ArchivePlan> ReadArchive(const std::string& path, const ArchiveLimits& limits) {
  return Reader(path, limits).Read();
}

absl::Status ForBlob(const std::string& archive_path, const std::string& entry_path,
                     const ArchiveLimits& limits,
                     const std::function<absl::Status(const ByteSource&)>& use) {
  VAULT_ASSIGN_OR_RETURN(ArchivePtr a, Open(archive_path));
  for (;;) {
    VAULT_ASSIGN_OR_RETURN(archive_entry * e, NextEntry(a.get()));
    if (e == nullptr) break;
    VAULT_RETURN_IF_ERROR(Check(a.get(), limits));
    if (archive_entry_filetype(e) != AE_IFREG || archive_entry_pathname(e) == nullptr ||
        Normal(archive_entry_pathname(e)) != entry_path) {
      continue;
    }
    archive* raw = a.get();
    ByteSource source = [raw, &limits]() -> absl::StatusOr<absl::string_view> {
      VAULT_RETURN_IF_ERROR(Check(raw, limits));
      const void* block = nullptr;
      size_t len = 0;
      la_int64_t offset = 0;
      const int d = archive_read_data_block(raw, &block, &len, &offset);
      if (d == ARCHIVE_EOF) return absl::string_view();
      if (d != ARCHIVE_OK && d != ARCHIVE_WARN) {
        return Bad(absl::StrCat("a blob cannot be read again (", archive_error_string(raw), ")"));
      }
      return absl::string_view(static_cast<const char*>(block), len);
    };
    return use(source);
  }
  return absl::NotFoundError(absl::StrCat("\"", entry_path, "\" is not in the archive"));
}

}  // namespace vault::image
