#include "node/audit_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "audit/merkle.h"
#include "audit/verify.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "node/unary.h"

namespace vault::node {
namespace {

using vault::v1::GetEntriesRequest;
using vault::v1::GetEntriesResponse;

// The size a request means: 0 is the latest checkpoint's; anything else must be held.
absl::StatusOr<uint64_t> ResolveSize(const ServedLog& log, uint64_t size, absl::string_view what) {
  if (size == 0) {
    if (!log.checkpoint.has_value()) {
      return absl::NotFoundError(absl::StrCat("log ", log.name, " has no checkpoint yet"));
    }
    return log.checkpoint->size();
  }
  if (size > log.size) {
    return absl::OutOfRangeError(
        absl::StrCat(what, " ", size, " is beyond the ", log.size, " entries of log ", log.name));
  }
  return size;
}

void AddHashes(const std::vector<audit::Hash>& hashes,
               google::protobuf::RepeatedPtrField<std::string>* out) {
  for (const audit::Hash& h : hashes) out->Add(std::string(audit::AsBytes(h)));
}

// GetEntries: one page per storage read, written before the next is read.
class EntriesReactor final : public grpc::ServerWriteReactor<GetEntriesResponse> {
 public:
  EntriesReactor(ServedLog log, common::Executor* executor, uint64_t from, uint64_t to)
      : log_(std::move(log)), executor_(executor), next_(from), to_(to) {
    Next();
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::CANCELLED);
    if (next_ >= to_) return Finish(grpc::Status::OK);
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    if (!executor_->Schedule([this] { ReadPage(); })) Finish(BusyStatus());
  }
  void ReadPage() {
    absl::StatusOr<std::vector<std::string>> page =
        log_.store->ReadEntries(next_, to_, AuditService::kPageEntries, AuditService::kPageBytes);
    if (!page.ok()) return Finish(ToGrpc(page.status()));
    resp_.Clear();
    resp_.set_first(next_);
    for (std::string& e : *page) resp_.add_entries(std::move(e));
    next_ += page->size();
    StartWrite(&resp_);
  }

