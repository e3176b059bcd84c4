#include "migration/internal/image_blobs.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cas/digest_proto.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"
#include "vault/v1/image.pb.h"

namespace vault::migration::internal {

absl::StatusOr<std::vector<vault::v1::Digest>> ImageBlobsOf(const cas::Store& store,
                                                            const vault::v1::AgentSpec& spec) {
  std::vector<vault::v1::Digest> out;
  if (spec.sandbox() != "container") return out;
  VAULT_ASSIGN_OR_RETURN(cas::Digest manifest, cas::FromProto(spec.code_digest()));
  auto refused = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("the container agent's code ", manifest.ToString(), " is ", why));
  };
  if (manifest.size() > (4u << 20)) return refused("too large for an image manifest");
  VAULT_ASSIGN_OR_RETURN(std::string bytes, store.ReadAll(manifest));
  vault::v1::OciManifest m;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;
  if (!google::protobuf::util::JsonStringToMessage(bytes, &m, options).ok() || !m.has_config()) {
    return refused("no image manifest");
  }
  std::vector<const vault::v1::OciDescriptor*> blobs = {&m.config()};
  for (const vault::v1::OciDescriptor& l : m.layers()) blobs.push_back(&l);
  for (const vault::v1::OciDescriptor* d : blobs) {
    absl::string_view hex = d->digest();
    if (!absl::ConsumePrefix(&hex, "sha256:") || hex.size() != 64 || d->size() < 0) {
      return refused(absl::StrCat("a manifest naming a blob \"", absl::CHexEscape(d->digest()),
                                  "\" that is not sha256:<64 hex digits>"));
    }
    VAULT_ASSIGN_OR_RETURN(
        cas::Digest digest,
        cas::Digest::FromParts(absl::HexStringToBytes(hex), static_cast<uint64_t>(d->size())));
    out.push_back(cas::ToProto(digest));
  }
  return out;
}

}  // namespace vault::migration::internal
