// migration/internal/image_blobs: the blobs a container agent's image is made of, which travel
// with it (docs/containers.md, "An image moves with its agent"). Its code is the image's
// manifest; the config and the layers the manifest names are the rest.
//
//   VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::Digest> blobs, ImageBlobsOf(cas, spec));
//
// Thread-safety: a pure function over the store.
#ifndef VAULT_MIGRATION_INTERNAL_IMAGE_BLOBS_H_
#define VAULT_MIGRATION_INTERNAL_IMAGE_BLOBS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "cas/store.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/cas.pb.h"

namespace vault::migration::internal {

// The config and layers the manifest (spec.code_digest, read from `store`) names; empty for an
// agent of another sandbox type. NOT_FOUND when the manifest is not in `store`;
// INVALID_ARGUMENT when it is no image manifest.
absl::StatusOr<std::vector<vault::v1::Digest>> ImageBlobsOf(const cas::Store& store,
                                                            const vault::v1::AgentSpec& spec);

}  // namespace vault::migration::internal

#endif  // VAULT_MIGRATION_INTERNAL_IMAGE_BLOBS_H_
