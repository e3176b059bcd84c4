#include "migration/transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/file_util.h"
#include "common/grpc_status.h"
#include "common/member_channel.h"
#include "common/status_macros.h"

namespace vault::migration {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);
constexpr absl::Duration kObjectTimeout = absl::Minutes(5);
constexpr size_t kPiece = 1 << 20;        // bytes per Put stream message
constexpr size_t kSmallObject = 1 << 20;  // sent with BatchPut below this

using common::FromGrpc;
absl::Status ItemError(const vault::v1::ItemStatus& s, absl::string_view what) {
  return common::FromItemStatus(s, what);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcTransport>> GrpcTransport::Create(
    const vault::v1::VaultConfig& config, const cas::Store* store) {
  if (config.tls().cert_file().empty() || config.tls().key_file().empty() ||
      config.tls().ca_file().empty()) {
    return absl::FailedPreconditionError("no TLS material: members cannot be reached");
  }
  grpc::SslCredentialsOptions ssl;
  VAULT_ASSIGN_OR_RETURN(ssl.pem_cert_chain, common::ReadFile(config.tls().cert_file()));
  VAULT_ASSIGN_OR_RETURN(ssl.pem_private_key, common::ReadPrivateFile(config.tls().key_file()));
  VAULT_ASSIGN_OR_RETURN(ssl.pem_root_certs, common::ReadFile(config.tls().ca_file()));
  return std::unique_ptr<GrpcTransport>(new GrpcTransport(config, store, std::move(ssl)));
}

absl::StatusOr<GrpcTransport::Peer*> GrpcTransport::PeerOf(const std::string& vault) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(vault);
  if (it != peers_.end()) return it->second.get();
  for (const vault::v1::Member& m : config_.members()) {
    if (m.name() != vault || m.name() == config_.name()) continue;
    grpc::ChannelArguments args = common::MemberChannelArgs(config_, m);
    auto peer = std::make_unique<Peer>();
    peer->channel = grpc::CreateCustomChannel(m.address(), grpc::SslCredentials(ssl_), args);
    peer->migration = vault::v1::Migration::NewStub(peer->channel);
    peer->cas = vault::v1::Cas::NewStub(peer->channel);
    peer->messages = vault::v1::Messages::NewStub(peer->channel);
    Peer* raw = peer.get();
    peers_[vault] = std::move(peer);
    return raw;
  }
  return absl::NotFoundError(absl::StrCat("no federation member named \"", vault, "\""));
}

std::unique_ptr<grpc::ClientContext> GrpcTransport::Context(absl::Duration timeout) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

absl::StatusOr<std::vector<vault::v1::Digest>> GrpcTransport::Offer(
    const std::string& vault, const vault::v1::MigrationPackage& package) {
  VAULT_ASSIGN_OR_RETURN(Peer * peer, PeerOf(vault));
  vault::v1::OfferRequest req;
  *req.mutable_package() = package;
  vault::v1::OfferResponse resp;
  VAULT_RETURN_IF_ERROR(FromGrpc(peer->migration->Offer(Context(kCallTimeout).get(), req, &resp),
                                 "Offer to " + vault));
  return std::vector<vault::v1::Digest>(resp.missing().begin(), resp.missing().end());
}

absl::Status GrpcTransport::SendObjects(const std::string& vault,
                                        const std::vector<vault::v1::Digest>& digests) {
  VAULT_ASSIGN_OR_RETURN(Peer * peer, PeerOf(vault));
  vault::v1::BatchPutRequest batch;
  size_t batch_bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (batch.items_size() == 0) return absl::OkStatus();
    vault::v1::BatchPutResponse resp;
    VAULT_RETURN_IF_ERROR(FromGrpc(peer->cas->BatchPut(Context(kObjectTimeout).get(), batch, &resp),
                                   "BatchPut to " + vault));
    for (const vault::v1::PutResult& r : resp.results()) {
      VAULT_RETURN_IF_ERROR(ItemError(r.status(), "an object refused by " + vault));
    }
    batch.Clear();
    batch_bytes = 0;
    return absl::OkStatus();
  };
  for (const vault::v1::Digest& d : digests) {
    VAULT_ASSIGN_OR_RETURN(cas::Digest digest, cas::Digest::FromParts(d.sha256(), d.size()));
    if (digest.size() < kSmallObject) {
      if (batch_bytes + digest.size() > kSmallObject) VAULT_RETURN_IF_ERROR(flush());
      vault::v1::BatchPutRequest::Item* item = batch.add_items();
      *item->mutable_digest() = d;
      VAULT_ASSIGN_OR_RETURN(*item->mutable_data(), store_->ReadAll(digest));
      batch_bytes += digest.size();
      continue;
    }
    // A large object: streamed piece by piece straight from the store.
    std::unique_ptr<grpc::ClientContext> ctx = Context(kObjectTimeout);
    vault::v1::PutResponse resp;
    std::unique_ptr<grpc::ClientWriter<vault::v1::PutRequest>> writer =
        peer->cas->Put(ctx.get(), &resp);
    bool first = true;
    absl::Status read =
        store_->Read(digest, 0, 0, kPiece, [&](uint64_t, absl::string_view piece) -> absl::Status {
          vault::v1::PutRequest req;
          if (first) *req.mutable_digest() = d;
          first = false;
          req.set_data(std::string(piece));
          if (!writer->Write(req)) return absl::UnavailableError("the upload stream broke");
          return absl::OkStatus();
        });
    writer->WritesDone();
    grpc::Status finished = writer->Finish();
    VAULT_RETURN_IF_ERROR(read);
    VAULT_RETURN_IF_ERROR(FromGrpc(finished, "Put to " + vault));
    VAULT_RETURN_IF_ERROR(ItemError(resp.result().status(), "an object refused by " + vault));
  }
  return flush();
}

