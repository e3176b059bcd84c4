// agent/effect_log: the effect log of an agent that replays (design §10, docs/replay.md). Every
// host call such an agent makes is a node: its sequence number, operation, the digest of its
// request, the whole response (to answer the call again) and its digest, the vault that answered,
// and the chain digest before it, so that the nodes form a hash chain. The log is the agent's
// state: written out (signed by the vault) at each checkpoint and hop, it lets the next start of
// the agent re-run its code with every call answered from the log, effects not performed again,
// until the log ends; then the agent goes on live.
//
//   EffectLog log({"a-1f2e", code_sha256, "ed25519:..."}, std::nullopt);
//   log.Append(EffectLog::Prepare("cas_put", "vault-a", RequestDigest(request), response));
//   ASSIGN_OR_RETURN(std::string object, log.WriteOut(vault_key, "vault-a"));  // the state
//   ASSIGN_OR_RETURN(EffectLog again, EffectLog::Read(object, owner, trusted));
//
// Thread-safety: none; the runtime holds an agent's log under the agent's lock (and prepares
// nodes, and writes copies out, outside it).
#ifndef VAULT_AGENT_EFFECT_LOG_H_
#define VAULT_AGENT_EFFECT_LOG_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capability/principal.h"
#include "vault/v1/hostcall.pb.h"

namespace vault::agent {

// The first bytes of a state object that is an effect log.
inline constexpr absl::string_view kEffectLogMagic = "vault-effect-log/1\n";
// A log past this size is no longer kept: the agent runs on, but can neither checkpoint nor
// move (its next start would not find the calls it made since).
inline constexpr size_t kMaxEffectLogBytes = 64u << 20;
// The largest execution state a log may start from (Rebase), beside its nodes.
inline constexpr size_t kMaxSnapshotBytes = 512u << 20;

bool IsEffectLog(absl::string_view state);

// SHA-256 of `request` with its call id cleared, serialized deterministically.
std::string RequestDigest(const vault::v1::HostRequest& request);

class EffectLog {
 public:
  // Whose log it is: the chain starts from these, so that a log is never replayed for another
  // agent, other code or another principal.
  struct Owner {
    std::string agent_id;
    std::string code_sha256;  // raw 32 bytes
    std::string principal;    // ed25519:<hex>
  };
  EffectLog(Owner owner, std::optional<std::string> initial_state);

  // Reads a state object written by WriteOut and checks it whole: the magic, the owner, every
  // node's sequence number, chain link and response digest, the head, and the signature, made by
  // a key `trusted` accepts (this vault's own, or a member's). INVALID_ARGUMENT naming the node,
  // PERMISSION_DENIED for an untrusted signer, UNAUTHENTICATED for a bad signature.
  static absl::StatusOr<EffectLog> Read(
      absl::string_view object, const Owner& owner,
      const std::function<bool(absl::string_view raw_key)>& trusted);

  // A node for the call `op` answered by `vault`: the request's digest (RequestDigest) and
  // `response` (its call id cleared), serialized and hashed. The costly part of appending, done
  // without the agent's lock.
  static vault::v1::EffectNode Prepare(absl::string_view op, absl::string_view vault,
                                       absl::string_view request_sha256,
                                       vault::v1::HostResponse response);
  // Appends a prepared node (numbering and chaining it). Past kMaxEffectLogBytes the log lets
  // go of its nodes, keeps nothing more, and overflowed() is true.
  void Append(vault::v1::EffectNode node);
  void Append(absl::string_view op, absl::string_view vault, absl::string_view request_sha256,
              vault::v1::HostResponse response) {
    Append(Prepare(op, vault, request_sha256, std::move(response)));
  }
  // Starts the log again from an execution state (a wasm agent's snapshot, taken in the call
  // being made now): the nodes before it are dropped, the chain starts from the snapshot too.
  void Rebase(std::string snapshot);
  // Forgets the last node (a migrate that did not happen after all).
  void DropLast();
  // One call more, added to a written-out object only (a migrate: the call that moves the agent,
  // as it will have been answered at the destination).
  struct Extra {
    std::string op;
    std::string request_sha256;
    vault::v1::HostResponse response;
    // The execution state the call was made in (a wasm agent's snapshot): the log handed over
    // starts from it (Rebase) and holds this one call.
    std::optional<std::string> snapshot;
  };
  // The state object: kEffectLogMagic and the log (with `extra`, when given), its head signed
  // with `key` by the vault named `vault`. RESOURCE_EXHAUSTED once overflowed().
  absl::StatusOr<std::string> WriteOut(const capability::PrivateKey& key, absl::string_view vault,
                                       const Extra* extra = nullptr) const;

  size_t size() const { return static_cast<size_t>(log_.nodes_size()); }
  const vault::v1::EffectNode& node(size_t i) const { return log_.nodes(static_cast<int>(i)); }
  bool has_initial_state() const { return log_.has_initial_state(); }
  const std::string& initial_state() const { return log_.initial_state(); }
  const std::string& initial_state_sha256() const { return initial_sha256_; }
  bool has_snapshot() const { return log_.has_snapshot(); }
  const std::string& snapshot() const { return log_.snapshot(); }
  const std::string& snapshot_sha256() const { return snapshot_sha256_; }
  const std::string& head() const { return log_.head(); }
  size_t bytes() const { return bytes_; }
  bool overflowed() const { return overflowed_; }

 private:
  vault::v1::EffectLog log_;  // head kept current; signer and signature empty
  std::string initial_sha256_;
  std::string snapshot_sha256_;
  size_t bytes_ = 0;
  bool overflowed_ = false;
};

}  // namespace vault::agent

#endif  // VAULT_AGENT_EFFECT_LOG_H_
