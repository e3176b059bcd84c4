#include "node/audit_follower.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "audit/note.h"
#include "common/file_util.h"
#include "common/member_channel.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "vault/v1/audit.grpc.pb.h"

namespace vault::node {
namespace {

// The peer's log over gRPC, every call with a deadline.
class GrpcPeerLog final : public audit::PeerLog {
 public:
  GrpcPeerLog(std::shared_ptr<grpc::Channel> channel, absl::Duration timeout)
      : stub_(vault::v1::Audit::NewStub(std::move(channel))), timeout_(timeout) {}

  absl::StatusOr<std::string> Checkpoint() override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    vault::v1::GetCheckpointResponse resp;
    VAULT_RETURN_IF_ERROR(FromGrpc(stub_->GetCheckpoint(&ctx, {}, &resp)));
    return resp.note();
  }

  absl::StatusOr<std::vector<std::string>> Entries(uint64_t from, uint64_t to) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    vault::v1::GetEntriesRequest req;
    req.set_from(from);
    req.set_to(to);
    std::unique_ptr<grpc::ClientReader<vault::v1::GetEntriesResponse>> reader =
        stub_->GetEntries(&ctx, req);
    std::vector<std::string> out;
    vault::v1::GetEntriesResponse page;
    while (reader->Read(&page)) {
      if (page.first() != from + out.size()) {
        ctx.TryCancel();
        (void)reader->Finish();
        return absl::DataLossError(absl::StrCat("GetEntries: page starts at ", page.first(),
                                                ", expected ", from + out.size()));
      }
      for (std::string& e : *page.mutable_entries()) out.push_back(std::move(e));
    }
    VAULT_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
    return out;
  }

  absl::StatusOr<std::vector<audit::Hash>> Consistency(uint64_t size1, uint64_t size2) override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    vault::v1::GetConsistencyProofRequest req;
    req.set_size1(size1);
    req.set_size2(size2);
    vault::v1::GetConsistencyProofResponse resp;
    VAULT_RETURN_IF_ERROR(FromGrpc(stub_->GetConsistencyProof(&ctx, req, &resp)));
    std::vector<audit::Hash> proof;
    for (const std::string& h : resp.hashes()) {
      VAULT_ASSIGN_OR_RETURN(audit::Hash hash, audit::HashFromBytes(h));
      proof.push_back(hash);
    }
    return proof;
  }

 private:
  void SetDeadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  }

  std::unique_ptr<vault::v1::Audit::Stub> stub_;
  const absl::Duration timeout_;
};

}  // namespace

struct AuditFollower::Peer {
  vault::v1::Member member;
  std::unique_ptr<audit::Mirror> mirror;
  std::unique_ptr<GrpcPeerLog> client;  // null: not followed
};

absl::StatusOr<std::unique_ptr<AuditFollower>> AuditFollower::Start(
    const vault::v1::VaultConfig& config, const storage::Database* db, Auditor* auditor) {
  std::unique_ptr<AuditFollower> f(new AuditFollower());
  f->config_ = config;
  f->auditor_ = auditor;
  const bool can_reach = !config.tls().cert_file().empty() && !config.tls().key_file().empty() &&
                         !config.tls().ca_file().empty();
  grpc::SslCredentialsOptions ssl;
  if (can_reach) {
    VAULT_ASSIGN_OR_RETURN(ssl.pem_cert_chain, common::ReadFile(config.tls().cert_file()));
    VAULT_ASSIGN_OR_RETURN(ssl.pem_private_key, common::ReadPrivateFile(config.tls().key_file()));
    VAULT_ASSIGN_OR_RETURN(ssl.pem_root_certs, common::ReadFile(config.tls().ca_file()));
  }
  for (const vault::v1::Member& m : config.members()) {
    if (m.name() == config.name()) continue;
    VAULT_ASSIGN_OR_RETURN(capability::PublicKey key,
                           capability::PublicKey::FromText(m.public_key()));
    VAULT_ASSIGN_OR_RETURN(audit::NoteVerifier verifier,
                           audit::NoteVerifier::FromKey(m.name(), key));
    auto peer = std::make_unique<Peer>();
    peer->member = m;
    peer->mirror = std::make_unique<audit::Mirror>(
        db, m.name(), std::move(verifier), [auditor](const vault::v1::MirrorStatus& s) {
          std::vector<std::pair<std::string, std::string>> details;
          for (int i = 0; i < s.evidence_size(); ++i) {
            details.emplace_back(absl::StrCat("evidence_", i + 1), s.evidence(i));
          }
          if (s.state() == vault::v1::MirrorStatus::INVALID) {
            details.emplace_back("first_bad_sequence", absl::StrCat(s.first_bad_sequence()));
          }
          vault::v1::AuditEntry e = Auditor::Entry(
              auditor->self(),
              s.state() == vault::v1::MirrorStatus::FORKED ? "audit.fork" : "audit.invalid",
              s.peer(), vault::v1::AuditEntry::DENIED, s.last_error(), std::move(details));
          e.set_priority(vault::v1::AuditEntry::HIGH);
          // The mirror's persisted FORKED/INVALID status stays the evidence if this write fails.
          (void)auditor->Record(std::move(e));
        });
    VAULT_RETURN_IF_ERROR(peer->mirror->Load());
    if (can_reach) {
      // Its own connection: a mirror's page fetches do not queue behind replication's streams.
      grpc::ChannelArguments args = common::MemberChannelArgs(config, m, {.own_connection = true});
      peer->client = std::make_unique<GrpcPeerLog>(
          grpc::CreateCustomChannel(m.address(), grpc::SslCredentials(ssl), args),
          absl::Milliseconds(config.audit().mirror_rpc_timeout_ms()));
    }
    f->peers_.push_back(std::move(peer));
  }
  for (auto& peer : f->peers_) {
    if (peer->client != nullptr) {
      f->threads_.emplace_back([f = f.get(), p = peer.get()] { f->Run(p); });
    }
  }
  return f;
}

AuditFollower::~AuditFollower() { Stop(); }

void AuditFollower::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void AuditFollower::Run(Peer* peer) {
  const absl::Duration interval = absl::Milliseconds(config_.audit().mirror_interval_ms());
  while (!stop_.HasBeenNotified()) {
    // Errors are kept in the mirror's status (vaultctl audit mirrors); FORKED / INVALID end
    // the following of that peer.
    absl::Status s = peer->mirror->Sync(*peer->client, /*max_entries=*/100000);
    if (s.code() == absl::StatusCode::kFailedPrecondition) return;
    stop_.WaitForNotificationWithTimeout(interval);
  }
}

const audit::Mirror* AuditFollower::Find(const std::string& peer) const {
  for (const auto& p : peers_) {
    if (p->member.name() == peer) return p->mirror.get();
  }
  return nullptr;
}

std::vector<vault::v1::MirrorStatus> AuditFollower::Statuses() const {
  std::vector<vault::v1::MirrorStatus> out;
  for (const auto& p : peers_) out.push_back(p->mirror->status());
  return out;
}

}  // namespace vault::node
