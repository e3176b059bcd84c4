// vaultctl agent spawn, pause, resume and terminate: the commands that start an agent or change
// its state, each signed with --as's key.
//
// spawn signs a one-link chain: a SPAWN link from --as's key to the vault's key (which
// Admin.Status reports). pause, resume and terminate sign a ControlPayload with --as's key
// (agent_remote.cc) for the vault that hosts the agent.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "capability/chain.h"
#include "capability/principal.h"
#include "capability/signing_domains.h"
#include "capability/text_form.h"
#include "common/file_util.h"
#include "common/proto_util.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "common/unique_fd.h"
#include "node/grpc_status.h"
#include "vault/v1/agent.pb.h"
#include "vault/v1/image.grpc.pb.h"
#include "vaultctl/cas_upload.h"
#include "vaultctl/commands.h"
#include "vaultctl/internal/agent_commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {

namespace {

using capability::PrivateKey;
using capability::PublicKey;
using vault::v1::AgentSpec;
using vault::v1::ControlPayload;
using vault::v1::LinkPayload;

// The authority of a spawned agent whose constraints set no expiry lasts this long.
constexpr absl::Duration kDefaultSpawnValidity = absl::Hours(24 * 365);
// A SPAWN link is valid from a minute ago, for vaults whose clocks run a little behind.
constexpr absl::Duration kSpawnBackdate = absl::Seconds(60);

// --code-signature FILE: 64 raw bytes, or 128 hex digits (surrounding whitespace ignored).
absl::StatusOr<std::string> ReadSignature(const std::string& path) {
  VAULT_ASSIGN_OR_RETURN(std::string bytes, common::ReadFile(path));
  if (bytes.size() == PublicKey::kSignatureSize) return bytes;
  absl::string_view hex = absl::StripAsciiWhitespace(bytes);
  if (hex.size() == 2 * PublicKey::kSignatureSize &&
      std::all_of(hex.begin(), hex.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
    return absl::HexStringToBytes(hex);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--code-signature: ", path, " holds neither a 64-byte signature nor 128 hex digits"));
}

// A private file holding `text` in the temporary directory, removed when this goes: the inline
// code of a spec, uploaded as UploadFile uploads any code file.
class TempFile {
 public:
  static absl::StatusOr<TempFile> Create(absl::string_view prefix, absl::string_view text) {
    const char* dir = std::getenv("TMPDIR");
    std::string path =
        absl::StrCat(dir != nullptr && *dir != '\0' ? dir : "/tmp", "/", prefix, "XXXXXX");
    common::UniqueFd fd(mkstemp(path.data()));
    if (!fd.valid()) return common::PosixError(errno, absl::StrCat("mkstemp ", path));
    TempFile file(path);
    for (size_t done = 0; done < text.size();) {
      ssize_t n = write(fd.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return common::PosixError(errno, absl::StrCat("write ", path));
      done += static_cast<size_t>(n);
    }
    return file;
  }
  TempFile(TempFile&& other) noexcept : path_(std::exchange(other.path_, std::string())) {}
  TempFile& operator=(TempFile&&) = delete;
  ~TempFile() {
    if (!path_.empty()) unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

absl::Status CheckRegularFile(const std::string& path, absl::string_view what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return common::PosixError(errno, absl::StrCat(what, " ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is not a regular file"));
  }
  return absl::OkStatus();
}

}  // namespace

// --- agent spawn ---------------------------------------------------------------------------

int SpawnCommand(const GlobalOptions& g, const AgentFlags& f) {
  vault::v1::SpawnRequest req;
  AgentSpec& spec = *req.mutable_spec();
  std::optional<PrivateKey> key;
  std::string code_path;  // a file to upload first; "" when the spec names a CAS object
  std::optional<TempFile> inline_code;  // (code '(lambda () ...)): its text, as a file
  std::vector<std::string> warnings;
  absl::Status input = [&]() -> absl::Status {
    VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(f.spec));
    capability::SpecOptions options;
    for (const std::string& b : f.bind) {
      const size_t eq = b.find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--bind \"", b, "\": expected NAME=VALUE, e.g. input-hash=sha256:<hex>"));
      }
      options.bindings[b.substr(0, eq)] = b.substr(eq + 1);
    }
    VAULT_ASSIGN_OR_RETURN(capability::ParsedSpec parsed,
                           capability::ParseAgentSpecWithOptions(text, f.spec, options));
    spec = std::move(parsed.spec);
    warnings = std::move(parsed.warnings);
    if (!f.code.empty()) {
      code_path = f.code;
    } else if (spec.has_code_file()) {
      code_path = common::ResolvePath(common::DirName(f.spec), spec.code_file());
    } else if (spec.has_code_source()) {
      VAULT_ASSIGN_OR_RETURN(TempFile file, TempFile::Create("vaultctl-code-", spec.code_source()));
      code_path = file.path();
      inline_code.emplace(std::move(file));
    } else if (!spec.has_code_digest() && spec.image().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(f.spec,
                       " names no code: put (code \"sha256:<hex>/<size>\"), (code '(lambda () "
                       "...)) or (code-file \"FILE\") in it, or pass --code FILE"));
    }
    if (!code_path.empty()) VAULT_RETURN_IF_ERROR(CheckRegularFile(code_path, "code file"));
    if (!spec.code_signer().empty()) {
      if (f.code_signature.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(f.spec, " wants its code signed by ",
                                                       spec.code_signer(),
                                                       ": pass --code-signature FILE"));
      }
      VAULT_ASSIGN_OR_RETURN(*req.mutable_code_signature(), ReadSignature(f.code_signature));
    } else if (!f.code_signature.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--code-signature: ", f.spec, " names no code_signer for the vault to check it with"));
    }
    if (!f.state.empty()) {
      VAULT_ASSIGN_OR_RETURN(*req.mutable_initial_state(), common::ReadFile(f.state));
      req.set_has_initial_state(true);
    }
    if (spec.constraints().has_expires_unix_ms() &&
        spec.constraints().expires_unix_ms() <= absl::ToUnixMillis(absl::Now())) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.spec, ": its constraints expired at ", TimeText(spec.constraints().expires_unix_ms())));
    }
    VAULT_ASSIGN_OR_RETURN(PrivateKey k, PrivateKey::LoadFile(f.as));
    key.emplace(std::move(k));
    if (!spec.spawned_by().empty()) {
      // (spawned-by ...) is checked here and again by the vault against the chain's root.
      const std::string& who = spec.spawned_by();
      if (!absl::StartsWith(who, PublicKey::kTextPrefix) && !common::PathExists(who)) {
        return absl::InvalidArgumentError(
            absl::StrCat(f.spec, " says (spawned-by ", who, "): bind ", who,
                         " to the spawning key, --bind ", who, "=", f.as, " (or ed25519:<hex>)"));
      }
      VAULT_ASSIGN_OR_RETURN(PublicKey claimed, PrincipalArg(who, "spawned-by"));
      if (claimed.ToText() != key->public_key().ToText()) {
        return absl::InvalidArgumentError(absl::StrCat(f.spec, " says it is spawned by ",
                                                       claimed.ToText(), " but --as ", f.as, " is ",
                                                       key->public_key().ToText()));
      }
      spec.set_spawned_by(claimed.ToText());
    }
    return absl::OkStatus();
  }();
  for (const std::string& w : warnings) std::cerr << "warning: " << w << "\n";
  if (!input.ok()) return ReportInputError(input, g.json());

  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  absl::StatusOr<vault::v1::SpawnResponse> resp =
      [&]() -> absl::StatusOr<vault::v1::SpawnResponse> {
    VAULT_ASSIGN_OR_RETURN(PublicKey vault_key, VaultKey(*conn));
    if (!spec.image().empty()) {
      // A container agent's code is its image's manifest, which the chain binds.
      vault::v1::Images::Stub images(conn->channel());
      vault::v1::InspectImageRequest inspect;
      inspect.set_ref(spec.image());
      vault::v1::ImageRecord image;
      absl::Status found = node::FromGrpc(images.Inspect(conn->Context().get(), inspect, &image));
      if (!found.ok()) {
        return absl::Status(
            found.code(),
            absl::StrCat(
                "(image \"", spec.image(), "\"): ", found.message(),
                absl::IsNotFound(found) ? "; import it first: vaultctl image import FILE" : ""));
      }
      if (spec.has_code_digest() && (spec.code_digest().sha256() != image.manifest().sha256() ||
                                     spec.code_digest().size() != image.manifest().size())) {
        return absl::InvalidArgumentError(absl::StrCat(f.spec, ": (image \"", spec.image(),
                                                       "\") is ", image.id(),
                                                       " here, not the (code ...) it also names"));
      }
      *spec.mutable_code_digest() = image.manifest();
    }
    if (!code_path.empty()) {
      VAULT_ASSIGN_OR_RETURN(cas::Digest code, UploadFile(*conn, code_path));
      node::ToProto(code, spec.mutable_code_digest());  // replaces code_file (a oneof)
    }
    VAULT_ASSIGN_OR_RETURN(std::string id_bytes, common::RandomBytes(8));
    const absl::Time now = absl::Now();
    LinkPayload p;
    p.set_version(capability::kLinkVersion);
    p.set_kind(LinkPayload::SPAWN);
    p.set_issuer(key->public_key().raw());
    p.set_audience(vault_key.raw());
    p.set_agent_id(spec.id().empty() ? absl::StrCat("a-", absl::BytesToHexString(id_bytes))
                                     : spec.id());
    *p.mutable_code() = spec.code_digest();
    *p.mutable_grants() = spec.grants();
    *p.mutable_constraints() = spec.constraints();
    p.set_not_before_unix_ms(absl::ToUnixMillis(now - kSpawnBackdate));
    p.set_not_after_unix_ms(spec.constraints().has_expires_unix_ms()
                                ? spec.constraints().expires_unix_ms()
                                : absl::ToUnixMillis(now + kDefaultSpawnValidity));
    p.set_hop(0);
    VAULT_ASSIGN_OR_RETURN(vault::v1::SignedLink link, capability::SignLink(p, *key));
    *req.mutable_chain()->add_links() = std::move(link);
    vault::v1::SpawnResponse out;
    VAULT_RETURN_IF_ERROR(FromAgentsGrpc(conn->agents()->Spawn(conn->Context().get(), req, &out)));
    return out;
  }();
  if (!resp.ok()) return ReportError(resp.status(), g.json());
  for (const std::string& w : resp->warnings()) std::cerr << "warning: " << w << "\n";
  if (g.json()) {
    Json all_warnings = Json::Array();
    for (const std::string& w : warnings) all_warnings.Push(w);
    for (const std::string& w : resp->warnings()) all_warnings.Push(w);
    std::cout << Json::Object()
                     .Add("agent_id", resp->agent_id())
                     .Add("state", StateName(resp->state()))
                     .Add("grants", GrantsJson(resp->grants()))
                     .Add("constraints", ConstraintsJson(resp->constraints()))
                     .Add("warnings", std::move(all_warnings))
                     .ToString()
              << "\n";
  } else {
    std::cout << resp->agent_id() << "\n";
  }
  return kExitOk;
}

// --- agent pause / resume / terminate -------------------------------------------------------

int ControlCommand(const GlobalOptions& g, const AgentFlags& f, ControlPayload::Action action) {
  absl::StatusOr<PrivateKey> key = PrivateKey::LoadFile(f.as);
  if (!key.ok()) return ReportInputError(key.status(), g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  std::string at_vault;  // "" when the agent is (or was) here
  ControlPayload p;
  p.set_agent_id(f.id);
  p.set_action(action);
  p.set_reason(f.reason);
  absl::StatusOr<vault::v1::ControlResponse> resp = SignedControl(
      *conn, *key, p,
      action == ControlPayload::TERMINATE ? absl::Seconds(10) : absl::ZeroDuration(), &at_vault);
  if (!resp.ok()) return ReportError(resp.status(), g.json());
  if (g.json()) {
    Json out = Json::Object().Add("agent_id", f.id).Add("state", StateName(resp->state()));
    if (!at_vault.empty()) out.Add("vault", at_vault);
    std::cout << out.ToString() << "\n";
  } else {
    std::cout << StateName(resp->state());
    if (!at_vault.empty()) std::cout << " (on " << at_vault << ")";
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace vault::vaultctl