  const ServedLog log_;
  common::Executor* const executor_;
  uint64_t next_;
  const uint64_t to_;
  GetEntriesResponse resp_;
};

class ErrorWriter final : public grpc::ServerWriteReactor<GetEntriesResponse> {
 public:
  explicit ErrorWriter(const absl::Status& s) { Finish(ToGrpc(s)); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::StatusOr<ServedLog> FindLog(const audit::AuditLog* own, const AuditFollower* follower,
                                  const std::string& name) {
  ServedLog out;
  if (name.empty() || name == own->vault_name()) {
    out.name = own->vault_name();
    out.store = &own->store();
    out.verifier = &own->verifier();
    out.checkpoint = own->LatestCheckpoint();
    out.size = own->size();
    return out;
  }
  const audit::Mirror* m = follower != nullptr ? follower->Find(name) : nullptr;
  if (m == nullptr) {
    std::vector<std::string> names = {own->vault_name()};
    if (follower != nullptr) {
      for (const vault::v1::MirrorStatus& s : follower->Statuses()) names.push_back(s.peer());
    }
    return absl::NotFoundError(
        absl::StrCat("no audit log named \"", name, "\" here; logs: ", absl::StrJoin(names, ", ")));
  }
  out.name = name;
  out.store = &m->store();
  out.verifier = &m->verifier();
  out.mirror = m;
  VAULT_ASSIGN_OR_RETURN(out.checkpoint, m->store().ReadCheckpoint());
  out.size = m->status().entries();
  return out;
}

grpc::ServerUnaryReactor* AuditService::GetCheckpoint(grpc::CallbackServerContext* ctx,
                                                      const vault::v1::GetCheckpointRequest* req,
                                                      vault::v1::GetCheckpointResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(ServedLog log, FindLog(log_, follower_, req->log()));
    if (req->issue()) {
      if (!admin_) {
        return absl::PermissionDeniedError(
            "checkpoints are issued on demand only through the admin socket");
      }
      if (log.mirror != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "only ", log_->vault_name(), " signs its own checkpoints; ", log.name, " is a mirror"));
      }
      VAULT_ASSIGN_OR_RETURN(log.checkpoint, log_->IssueCheckpoint());
    }
    if (!log.checkpoint.has_value()) {
      return absl::NotFoundError(absl::StrCat("log ", log.name, " has no checkpoint yet"));
    }
    resp->set_note(log.checkpoint->note());
    resp->set_origin(audit::LogOrigin(log.name));
    resp->set_size(log.checkpoint->size());
    resp->set_root(log.checkpoint->root());
    resp->set_log_size(log.mirror != nullptr ? log.size : log_->size());
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<GetEntriesResponse>* AuditService::GetEntries(
    grpc::CallbackServerContext* ctx, const GetEntriesRequest* req) {
  absl::StatusOr<ServedLog> log = FindLog(log_, follower_, req->log());
  if (!log.ok()) return new ErrorWriter(log.status());
  const uint64_t to = req->to() == 0 ? log->size : req->to();
  if (to > log->size) {
    return new ErrorWriter(absl::OutOfRangeError(absl::StrCat(
        "GetEntries: to=", to, " is beyond the ", log->size, " entries of log ", log->name)));
  }
  if (req->from() > to) {
    return new ErrorWriter(absl::InvalidArgumentError(
        absl::StrCat("GetEntries: from=", req->from(), " is after to=", to)));
  }
  if (req->from() == to) return new ErrorWriter(absl::OkStatus());
  return new EntriesReactor(*std::move(log), executor_, req->from(), to);
}

grpc::ServerUnaryReactor* AuditService::GetInclusionProof(
    grpc::CallbackServerContext* ctx, const vault::v1::GetInclusionProofRequest* req,
    vault::v1::GetInclusionProofResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(ServedLog log, FindLog(log_, follower_, req->log()));
    VAULT_ASSIGN_OR_RETURN(uint64_t size, ResolveSize(log, req->size(), "size"));
    if (req->index() >= size) {
      return absl::OutOfRangeError(absl::StrCat(
          "entry ", req->index(), " is not in the tree of size ", size,
          req->size() == 0 ? " (the latest checkpoint's: one covering it is signed within "
                             "audit.checkpoint_interval_ms, or at once by vaultctl audit "
                             "checkpoint --issue)"
                           : ""));
    }
    VAULT_ASSIGN_OR_RETURN(audit::ProofPlan plan, audit::InclusionProofPlan(req->index(), size));
    audit::NodeReader reader = log.store->Reader();
    VAULT_ASSIGN_OR_RETURN(std::vector<audit::Hash> proof, audit::BuildProof(plan, reader));
    VAULT_ASSIGN_OR_RETURN(std::vector<audit::Hash> leaf, reader({{0, req->index()}}));
    VAULT_ASSIGN_OR_RETURN(audit::Hash root, audit::RootAt(size, reader));
    resp->set_index(req->index());
    resp->set_size(size);
    resp->set_leaf_hash(std::string(audit::AsBytes(leaf[0])));
    AddHashes(proof, resp->mutable_hashes());
    resp->set_root(std::string(audit::AsBytes(root)));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AuditService::GetConsistencyProof(
    grpc::CallbackServerContext* ctx, const vault::v1::GetConsistencyProofRequest* req,
    vault::v1::GetConsistencyProofResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(ServedLog log, FindLog(log_, follower_, req->log()));
    VAULT_ASSIGN_OR_RETURN(uint64_t size2, ResolveSize(log, req->size2(), "size2"));
    if (req->size1() == 0 || req->size1() > size2) {
      return absl::InvalidArgumentError(
          absl::StrCat("a consistency proof needs 0 < size1 <= size2; got size1=", req->size1(),
                       " size2=", size2));
    }
    VAULT_ASSIGN_OR_RETURN(audit::ProofPlan plan, audit::ConsistencyProofPlan(req->size1(), size2));
    audit::NodeReader reader = log.store->Reader();
    VAULT_ASSIGN_OR_RETURN(std::vector<audit::Hash> proof, audit::BuildProof(plan, reader));
    VAULT_ASSIGN_OR_RETURN(audit::Hash root1, audit::RootAt(req->size1(), reader));
    VAULT_ASSIGN_OR_RETURN(audit::Hash root2, audit::RootAt(size2, reader));
    resp->set_size1(req->size1());
    resp->set_size2(size2);
    AddHashes(proof, resp->mutable_hashes());
    resp->set_root1(std::string(audit::AsBytes(root1)));
    resp->set_root2(std::string(audit::AsBytes(root2)));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AuditService::GetVerifierKey(grpc::CallbackServerContext* ctx,
                                                       const vault::v1::GetVerifierKeyRequest* req,
                                                       vault::v1::GetVerifierKeyResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(ServedLog log, FindLog(log_, follower_, req->log()));
    resp->set_verifier_key(log.verifier->ToString());
    resp->set_public_key(log.verifier->key().ToText());
    resp->set_origin(audit::LogOrigin(log.name));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AuditAdminService::VerifyLog(grpc::CallbackServerContext* ctx,
                                                       const vault::v1::VerifyLogRequest* req,
                                                       vault::v1::VerifyLogResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(ServedLog log, FindLog(log_, follower_, req->log()));
    absl::Time start = absl::Now();
    audit::VerifyReport r =
        audit::VerifyStoredLog(*log.store, log.name, *log.verifier, log.mirror != nullptr);
    resp->set_log(log.name);
    resp->set_entries_checked(r.entries_checked);
    resp->set_checkpoint_size(r.checkpoint_size);
    resp->set_error(r.error);
    if (r.first_bad.has_value()) {
      resp->set_has_first_bad(true);
      resp->set_first_bad_sequence(*r.first_bad);
    }
    resp->set_ok(r.ok);
    if (log.mirror != nullptr) {
      vault::v1::MirrorStatus s = log.mirror->status();
      if (s.state() == vault::v1::MirrorStatus::FORKED ||
          s.state() == vault::v1::MirrorStatus::INVALID) {
        resp->set_forked(s.state() == vault::v1::MirrorStatus::FORKED);
        resp->set_ok(false);
        if (resp->error().empty()) resp->set_error(s.last_error());
        if (s.state() == vault::v1::MirrorStatus::INVALID && !resp->has_first_bad()) {
          resp->set_has_first_bad(true);
          resp->set_first_bad_sequence(s.first_bad_sequence());
        }
      }
    }
    resp->set_elapsed_us(absl::ToInt64Microseconds(absl::Now() - start));
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* AuditAdminService::ListMirrors(grpc::CallbackServerContext* ctx,
                                                         const vault::v1::ListMirrorsRequest*,
                                                         vault::v1::ListMirrorsResponse* resp) {
  return RunUnary(ctx, executor_, [this, resp]() -> absl::Status {
    if (follower_ != nullptr) {
      for (vault::v1::MirrorStatus& s : follower_->Statuses()) *resp->add_mirrors() = std::move(s);
    }
    return absl::OkStatus();
  });
}

}  // namespace vault::node
