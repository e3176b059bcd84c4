// Reaching an agent on whichever member hosts it: a request signed with --as for that vault,
// given to the connected vault, which forwards it (docs/migration.md "Remote control").
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "capability/signing_domains.h"
#include "common/proto_util.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "vaultctl/internal/agent_commands.h"

namespace vault::vaultctl {

namespace {

using capability::PublicKey;

// A forwarded request takes the forwarding call's own time at the host on top of its wait.
constexpr absl::Duration kForwardMargin = absl::Seconds(15);
// How long a request follows an agent that moves, or is mid-hop, before it gives up.
constexpr absl::Duration kFollowFor = absl::Seconds(10);

}  // namespace

absl::StatusOr<Host> FindHost(const Connection& conn, const std::string& id) {
  Host host;
  VAULT_ASSIGN_OR_RETURN(PublicKey here, VaultKey(conn));
  host.key = here.raw();
  absl::StatusOr<vault::v1::LocateResponse> where = LocateAgent(conn, id);
  // (NOT_FOUND: no member knows it; the connected vault says so itself.)
  if (!where.ok() && !absl::IsNotFound(where.status())) return where.status();
  if (where.ok() && where->vault_key().size() == PublicKey::kRawSize &&
      where->vault_key() != here.raw()) {
    host.key = where->vault_key();
    host.vault = where->vault();
  }
  return host;
}

absl::StatusOr<Host> MemberHost(const Connection& conn, const std::string& vault) {
  vault::v1::StatusResponse resp;
  VAULT_RETURN_IF_ERROR(FromAgentsGrpc(
      conn.admin()->Status(conn.Context().get(), vault::v1::StatusRequest(), &resp)));
  Host host;
  std::string key_text;
  if (resp.name() == vault) {
    key_text = resp.public_key();
  } else {
    for (const vault::v1::StatusResponse::MemberInfo& m : resp.members()) {
      if (m.name() == vault) key_text = m.public_key();
    }
    if (key_text.empty()) {
      return absl::NotFoundError(
          absl::StrCat("vault ", vault, " is not a member that ", resp.name(), " knows"));
    }
    host.vault = vault;
  }
  VAULT_ASSIGN_OR_RETURN(PublicKey key, PublicKey::FromText(key_text));
  host.key = key.raw();
  return host;
}

absl::StatusOr<vault::v1::ControlResponse> SignedControlAt(const Connection& conn,
                                                           const capability::PrivateKey& key,
                                                           const Host& host,
                                                           vault::v1::ControlPayload p,
                                                           absl::Duration serve_time) {
  p.set_signer(key.public_key().raw());
  p.set_vault(host.key);
  p.set_issued_unix_ms(absl::ToUnixMillis(absl::Now()));
  VAULT_ASSIGN_OR_RETURN(*p.mutable_nonce(), common::RandomBytes(16));
  vault::v1::ControlRequest req;
  req.set_payload(common::SerializeDeterministic(p));
  VAULT_ASSIGN_OR_RETURN(*req.mutable_signature(),
                         key.Sign(absl::StrCat(capability::kControlDomain, req.payload())));
  std::unique_ptr<grpc::ClientContext> ctx = conn.Context();
  if (serve_time > absl::ZeroDuration()) {
    ctx->set_deadline(
        absl::ToChronoTime(absl::Now() + conn.timeout() + serve_time +
                           (host.vault.empty() ? absl::ZeroDuration() : kForwardMargin)));
  }
  vault::v1::ControlResponse out;
  VAULT_RETURN_IF_ERROR(FromAgentsGrpc(conn.agents()->Control(ctx.get(), req, &out)));
  return out;
}

absl::StatusOr<vault::v1::ControlResponse> SignedControl(const Connection& conn,
                                                         const capability::PrivateKey& key,
                                                         const vault::v1::ControlPayload& p,
                                                         absl::Duration serve_time,
                                                         std::string* at_vault) {
  // An agent that moves between the Locate and the request, or is mid-hop, is followed: asked
  // again (for up to kFollowFor) where the host said it is not there, or not yet.
  const absl::Time until = absl::Now() + kFollowFor;
  for (;;) {
    VAULT_ASSIGN_OR_RETURN(Host host, FindHost(conn, p.agent_id()));
    absl::StatusOr<vault::v1::ControlResponse> out =
        SignedControlAt(conn, key, host, p, serve_time);
    if (out.ok()) {
      *at_vault = host.vault;
      return out;
    }
    const absl::Status& s = out.status();
    const bool moved =
        (absl::IsFailedPrecondition(s) && absl::StrContains(s.message(), "has departed to")) ||
        (absl::IsUnavailable(s) && absl::StrContains(s.message(), "try again"));
    if (!moved || absl::Now() > until) return s;
    absl::SleepFor(absl::Milliseconds(200));
  }
}

}  // namespace vault::vaultctl
