// vaultctl cap ...: issue, delegate, show, verify — capability chains as files (design §5).
//
// A chain file is a serialized vault.v1.Chain (binary protobuf: the signed payload bytes must
// travel exactly as signed). `cap show` prints it for people or as JSON.
#include <algorithm>
#include <iostream>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capability/chain.h"
#include "capability/grant.h"
#include "capability/principal.h"
#include "capability/revocation.h"
#include "capability/text_form.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "node/config.h"
#include "vault/v1/agent.grpc.pb.h"
#include "vault/v1/capability.pb.h"
#include "vaultctl/client.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"
#include "vaultctl/shorthand.h"

namespace vault::vaultctl {
namespace {

using capability::PrivateKey;
using capability::PublicKey;
using vault::v1::LinkPayload;

struct CapFlags {
  std::string key;
  std::string to;
  std::vector<std::string> grants;
  std::string constraints;
  std::string out;
  std::string chain;
  std::string kind = "delegate";
  std::string agent_id;
  std::string code;
  std::string valid_for = "24h";
  std::vector<std::string> trust;
  std::string as;
  std::vector<std::string> vault_keys;  // name=ed25519:<hex>
  std::string vault_config;
  std::string link;
  std::string reason;
};

// vaultctl cap revoke: signs a revocation and hands it to the vault, which keeps it and ends
// the running agents whose chain it cuts.
int RevokeCommand(const GlobalOptions& g, const CapFlags& f) {
  if (f.agent_id.empty() == f.link.empty()) {
    return ReportConnectError(
        absl::InvalidArgumentError("name exactly one of --agent-id ID or --link HASH"), g.json());
  }
  absl::StatusOr<vault::v1::SignedRevocation> signed_revocation =
      [&]() -> absl::StatusOr<vault::v1::SignedRevocation> {
    VAULT_ASSIGN_OR_RETURN(PrivateKey key, PrivateKey::LoadFile(f.as));
    vault::v1::RevocationPayload p;
    p.set_version(1);
    p.set_revoker(key.public_key().raw());
    p.set_agent_id(f.agent_id);
    if (!f.link.empty()) {
      if (f.link.size() != 64 || !std::all_of(f.link.begin(), f.link.end(), [](char c) {
            return absl::ascii_isxdigit(static_cast<unsigned char>(c));
          })) {
        return absl::InvalidArgumentError(
            absl::StrCat("--link \"", f.link, "\" is not a link hash (64 hex digits)"));
      }
      p.set_link_hash(absl::HexStringToBytes(f.link));
    }
    p.set_issued_unix_ms(absl::ToUnixMillis(absl::Now()));
    p.set_reason(f.reason);
    return capability::SignRevocation(p, key);
  }();
  if (!signed_revocation.ok()) return ReportConnectError(signed_revocation.status(), g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::RevokeRequest req;
  *req.mutable_revocation() = *std::move(signed_revocation);
  vault::v1::RevokeResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Revoke(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    Json ended = Json::Array();
    for (const std::string& id : resp.ended_agents()) ended.Push(id);
    std::cout << Json::Object().Add("added", resp.added()).Add("ended_agents", ended).ToString()
              << "\n";
  } else {
    std::cout << (resp.added() ? "revoked" : "already revoked") << "; agents ended: "
              << (resp.ended_agents().empty() ? "none" : absl::StrJoin(resp.ended_agents(), " "))
              << "\n";
  }
  return kExitOk;
}

absl::StatusOr<vault::v1::Chain> ReadChain(const std::string& path) {
  VAULT_ASSIGN_OR_RETURN(std::string bytes, common::ReadFile(path));
  vault::v1::Chain chain;
  if (!chain.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a capability chain file"));
  }
  return chain;
}

absl::Status WriteChain(const vault::v1::Chain& chain, const std::string& path) {
  return common::WriteFileAtomic(path, chain.SerializeAsString(), 0644);
}

absl::StatusOr<vault::v1::Digest> DigestArg(const std::string& text) {
  // sha256:<hex>/<size>
  vault::v1::Digest d;
  std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('/', 1));
  uint64_t size = 0;
  std::string raw;
  if (parts.size() != 2 || !absl::StartsWith(parts[0], "sha256:") || parts[0].size() != 71 ||
      !absl::SimpleAtoi(parts[1], &size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--code: \"", text, "\" is not sha256:<64 hex>/<size>"));
  }
  raw = absl::HexStringToBytes(parts[0].substr(7));
  d.set_sha256(raw);
  d.set_size(size);
  return d;
}

// The link's authority from --grant (repeatable) and --constraints.
absl::Status FillAuthority(const CapFlags& f, LinkPayload* p) {
  for (const std::string& g : f.grants) {
    VAULT_ASSIGN_OR_RETURN(std::vector<vault::v1::Grant> parsed, ParseGrantsFlag(g, "--grant"));
    for (vault::v1::Grant& x : parsed) *p->add_grants() = std::move(x);
  }
  if (!f.constraints.empty()) {
    VAULT_ASSIGN_OR_RETURN(*p->mutable_constraints(),
                           ParseConstraintsFlag(f.constraints, "--constraints"));
  }
  return capability::ValidateGrants(p->grants());
}

absl::StatusOr<LinkPayload::Kind> KindArg(const std::string& kind) {
  if (kind == "delegate") return LinkPayload::DELEGATE;
  if (kind == "spawn") return LinkPayload::SPAWN;
  return absl::InvalidArgumentError(
      absl::StrCat("--kind \"", kind, "\": delegate or spawn (MIGRATE links are made by vaults)"));
}

Json LinkJson(int index, const vault::v1::SignedLink& link) {
  Json j = Json::Object()
               .Add("index", index)
               .Add("hash", absl::BytesToHexString(capability::LinkHash(link)));
  absl::StatusOr<LinkPayload> p = capability::ParseLinkPayload(link.payload());
  if (!p.ok()) return j.Add("error", p.status().message());
  Json grants = Json::Array();
  for (const vault::v1::Grant& g : p->grants()) grants.Push(capability::GrantToString(g));
  auto key = [](const std::string& raw) {
    absl::StatusOr<PublicKey> k = PublicKey::FromRaw(raw);
    return k.ok() ? k->ToText() : std::string("(invalid key)");
  };
  j.Add("kind", LinkPayload::Kind_Name(p->kind()))
      .Add("issuer", key(p->issuer()))
      .Add("audience", key(p->audience()))
      .Add("grants", grants)
      .Add("constraints", ConstraintsLine(p->constraints()))
      .Add("not_before_unix_ms", p->not_before_unix_ms())
      .Add("not_after_unix_ms", p->not_after_unix_ms())
      .Add("hop", p->hop());
  if (!p->agent_id().empty()) j.Add("agent_id", p->agent_id());
  if (p->has_code()) {
    j.Add("code", absl::StrCat("sha256:", absl::BytesToHexString(p->code().sha256()), "/",
                               p->code().size()));
  }
  if (!p->transfer_id().empty()) j.Add("transfer_id", absl::BytesToHexString(p->transfer_id()));
  return j;
}

std::string TimeText(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

void PrintLink(int index, const vault::v1::SignedLink& link) {
  absl::StatusOr<LinkPayload> p = capability::ParseLinkPayload(link.payload());
  std::cout << "link " << index << "  "
            << absl::BytesToHexString(capability::LinkHash(link)).substr(0, 16) << "\n";
  if (!p.ok()) {
    std::cout << "  (invalid: " << p.status().message() << ")\n";
    return;
  }
  auto key = [](const std::string& raw) {
    absl::StatusOr<PublicKey> k = PublicKey::FromRaw(raw);
    return k.ok() ? k->ToText() : std::string("(invalid key)");
  };
  std::cout << "  kind:        " << LinkPayload::Kind_Name(p->kind()) << "\n"
            << "  issuer:      " << key(p->issuer()) << "\n"
            << "  audience:    " << key(p->audience()) << "\n"
            << "  valid:       " << TimeText(p->not_before_unix_ms()) << " .. "
            << TimeText(p->not_after_unix_ms()) << "\n"
            << "  hop:         " << p->hop() << "\n";
  if (!p->agent_id().empty()) std::cout << "  agent:       " << p->agent_id() << "\n";
  for (const vault::v1::Grant& g : p->grants()) {
    std::cout << "  grant:       " << capability::GrantToString(g) << "\n";
  }
  std::cout << "  constraints: " << ConstraintsLine(p->constraints()) << "\n";
}

int Fail(const absl::Status& s, bool json) { return ReportError(s, json); }

}  // namespace

void AddKeyCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static std::string key_file;
  auto* key = app.add_subcommand("key", "Principal keys (Ed25519)");
  key->require_subcommand(1);
  auto* gen = key->add_subcommand(
      "generate", "Create a new Ed25519 key: PKCS#8 PEM, mode 0600; refuses an existing file");
  gen->add_option("--out", key_file, "The key file to create")->required();
  gen->callback([&] {
    command = [&g] {
      absl::StatusOr<PrivateKey> k = PrivateKey::Generate();
      absl::Status s = k.ok() ? k->SaveNewFile(key_file) : k.status();
      if (!s.ok()) return Fail(s, g.json());
      const PublicKey& pub = k->public_key();
      if (g.json()) {
        std::cout << Json::Object()
                         .Add("file", key_file)
                         .Add("principal", pub.ToText())
                         .Add("short_id", pub.ShortId())
                         .ToString()
                  << "\n";
      } else {
        std::cout << pub.ToText() << "  " << key_file << "\n";
      }
      return kExitOk;
    };
  });
  auto* show = key->add_subcommand("show", "Print the principal id of a key file");
  show->add_option("FILE", key_file, "A private key file")->required();
  show->callback([&] {
    command = [&g] {
      absl::StatusOr<PrivateKey> k = PrivateKey::LoadFile(key_file);
      if (!k.ok()) return Fail(k.status(), g.json());
      const PublicKey& pub = k->public_key();
      if (g.json()) {
        std::cout << Json::Object()
                         .Add("principal", pub.ToText())
                         .Add("short_id", pub.ShortId())
                         .ToString()
                  << "\n";
      } else {
        std::cout << pub.ToText() << "\nshort id: " << pub.ShortId() << "\n";
      }
      return kExitOk;
    };
  });
}

void AddCapCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static CapFlags f;
  auto* cap = app.add_subcommand("cap", "Capability chains: issue, delegate, show, verify, revoke");
  cap->require_subcommand(1);

  auto* issue =
      cap->add_subcommand("issue", "Sign a root link: ISSUER grants authority to AUDIENCE");
  issue->add_option("--key", f.key, "The issuer's private key (PKCS#8 PEM)")->required();
  issue->add_option("--to", f.to, "The audience: ed25519:<hex>, or a key file")->required();
  issue->add_option("--grant", f.grants,
                    "A grant (repeatable), in the S-expression form '(read (path \"/vault/p/\"))' "
                    "or the shorthand read:/p, write:/p, read-hash:sha256:<hex>, cas-read, "
                    "cas-write, spawn, network:HOST[:PORT], send:AGENT, receive:AGENT, "
                    "migrate:V1,V2");
  issue->add_option(
      "--constraints", f.constraints,
      "Limits: '(max-migrations 3)', '(constraints (max-memory (* 512 1024 1024)) ...)' "
      "or max-runtime=S,max-memory=B,max-storage=B,max-cpu=S,max-open-files=N,"
      "max-processes=N,max-migrations=N,expires=UNIX_S");
  issue->add_option("--kind", f.kind, "delegate (principal to principal) or spawn (to a vault)")
      ->capture_default_str();
  issue->add_option("--agent-id", f.agent_id, "The agent this authority is for (spawn)");
  issue->add_option("--code", f.code, "The agent's code: sha256:<hex>/<size> (spawn)");
  issue->add_option("--valid-for", f.valid_for, "How long the link is valid, e.g. 24h, 30m")
      ->capture_default_str();
  issue->add_option("--out", f.out, "Chain file to write")->required();
  issue->callback([&] {
    command = [&g] {
      absl::Status s = [&]() -> absl::Status {
        VAULT_ASSIGN_OR_RETURN(PrivateKey key, PrivateKey::LoadFile(f.key));
        VAULT_ASSIGN_OR_RETURN(PublicKey to, PrincipalArg(f.to, "--to"));
        absl::Duration valid;
        if (!absl::ParseDuration(f.valid_for, &valid) || valid <= absl::ZeroDuration()) {
          return absl::InvalidArgumentError(
              absl::StrCat("--valid-for \"", f.valid_for, "\" is not a positive duration"));
        }
        LinkPayload p;
        p.set_version(capability::kLinkVersion);
        VAULT_ASSIGN_OR_RETURN(LinkPayload::Kind kind, KindArg(f.kind));
        p.set_kind(kind);
        p.set_issuer(key.public_key().raw());
        p.set_audience(to.raw());
        p.set_agent_id(f.agent_id);
        if (!f.code.empty()) {
          VAULT_ASSIGN_OR_RETURN(*p.mutable_code(), DigestArg(f.code));
        }
        VAULT_RETURN_IF_ERROR(FillAuthority(f, &p));
        const absl::Time now = absl::Now();
        p.set_not_before_unix_ms(absl::ToUnixMillis(now));
        p.set_not_after_unix_ms(absl::ToUnixMillis(now + valid));
        VAULT_ASSIGN_OR_RETURN(vault::v1::SignedLink link, capability::SignLink(p, key));
        vault::v1::Chain chain;
        *chain.add_links() = std::move(link);
        return WriteChain(chain, f.out);
      }();
      if (!s.ok()) return Fail(s, g.json());
      if (g.json())
        std::cout << Json::Object().Add("out", f.out).Add("links", 1).ToString() << "\n";
      return kExitOk;
    };
  });

  auto* revoke = cap->add_subcommand(
      "revoke",
      "Revoke an agent or a link (and every chain through it) on a vault: signs a revocation "
      "with --as, which counts only where --as is a principal of the chain at or above what it "
      "revokes; the vault keeps it and terminates the running agents it cuts (admin socket)");
  revoke->add_option("--agent-id", f.agent_id, "The agent to revoke");
  revoke->add_option("--link", f.link,
                     "The link to revoke: its hash, 64 hex digits (vaultctl -o json cap show)");
  revoke->add_option("--as", f.as, "The revoking principal's private key (PKCS#8 PEM)")->required();
  revoke->add_option("--reason", f.reason, "Why (kept with the revocation and audited)");
  revoke->callback([&] { command = [&g] { return RevokeCommand(g, f); }; });

  auto* del = cap->add_subcommand(
      "delegate", "Append an attenuated link: the chain's holder passes on part of its authority");
  del->add_option("--chain", f.chain, "The chain file to extend")->required();
  del->add_option("--key", f.key, "The holder's private key (the last link's audience)")
      ->required();
  del->add_option("--to", f.to, "The new audience: ed25519:<hex>, or a key file")->required();
  del->add_option("--grant", f.grants, "Grants (repeatable; default: all of the holder's)");
  del->add_option("--constraints", f.constraints, "Limits (default: the holder's)");
  del->add_option("--kind", f.kind, "delegate or spawn")->capture_default_str();
  del->add_option("--agent-id", f.agent_id, "The agent (spawn)");
  del->add_option("--code", f.code, "The agent's code: sha256:<hex>/<size> (spawn)");
  del->add_option("--out", f.out, "Chain file to write")->required();
  del->callback([&] {
    command = [&g] {
      absl::Status s = [&]() -> absl::Status {
        VAULT_ASSIGN_OR_RETURN(vault::v1::Chain chain, ReadChain(f.chain));
        if (chain.links_size() == 0) {
          return absl::InvalidArgumentError(absl::StrCat(f.chain, " holds no links"));
        }
        const vault::v1::SignedLink& last = chain.links(chain.links_size() - 1);
        VAULT_ASSIGN_OR_RETURN(LinkPayload parent, capability::ParseLinkPayload(last.payload()));
        VAULT_ASSIGN_OR_RETURN(PrivateKey key, PrivateKey::LoadFile(f.key));
        if (key.public_key().raw() != parent.audience()) {
          return absl::PermissionDeniedError(
              "--key is not the holder of this chain (the last link's audience)");
        }
        VAULT_ASSIGN_OR_RETURN(PublicKey to, PrincipalArg(f.to, "--to"));
        LinkPayload p;
        p.set_version(capability::kLinkVersion);
        VAULT_ASSIGN_OR_RETURN(LinkPayload::Kind kind, KindArg(f.kind));
        p.set_kind(kind);
        p.set_parent(capability::LinkHash(last));
        p.set_issuer(key.public_key().raw());
        p.set_audience(to.raw());
        p.set_agent_id(f.agent_id.empty() ? parent.agent_id() : f.agent_id);
        if (!f.code.empty()) {
          VAULT_ASSIGN_OR_RETURN(*p.mutable_code(), DigestArg(f.code));
        } else if (parent.has_code()) {
          *p.mutable_code() = parent.code();
        }
        if (f.grants.empty()) {
          *p.mutable_grants() = parent.grants();
        }
        VAULT_RETURN_IF_ERROR(FillAuthority(f, &p));
        if (f.constraints.empty()) *p.mutable_constraints() = parent.constraints();
        // Refuse to widen, with the reason (the verifier would refuse the chain anyway).
        VAULT_RETURN_IF_ERROR(capability::IsSubset(p.grants(), parent.grants()));
        VAULT_RETURN_IF_ERROR(capability::ConstraintsSubset(p.constraints(), parent.constraints()));
        p.set_not_before_unix_ms(parent.not_before_unix_ms());
        p.set_not_after_unix_ms(parent.not_after_unix_ms());
        VAULT_ASSIGN_OR_RETURN(vault::v1::SignedLink link, capability::SignLink(p, key));
        *chain.add_links() = std::move(link);
        return WriteChain(chain, f.out);
      }();
      if (!s.ok()) return Fail(s, g.json());
      if (g.json()) std::cout << Json::Object().Add("out", f.out).ToString() << "\n";
      return kExitOk;
    };
  });

  auto* show = cap->add_subcommand("show", "Print a chain file, link by link");
  show->add_option("FILE", f.chain, "Chain file")->required();
  show->callback([&] {
    command = [&g] {
      absl::StatusOr<vault::v1::Chain> chain = ReadChain(f.chain);
      if (!chain.ok()) return Fail(chain.status(), g.json());
      if (g.json()) {
        Json links = Json::Array();
        for (int i = 0; i < chain->links_size(); ++i) links.Push(LinkJson(i, chain->links(i)));
        std::cout << Json::Object().Add("links", links).ToString() << "\n";
      } else {
        for (int i = 0; i < chain->links_size(); ++i) PrintLink(i, chain->links(i));
      }
      return kExitOk;
    };
  });

  auto* verify = cap->add_subcommand(
      "verify", "Verify a chain file as a vault would (exit 4 naming the rule and the link)");
  verify->add_option("FILE", f.chain, "Chain file")->required();
  verify
      ->add_option("--trust", f.trust,
                   "A trusted root principal: ed25519:<hex> or a key file (repeatable)")
      ->required();
  verify->add_option("--as", f.as,
                     "Verify as this audience (ed25519:<hex> or a key file): the last link's");
  verify->add_option("--vault-key", f.vault_keys,
                     "NAME=ed25519:<hex>: a vault's key, for migrate grants (repeatable)");
  verify->add_option("--federation", f.vault_config,
                     "A vault config whose members give the vault keys");
  verify->callback([&] {
    command = [&g] {
      absl::StatusOr<capability::VerifiedChain> v =
          [&]() -> absl::StatusOr<capability::VerifiedChain> {
        VAULT_ASSIGN_OR_RETURN(vault::v1::Chain chain, ReadChain(f.chain));
        std::vector<PublicKey> trusted;
        for (const std::string& t : f.trust) {
          VAULT_ASSIGN_OR_RETURN(PublicKey k, PrincipalArg(t, "--trust"));
          trusted.push_back(k);
        }
        std::vector<std::pair<std::string, PublicKey>> vaults;
        for (const std::string& vk : f.vault_keys) {
          std::vector<std::string> kv = absl::StrSplit(vk, absl::MaxSplits('=', 1));
          if (kv.size() != 2) {
            return absl::InvalidArgumentError(
                absl::StrCat("--vault-key \"", vk, "\" is not NAME=ed25519:<hex>"));
          }
          VAULT_ASSIGN_OR_RETURN(PublicKey k, PrincipalArg(kv[1], "--vault-key"));
          vaults.emplace_back(kv[0], k);
        }
        if (!f.vault_config.empty()) {
          VAULT_ASSIGN_OR_RETURN(vault::v1::VaultConfig config,
                                 node::LoadConfigFile(f.vault_config));
          for (const vault::v1::Member& m : config.members()) {
            VAULT_ASSIGN_OR_RETURN(PublicKey k, PrincipalArg(m.public_key(), "members"));
            vaults.emplace_back(m.name(), k);
          }
        }
        capability::VerifyContext ctx;
        ctx.trusted_root = [&](const PublicKey& k) {
          for (const PublicKey& t : trusted) {
            if (t == k) return true;
          }
          return false;
        };
        ctx.vault_key = [&](absl::string_view name) -> std::optional<PublicKey> {
          for (const auto& [n, k] : vaults) {
            if (n == name) return k;
          }
          return std::nullopt;
        };
        if (!f.as.empty()) {
          VAULT_ASSIGN_OR_RETURN(PublicKey as, PrincipalArg(f.as, "--as"));
          ctx.this_vault = as;
        }
        capability::ChainVerifier verifier(nullptr);
        return verifier.Verify(chain, ctx);
      }();
      if (!v.ok()) {
        if (g.json() && capability::ChainErrorOf(v.status()) != capability::ChainError::kNone) {
          std::cout << Json::Object()
                           .Add("ok", false)
                           .Add("error",
                                capability::ChainErrorName(capability::ChainErrorOf(v.status())))
                           .Add("link", capability::FailingLink(v.status()))
                           .Add("message", v.status().message())
                           .ToString()
                    << "\n";
          return ExitCodeFor(v.status());
        }
        return Fail(v.status(), g.json());
      }
      Json grants = Json::Array();
      std::string text;
      for (const vault::v1::Grant& gr : v->grants) {
        grants.Push(capability::GrantToString(gr));
        absl::StrAppend(&text, "  ", capability::GrantToString(gr), "\n");
      }
      if (g.json()) {
        std::cout << Json::Object()
                         .Add("ok", true)
                         .Add("links", static_cast<uint64_t>(v->link_hashes.size()))
                         .Add("root", v->root->ToText())
                         .Add("agent_id", v->agent_id)
                         .Add("hop", v->hop)
                         .Add("grants", grants)
                         .ToString()
                  << "\n";
      } else {
        std::cout << "ok: " << v->link_hashes.size() << " links from " << v->root->ToText()
                  << (v->agent_id.empty() ? "" : absl::StrCat(", agent ", v->agent_id)) << ", hop "
                  << v->hop << "\ngrants:\n"
                  << text;
      }
      return kExitOk;
    };
  });
}

}  // namespace vault::vaultctl