template <typename Request, typename Response>
absl::StatusOr<Response> GrpcTransport::Unary(const std::string& vault, absl::string_view what,
                                              grpc::Status (vault::v1::Migration::Stub::*method)(
                                                  grpc::ClientContext*, const Request&, Response*),
                                              const Request& request) {
  VAULT_ASSIGN_OR_RETURN(Peer * peer, PeerOf(vault));
  Response response;
  VAULT_RETURN_IF_ERROR(
      FromGrpc(((*peer->migration).*method)(Context(kCallTimeout).get(), request, &response),
               absl::StrCat(what, " ", vault)));
  return response;
}

absl::StatusOr<vault::v1::SignedReceipt> GrpcTransport::Commit(
    const std::string& vault, const vault::v1::MigrationPackage& package,
    const std::string* state) {
  vault::v1::CommitRequest req;
  *req.mutable_package() = package;
  if (state != nullptr) {
    req.set_state(*state);
    req.set_state_carried(true);
  }
  VAULT_ASSIGN_OR_RETURN(vault::v1::CommitResponse resp,
                         Unary(vault, "Commit to", &vault::v1::Migration::Stub::Commit, req));
  return resp.receipt();
}

absl::StatusOr<vault::v1::TransferStatusResponse> GrpcTransport::Status(
    const std::string& vault, const std::string& transfer_id, bool abort_if_unknown) {
  vault::v1::TransferStatusRequest req;
  req.set_transfer_id(transfer_id);
  req.set_abort_if_unknown(abort_if_unknown);
  return Unary(vault, "Status at", &vault::v1::Migration::Stub::Status, req);
}

absl::StatusOr<vault::v1::WhereResponse> GrpcTransport::Where(const std::string& vault,
                                                              const std::string& agent_id) {
  vault::v1::WhereRequest req;
  req.set_agent_id(agent_id);
  return Unary(vault, "Where at", &vault::v1::Migration::Stub::Where, req);
}

absl::StatusOr<vault::v1::LocatedResponse> GrpcTransport::Located(
    const std::string& vault, const vault::v1::SignedReceipt& receipt) {
  vault::v1::LocatedRequest req;
  *req.mutable_receipt() = receipt;
  return Unary(vault, "Located at", &vault::v1::Migration::Stub::Located, req);
}

absl::StatusOr<vault::v1::ControlResponse> GrpcTransport::Control(
    const std::string& vault, const vault::v1::ControlRequest& request, absl::Duration serve_time) {
  VAULT_ASSIGN_OR_RETURN(Peer * peer, PeerOf(vault));
  std::unique_ptr<grpc::ClientContext> ctx = Context(kCallTimeout + serve_time);
  vault::v1::ControlResponse response;
  VAULT_RETURN_IF_ERROR(FromGrpc(peer->migration->Control(ctx.get(), request, &response),
                                 absl::StrCat("Control at ", vault)));
  return response;
}

absl::StatusOr<vault::v1::RevokeResponse> GrpcTransport::Revoke(
    const std::string& vault, const vault::v1::RevokeRequest& request) {
  return Unary(vault, "Revoke to", &vault::v1::Migration::Stub::Revoke, request);
}

absl::StatusOr<vault::v1::DeliverResponse> GrpcTransport::Deliver(
    const std::string& vault, const vault::v1::DeliverRequest& request, absl::Time deadline) {
  VAULT_ASSIGN_OR_RETURN(Peer * peer, PeerOf(vault));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(std::min(deadline, absl::Now() + kCallTimeout)));
  vault::v1::DeliverResponse response;
  VAULT_RETURN_IF_ERROR(FromGrpc(peer->messages->Deliver(&ctx, request, &response),
                                 absl::StrCat("Deliver to ", vault)));
  return response;
}

}  // namespace vault::migration
