// capability/grant: the authority an agent holds — grants and constraints (design §5) — and the
// two decidable operations the chain verifier and the vault's policy are built on:
//
//   IsSubset(child, parent)  does `parent` authorize everything `child` asks for?
//   Intersect(a, b)          the authority both `a` and `b` allow (attenuation at a vault)
//
// Scopes:
//   - paths are absolute and normalized; anything else is refused, never repaired: no ".", "..",
//     empty segment ("//"), trailing "/", NUL, "%", or backslash. "/" is the root. A path
//     covers itself and everything below it by whole segments: /vault/pub covers /vault/pub/x
//     but never /vault/public.
//   - hosts are lowercase DNS names (labels of [a-z0-9-], 1-63 chars, not starting or ending with
//     '-', total <= 253, no trailing dot), exact or "*.suffix". "*.example.com" covers
//     a.example.com and *.a.example.com, never example.com itself nor xexample.com. Port 0
//     covers every port; otherwise ports must be equal.
//   - URLs (READ: GET, WRITE: POST, NETWORK: both, performed by the vault) are patterns
//     "scheme://host:port/path" in canonical form (CanonicalUrl): http or https, the host as
//     above, an explicit port, a path with its query that is exact or ends in '*' (any
//     continuation). A pattern covers itself and, when it ends in '*', every URL or pattern of
//     the same scheme and port on a covered host whose path starts with what precedes the '*'.
//     User info, fragments, dot segments and percent-encoded '.', '/' or '\' are refused.
//   - SEND/RECEIVE name an agent id, or "*" (any agent), which covers every id, and optionally
//     the message types allowed (sorted, unique; none: any type). A parent covers a child when
//     its agent covers the child's and its types are none, or the child's types are some and a
//     subset of the parent's ("send * types=ping" never covers "send *"). Two grants meet in
//     the narrower agent and the types both allow (none and a list: the list; two lists: the
//     types they share, and no grant when they share none).
//   - MIGRATE names a set of vaults; a child's set must be a subset.
//   - READ(hash) is covered by READ(same hash) and by CAS_READ; no other kinds cover each other.
//   - constraints: an absent limit is no limit; a child's limit must be <= its parent's (and
//     present when the parent's is); expiry likewise (earlier is narrower).
//
//   VAULT_RETURN_IF_ERROR(ValidateGrants(link.grants()));
//   VAULT_RETURN_IF_ERROR(IsSubset(child.grants(), parent.grants()));   // PERMISSION_DENIED
//   std::vector<vault::v1::Grant> here = Intersect(chain_grants, ceiling);
//
// Thread-safety: pure functions.
#ifndef VAULT_CAPABILITY_GRANT_H_
#define VAULT_CAPABILITY_GRANT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_field.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {

using Grants = google::protobuf::RepeatedPtrField<vault::v1::Grant>;

// OK when `path` is already normalized (see above); INVALID_ARGUMENT naming the problem.
absl::Status ValidatePath(absl::string_view path);
// OK when `host` is a valid exact or "*.suffix" host; INVALID_ARGUMENT otherwise.
absl::Status ValidateHost(absl::string_view host);
// OK when `type` may be a message's type, and so an entry of a grant's message_types: 1-64 of
// [a-z0-9._-], and not "vault.*" (the vault's own) other than "vault.answer"; INVALID_ARGUMENT
// ("message type \"vault.query\" is reserved for the vault") otherwise.
absl::Status ValidateMessageType(absl::string_view type);
bool PathCovers(absl::string_view parent, absl::string_view child);
bool UrlCovers(absl::string_view parent, absl::string_view child);

// A URL as people write it ("https://arxiv.org/rss/*", "HTTP://Example.com?q=1") in canonical
// form ("https://arxiv.org:443/rss/*", "http://example.com:80/?q=1"): scheme and host
// lowercased, the default port written, "/" for an empty path. kPattern: a grant's URL ('*' may
// end it, wildcard hosts allowed); kRequest: a URL to fetch. INVALID_ARGUMENT naming the
// problem.
enum class UrlUse { kPattern, kRequest };
absl::StatusOr<std::string> CanonicalUrl(absl::string_view text, UrlUse use);
// May the canonical request URL `request` be fetched under the grant pattern `pattern`?
// Fail-closed on anything invalid.
bool UrlAllows(absl::string_view pattern, absl::string_view request);
bool HostCovers(absl::string_view parent, absl::string_view child);

// A grant's scope fields are exactly those of its kind, each valid; MIGRATE vaults sorted,
// unique, valid vault names; SEND/RECEIVE message_types sorted, unique, valid message types (no
// other kind has them); READ has a path or a 32-byte hash, not both. INVALID_ARGUMENT.
absl::Status ValidateGrant(const vault::v1::Grant& grant);
// Every grant valid, and at most 256 of them (IsSubset compares pairs).
absl::Status ValidateGrants(const Grants& grants);

// Does `parent` authorize everything `child` does? Fails closed: an invalid grant covers nothing
// and is covered by nothing.
bool Covers(const vault::v1::Grant& parent, const vault::v1::Grant& child);
// OK when every grant of `child` is covered by some grant of `parent`; else PERMISSION_DENIED
// naming the first grant that is not ("grant write /vault/public is not within the parent's
// grants").
absl::Status IsSubset(const Grants& child, const Grants& parent);
// The authority both allow: the non-empty pairwise intersections, without grants covered by
// another, in a canonical order (so grant lists that cover each other grant by grant give equal
// lists; {migrate a, migrate b} and {migrate a b} stay different).
std::vector<vault::v1::Grant> Intersect(const Grants& a, const Grants& b);
// The intersection of two grants into `out`; false (and `out` untouched) when they are disjoint.
bool IntersectOne(const vault::v1::Grant& a, const vault::v1::Grant& b, vault::v1::Grant* out);

// OK when each limit of `child` is at most `parent`'s; else PERMISSION_DENIED naming the first.
absl::Status ConstraintsSubset(const vault::v1::Constraints& child,
                               const vault::v1::Constraints& parent);
// The tighter of each limit.
vault::v1::Constraints IntersectConstraints(const vault::v1::Constraints& a,
                                            const vault::v1::Constraints& b);

// Human-readable, one line: "read /vault/pub", "read sha256:<hex>", "cas-read",
// "network *.example.com:443", "network api.example.com:*", "send agent-7",
// "send agent-7 types=ping,stop", "receive * types=ping", "migrate vault-b vault-c". The types
// list reads as in vaultctl's shorthand ("send:agent-7:ping,stop", vaultctl/shorthand.h).
std::string GrantToString(const vault::v1::Grant& grant);

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_GRANT_H_
