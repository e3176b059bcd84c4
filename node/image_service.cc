#include "node/image_service.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/random.h"
#include "common/unique_fd.h"
#include "node/grpc_status.h"
#include "node/unary.h"

namespace vault::node {

using vault::v1::AuditEntry;

namespace {

std::vector<std::pair<std::string, std::string>> Details(const vault::v1::ImageRecord& r) {
  std::vector<std::pair<std::string, std::string>> d{{"layers", absl::StrCat(r.layers_size())}};
  if (!r.names().empty()) d.emplace_back("name", r.names(0));
  return d;
}

}  // namespace

class ImageService::ImportReactor final
    : public grpc::ServerReadReactor<vault::v1::ImportImageRequest> {
 public:
  ImportReactor(ImageService* service, grpc::CallbackServerContext* ctx,
                vault::v1::ImportImageResponse* resp)
      : service_(service), ctx_(ctx), actor_(service->auditor_->Actor(ctx)), resp_(resp) {
    absl::StatusOr<std::string> tag = common::RandomHex(8);
    if (!tag.ok()) {
      Finish(ToGrpc(tag.status()));
      return;
    }
    path_ = absl::StrCat(service_->options_.spool_dir, "/import-", *tag, ".tar");
    fd_ = common::UniqueFd(
        open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!fd_.valid()) {
      Finish(ToGrpc(common::PosixError(errno, absl::StrCat("create ", path_))));
      return;
    }
    StartRead(&req_);
  }
  ~ImportReactor() override {
    if (!path_.empty()) unlink(path_.c_str());
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (ctx_->IsCancelled()) return Finish(grpc::Status::CANCELLED);
      fd_ = common::UniqueFd();
      if (!service_->imports_->Schedule([this] { RunImport(); })) {
        return Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                   "imports are queued up; retry when one has finished"));
      }
      return;
    }
    if (!service_->executor_->Schedule([this] { Spool(); })) Finish(BusyStatus());
  }
  void OnDone() override { delete this; }

 private:
  void Spool() {
    if (first_) {
      name_ = req_.name();
      first_ = false;
    } else if (!req_.name().empty()) {
      return Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "Import: the name belongs in the first message only"));
    }
    received_ += req_.data().size();
    if (received_ > service_->options_.max_import_bytes) {
      return Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("the archive is larger than ", service_->options_.max_import_bytes,
                       " bytes (containers.max_import_bytes in the vault's config)")));
    }
    absl::string_view rest = req_.data();
    while (!rest.empty()) {
      const ssize_t n = write(fd_.get(), rest.data(), rest.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return Finish(ToGrpc(common::PosixError(errno, "spool the archive")));
      }
      rest.remove_prefix(static_cast<size_t>(n));
    }
    req_.Clear();
    StartRead(&req_);
  }

  void RunImport() {
    const absl::Time deadline = absl::Now() + service_->options_.max_import_time;
    grpc::CallbackServerContext* ctx = ctx_;
    auto keep_going = [ctx, deadline]() -> absl::Status {
      if (ctx->IsCancelled()) return absl::CancelledError("the import's caller went away");
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            "the import took longer than containers.max_import_seconds");
      }
      return absl::OkStatus();
    };
    absl::StatusOr<image::ImageStore::Imported> got =
        service_->images_->Import(path_, name_, keep_going);
    if (!got.ok()) {
      (void)service_->auditor_->Record(
          Auditor::Entry(actor_, "image.import", name_.empty() ? "(archive)" : name_,
                         AuditEntry::DENIED, std::string(got.status().message())));
      return Finish(ToGrpc(got.status()));
    }
    auto details = Details(got->record);
    details.emplace_back("blobs_stored", absl::StrCat(got->blobs_stored));
    details.emplace_back("bytes", absl::StrCat(received_));
    absl::Status audited = service_->auditor_->Record(
        Auditor::Entry(actor_, "image.import", got->record.id(), AuditEntry::ALLOWED,
                       got->already_present ? "already present" : "", std::move(details)));
    if (!audited.ok()) return Finish(ToGrpc(audited));
    *resp_->mutable_image() = std::move(got->record);
    resp_->set_already_present(got->already_present);
    resp_->set_blobs_stored(got->blobs_stored);
    Finish(grpc::Status::OK);
  }

  ImageService* const service_;
  grpc::CallbackServerContext* const ctx_;
  const std::string actor_;
  vault::v1::ImportImageResponse* const resp_;
  vault::v1::ImportImageRequest req_;
  std::string path_;
  common::UniqueFd fd_;
  bool first_ = true;
  std::string name_;
  uint64_t received_ = 0;
};

ImageService::ImageService(image::ImageStore* images, common::Executor* executor,
                           common::Executor* imports, Auditor* auditor, Options options)
    : images_(images),
      executor_(executor),
      imports_(imports),
      auditor_(auditor),
      options_(std::move(options)) {
  std::error_code ec;
  std::filesystem::create_directories(options_.spool_dir, ec);
  for (const auto& e : std::filesystem::directory_iterator(options_.spool_dir, ec)) {
    if (absl::StartsWith(e.path().filename().string(), "import-")) {
      std::filesystem::remove(e.path(), ec);
    }
  }
}

grpc::ServerReadReactor<vault::v1::ImportImageRequest>* ImageService::Import(
    grpc::CallbackServerContext* ctx, vault::v1::ImportImageResponse* resp) {
  return new ImportReactor(this, ctx, resp);
}

grpc::ServerUnaryReactor* ImageService::List(grpc::CallbackServerContext* ctx,
                                             const vault::v1::ListImagesRequest* req,
                                             vault::v1::ListImagesResponse* resp) {
  return RunUnary(ctx, executor_, [this, resp]() -> absl::Status {
    absl::StatusOr<std::vector<vault::v1::ImageRecord>> all = images_->List();
    if (!all.ok()) return all.status();
    for (vault::v1::ImageRecord& r : *all) *resp->add_images() = std::move(r);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ImageService::Inspect(grpc::CallbackServerContext* ctx,
                                                const vault::v1::InspectImageRequest* req,
                                                vault::v1::ImageRecord* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    absl::StatusOr<vault::v1::ImageRecord> r = images_->Resolve(req->ref());
    if (!r.ok()) return r.status();
    *resp = *std::move(r);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ImageService::Remove(grpc::CallbackServerContext* ctx,
                                               const vault::v1::RemoveImageRequest* req,
                                               vault::v1::RemoveImageResponse* resp) {
  const std::string actor = auditor_->Actor(ctx);
  return RunUnary(ctx, executor_, [this, req, resp, actor]() -> absl::Status {
    absl::StatusOr<vault::v1::ImageRecord> r = images_->Remove(req->ref());
    if (!r.ok()) return r.status();
    absl::Status audited = auditor_->Record(
        Auditor::Entry(actor, "image.rm", r->id(), AuditEntry::ALLOWED, "", Details(*r)));
    *resp->mutable_image() = *std::move(r);
    return audited;
  });
}

}  // namespace vault::node
