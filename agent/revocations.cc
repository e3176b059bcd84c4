// Revocations: stored, checked against every running agent, gossiped to the members.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "cas/digest_proto.h"
#include "common/file_util.h"
#include "common/log_fields.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

using vault::v1::AgentRecord;
using vault::v1::AgentState;

// ---------------------------------------------------------------------------------------------
// Revocations.

capability::VerifyContext AgentRuntime::Impl::BaseContext() const {
  capability::VerifyContext ctx;
  ctx.this_vault = deps_.vault_key->public_key();
  ctx.max_links = kMaxAgentChainLinks;
  ctx.vault_key = [this](absl::string_view name) -> std::optional<capability::PublicKey> {
    for (const vault::v1::Member& m : options_.members) {
      if (m.name() == name) {
        absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(m.public_key());
        if (k.ok()) return *k;
      }
    }
    return std::nullopt;
  };
  const capability::RevocationStore* store = revocations_.get();
  ctx.link_revoked = [store](absl::string_view hash, const capability::PublicKey& by) {
    return store->LinkRevoked(hash, by);
  };
  ctx.agent_revoked = [store](absl::string_view id, const capability::PublicKey& by) {
    return store->AgentRevoked(id, by);
  };
  return ctx;
}

std::string AgentRuntime::Impl::RevokedBecause(const AgentRecord& record) {
  // The chain as it was accepted (at its spawn time, from its root), asked only about
  // revocations: expiry and trust changes are other rules.
  capability::VerifyContext ctx = BaseContext();
  ctx.trusted_root = [](const capability::PublicKey&) { return true; };
  ctx.now = absl::FromUnixMillis(record.spawned_unix_ms());
  capability::ChainVerifier verifier(&link_cache_);
  absl::StatusOr<capability::VerifiedChain> verified = verifier.Verify(record.chain(), ctx);
  if (verified.ok() ||
      capability::ChainErrorOf(verified.status()) != capability::ChainError::kRevoked) {
    return "";
  }
  return absl::StrCat("revoked: ", verified.status().message());
}

absl::StatusOr<vault::v1::RevokeResponse> AgentRuntime::Impl::Revoke(
    const vault::v1::RevokeRequest& request, const std::string& from_member) {
  VAULT_ASSIGN_OR_RETURN(vault::v1::RevocationPayload payload,
                         capability::OpenRevocation(request.revocation()));
  VAULT_ASSIGN_OR_RETURN(capability::PublicKey revoker,
                         capability::PublicKey::FromRaw(payload.revoker()));
  const uint64_t before = revocations_->epoch();
  VAULT_RETURN_IF_ERROR(revocations_->Add(request.revocation()));
  vault::v1::RevokeResponse response;
  response.set_added(revocations_->epoch() != before);
  const std::string subject =
      payload.agent_id().empty()
          ? absl::StrCat("link:", absl::BytesToHexString(payload.link_hash()))
          : payload.agent_id();
  std::vector<std::pair<std::string, std::string>> details = {
      {"new", response.added() ? "yes" : "no"}};
  if (!from_member.empty()) details.emplace_back("gossiped_by", from_member);
  Audit(audit::MakeEntry(revoker.ToText(), "capability.revoke", subject,
                         vault::v1::AuditEntry::ALLOWED, payload.reason(), std::move(details)),
        /*durable=*/true);
  // Every member learns it (a new one only: gossip ends where it is already known).
  if (response.added()) GossipRevocation(request.revocation(), from_member);
  std::vector<std::shared_ptr<LiveAgent>> running;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, live] : agents_) running.push_back(live);
  }
  for (const std::shared_ptr<LiveAgent>& live : running) {
    std::string why;
    {
      absl::MutexLock lock(&live->mu);
      if (!live->running) continue;
      why = RevokedBecause(live->record);
    }
    if (why.empty()) continue;
    End(live, EndCause::kRevoked, why);
    response.add_ended_agents(live->id);
  }
  return response;
}

}  // namespace vault::agent
