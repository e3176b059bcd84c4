// grant_rules: what the parts of capability/grant.h share: grant.cc (validation), grant_text.cc
// (GrantToString), grant_cover.cc (matching) and grant_intersect.cc (attenuation). Private to
// capability/.
//
// Thread-safety: pure functions.
#ifndef VAULT_CAPABILITY_INTERNAL_GRANT_RULES_H_
#define VAULT_CAPABILITY_INTERNAL_GRANT_RULES_H_

#include <string>

#include "absl/strings/string_view.h"
#include "vault/v1/capability.pb.h"

namespace vault::capability {

// nullptr when the path (the host) is valid, else a static description of the first problem;
// never allocates (grant.cc).
const char* PathProblem(absl::string_view path);
const char* HostProblem(absl::string_view host);
// nullptr when `url` is a canonical URL pattern (url_pattern.cc); never allocates.
const char* UrlProblem(absl::string_view url);
// Does valid pattern `parent` cover valid pattern `child` (url_pattern.cc)?
bool UrlCoversValid(absl::string_view parent, absl::string_view child);

// Is the grant valid (ValidateGrant without its message)? Never allocates (grant.cc).
bool IsValidGrant(const vault::v1::Grant& g);

// `s` in double quotes, escaped as GrantToString escapes values, for messages (grant_text.cc).
std::string Quoted(absl::string_view s);

// PathCovers and HostCovers for inputs already known to be valid (grant_cover.cc).
bool PathCoversValid(absl::string_view parent, absl::string_view child);
bool HostCoversValid(absl::string_view parent, absl::string_view child);
// Covers for grants already known to be valid (grant_cover.cc).
bool CoversValid(const vault::v1::Grant& parent, const vault::v1::Grant& child);

inline bool HasPath(const vault::v1::Grant& g) { return !g.path().empty(); }
inline bool HasHash(const vault::v1::Grant& g) { return !g.hash().empty(); }
inline bool HasHost(const vault::v1::Grant& g) { return !g.host().empty(); }
inline bool HasPort(const vault::v1::Grant& g) { return g.port() != 0; }
inline bool HasAgent(const vault::v1::Grant& g) { return !g.agent().empty(); }
inline bool HasVaults(const vault::v1::Grant& g) { return g.vaults_size() != 0; }
inline bool HasUrl(const vault::v1::Grant& g) { return !g.url().empty(); }
inline bool HasMessageTypes(const vault::v1::Grant& g) { return g.message_types_size() != 0; }

}  // namespace vault::capability

#endif  // VAULT_CAPABILITY_INTERNAL_GRANT_RULES_H_
