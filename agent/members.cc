// The runtime's reach to the other members of the federation: control requests forwarded to the
// vault they name, revocations gossiped to every member, and what a sender is told about an
// agent that departed from here (docs/migration.md "Location, journey and remote control").
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "spdlog/spdlog.h"

namespace vault::agent {
namespace {

// How long a revocation to another vault is retried before it is dropped (a restart sends them
// all again).
constexpr absl::Duration kOutboxGiveUp = absl::Hours(6);

}  // namespace

void AgentRuntime::SetMemberClient(MemberClient* members) {
  impl_->members_ = members;
  impl_->outbox_ = std::make_unique<common::RetryQueue>(absl::Milliseconds(200), absl::Seconds(10));
  // Members that were down when a revocation was given (or gossiped) get it now.
  impl_->GossipAllRevocations();
}

std::optional<std::string> AgentRuntime::Impl::MemberNameOfKey(absl::string_view raw) const {
  for (const vault::v1::Member& m : options_.members) {
    absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(m.public_key());
    if (k.ok() && k->raw() == raw) return m.name();
  }
  return std::nullopt;
}

std::string AgentRuntime::Impl::DepartedNote(const std::string& id) {
  absl::StatusOr<vault::v1::AgentRecord> stored = store_->Get(id);
  if (!stored.ok() || stored->state() != vault::v1::DEPARTED) return "";
  return absl::StrCat("agent ", id, " has departed to ", stored->migration().to_vault(), " (hop ",
                      stored->hop(), ")");
}

std::string AgentRuntime::Impl::DepartedFix(const std::string& id) {
  return absl::StrCat(
      ": reach it from here with --as KEY (its spawning principal or an administrator of the "
      "vault that hosts it), or run the command there (vaultctl agent where ",
      id, " finds it)");
}

absl::StatusOr<vault::v1::ControlResponse> AgentRuntime::Impl::ForwardControl(
    const vault::v1::ControlRequest& request, absl::string_view for_vault_key,
    absl::Duration serve_time) {
  std::optional<std::string> member = MemberNameOfKey(for_vault_key);
  if (!member.has_value() || *member == options_.vault_name) {
    return absl::PermissionDeniedError(
        "the control request is for a vault that is not a member of this federation");
  }
  if (members_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("the control request is for ", *member,
                                                      ", and this vault cannot reach members"));
  }
  return members_->Control(*member, request, serve_time);
}

void AgentRuntime::Impl::GossipRevocation(const vault::v1::SignedRevocation& revocation,
                                          const std::string& except) {
  if (members_ == nullptr || outbox_ == nullptr) return;
  vault::v1::RevokeRequest request;
  *request.mutable_revocation() = revocation;
  for (const vault::v1::Member& m : options_.members) {
    if (m.name() == options_.vault_name || m.name() == except) continue;
    outbox_->Add(
        absl::StrCat("revocation to ", m.name()),
        [this, name = m.name(), request] { return members_->Revoke(name, request).status(); },
        kOutboxGiveUp);
  }
}

void AgentRuntime::Impl::GossipAllRevocations() {
  absl::StatusOr<std::vector<vault::v1::SignedRevocation>> all = revocations_->All();
  if (!all.ok()) {
    spdlog::error("revocations could not be read for gossip: {}", all.status().ToString());
    return;
  }
  for (const vault::v1::SignedRevocation& r : *all) GossipRevocation(r, "");
}

}  // namespace vault::agent
