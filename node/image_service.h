// node: the gRPC `Images` service (image.proto), served only on the vault's admin socket. Import
// spools the archive it is streamed to a private file under DATA_DIR/imports (bounded by
// containers.max_import_bytes), then hands it to image::ImageStore on a work queue of its own, one
// import at a time, so that a large image never holds the admin socket's workers. An import ends
// when its caller goes away or after containers.max_import_seconds. Every import and removal is
// an audit entry.
//
// Thread-safety: thread-safe; the store, executors and auditor must outlive the service.
#ifndef VAULT_NODE_IMAGE_SERVICE_H_
#define VAULT_NODE_IMAGE_SERVICE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/executor.h"
#include "image/image_store.h"
#include "node/auditor.h"
#include "vault/v1/image.grpc.pb.h"

namespace vault::node {

class ImageService final : public vault::v1::Images::CallbackService {
 public:
  struct Options {
    std::string spool_dir;  // made if missing; leftovers of a crash removed
    uint64_t max_import_bytes = uint64_t{16} << 30;
    absl::Duration max_import_time = absl::Hours(1);  // from the end of the upload
  };
  // `executor`: the admin socket's; `imports`: the queue imports run on.
  ImageService(image::ImageStore* images, common::Executor* executor, common::Executor* imports,
               Auditor* auditor, Options options);

  grpc::ServerReadReactor<vault::v1::ImportImageRequest>* Import(
      grpc::CallbackServerContext* ctx, vault::v1::ImportImageResponse* resp) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const vault::v1::ListImagesRequest* req,
                                 vault::v1::ListImagesResponse* resp) override;
  grpc::ServerUnaryReactor* Inspect(grpc::CallbackServerContext* ctx,
                                    const vault::v1::InspectImageRequest* req,
                                    vault::v1::ImageRecord* resp) override;
  grpc::ServerUnaryReactor* Remove(grpc::CallbackServerContext* ctx,
                                   const vault::v1::RemoveImageRequest* req,
                                   vault::v1::RemoveImageResponse* resp) override;

 private:
  class ImportReactor;

  image::ImageStore* const images_;
  common::Executor* const executor_;
  common::Executor* const imports_;
  Auditor* const auditor_;
  const Options options_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_IMAGE_SERVICE_H_
