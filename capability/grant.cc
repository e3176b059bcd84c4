// Validation: the rules every scope of a grant follows (grant.h), checked without allocating so
// that the matching (grant_cover.cc) and the intersection (grant_intersect.cc) can use them.
#include "capability/grant.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "capability/internal/grant_rules.h"

namespace vault::capability {
namespace {

using vault::v1::Grant;

// Limits the header leaves open. They bound the work of the quadratic IsSubset and Intersect on
// grant lists an untrusted party sends, and refuse absurd values outright.
constexpr size_t kMaxPathBytes = 4096;  // PATH_MAX
constexpr size_t kMaxHostBytes = 253;
constexpr size_t kMaxLabelBytes = 63;
constexpr size_t kMaxAgentBytes = 128;
constexpr size_t kMaxVaultNameBytes = 63;
constexpr size_t kMaxVaultsPerGrant = 256;
constexpr size_t kMaxMessageTypeBytes = 64;
constexpr size_t kMaxMessageTypesPerGrant = 256;
constexpr size_t kMaxGrants = 256;  // per list, enforced by ValidateGrants
constexpr size_t kHashBytes = 32;
constexpr uint32_t kMaxPort = 65535;

}  // namespace

// Every Problem function returns nullptr when its input is valid, else a static description of
// the first problem. They never allocate, so Covers can use them on every call.

// Paths: see the header. Beyond it, only printable ASCII other than space is accepted (no control
// bytes, no non-ASCII bytes whose decoding could differ between layers), and at most
// kMaxPathBytes.
const char* PathProblem(absl::string_view path) {
  if (path.empty()) return "is empty";
  if (path.size() > kMaxPathBytes) return "is longer than 4096 bytes";
  for (char c : path) {
    if (c == '\0') return "contains a NUL byte";
    if (c == '%') return "contains '%'";
    if (c == '\\') return "contains '\\'";
    if (c <= ' ' || c > '~') return "contains a byte that is not printable ASCII";
  }
  if (path.front() != '/') return "is not absolute";
  if (path.size() == 1) return nullptr;  // "/"
  if (path.back() == '/') return "ends with '/'";
  // Each segment follows a '/'; path is "/s1/s2/.../sn" with n >= 1.
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == absl::string_view::npos) end = path.size();
    const absl::string_view segment = path.substr(start, end - start);
    if (segment.empty()) return "has an empty segment";
    if (segment == ".") return "has a \".\" segment";
    if (segment == "..") return "has a \"..\" segment";
    start = end + 1;
  }
  return nullptr;
}

namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || IsDigit(c); }

bool AllDigits(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return IsDigit(c); });
}

// A canonical dotted-quad IPv4 address: four decimal labels 0-255 without leading zeros.
bool IsCanonicalIpv4(absl::string_view s) {
  int labels = 0;
  size_t start = 0;
  while (true) {
    size_t end = s.find('.', start);
    if (end == absl::string_view::npos) end = s.size();
    const absl::string_view label = s.substr(start, end - start);
    if (label.empty() || label.size() > 3 || !AllDigits(label)) return false;
    if (label.size() > 1 && label[0] == '0') return false;
    int value = 0;
    for (char c : label) value = value * 10 + (c - '0');
    if (value > 255) return false;
    ++labels;
    if (end == s.size()) break;
    start = end + 1;
  }
  return labels == 4;
}

// An exact DNS name (no wildcard): labels of [a-z0-9-], 1-63 bytes, not starting or ending with
// '-', no trailing dot. A name whose last label is all digits is not a DNS name (no TLD is
// numeric); it is accepted only as a canonical dotted-quad IPv4 address, so that one address has
// one spelling ("0177.0.0.1", "2130706433" and "127.1" are refused). Sets *labels.
const char* DnsNameProblem(absl::string_view name, int* labels) {
  *labels = 0;
  if (name.empty()) return "is empty";
  if (name.back() == '.') return "ends with '.'";
  size_t start = 0;
  absl::string_view label;
  while (true) {
    size_t end = name.find('.', start);
    if (end == absl::string_view::npos) end = name.size();
    label = name.substr(start, end - start);
    if (label.empty()) return "has an empty label";
    if (label.size() > kMaxLabelBytes) return "has a label longer than 63 characters";
    for (char c : label) {
      if (c == '*') return "may use '*' only as the whole first label, as in \"*.example.com\"";
      if (c >= 'A' && c <= 'Z') return "is not lowercase";
      if (!IsLowerAlnum(c) && c != '-') {
        return "may contain only lowercase letters, digits, '-' and '.'";
      }
    }
    if (label.front() == '-' || label.back() == '-') {
      return "has a label starting or ending with '-'";
    }
    ++*labels;
    if (end == name.size()) break;
    start = end + 1;
  }
  if (AllDigits(label) && !IsCanonicalIpv4(name)) {
    return "ends in a numeric label but is not a dotted-quad IPv4 address";
  }
  return nullptr;
}

}  // namespace

// An exact name, or "*.suffix" where the suffix is a DNS name of at least two labels, not an IPv4
// address: "*.com" would cover a whole top-level domain and "*.0.0.1" a range of addresses.
const char* HostProblem(absl::string_view host) {
  if (host.empty()) return "is empty";
  if (host.size() > kMaxHostBytes) return "is longer than 253 characters";
  int labels = 0;
  if (absl::StartsWith(host, "*.")) {
    const absl::string_view suffix = host.substr(2);
    if (const char* problem = DnsNameProblem(suffix, &labels)) return problem;
    if (labels < 2) return "is a wildcard over a single label (a whole top-level domain)";
    if (IsCanonicalIpv4(suffix)) return "is a wildcard over an IPv4 address";
    return nullptr;
  }
  return DnsNameProblem(host, &labels);
}

namespace {

// Agent ids: "*" (any agent), or 1-128 bytes of [a-zA-Z0-9._-].
const char* AgentProblem(absl::string_view agent) {
  if (agent == "*") return nullptr;
  if (agent.empty()) return "is empty";
  if (agent.size() > kMaxAgentBytes) return "is longer than 128 characters";
  for (char c : agent) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || IsDigit(c) || c == '.' || c == '_' ||
          c == '-')) {
      return "may contain only letters, digits, '.', '_' and '-' (or be \"*\")";
    }
  }
  return nullptr;
}

// The rule of node/config.cc ValidateVaultName, restated here so that capability/ does not
// depend on node/: 1-63 bytes of [a-z0-9-], not starting or ending with '-'.
const char* VaultNameProblem(absl::string_view name) {
  if (name.empty() || name.size() > kMaxVaultNameBytes) return "must be 1 to 63 characters";
  for (char c : name) {
    if (!IsLowerAlnum(c) && c != '-') {
      return "may contain only lowercase letters, digits and '-'";
    }
  }
  if (name.front() == '-' || name.back() == '-') return "must not start or end with '-'";
  return nullptr;
}

// Message types, the rule of a message's `type` (agent/host_calls.cc uses ValidateMessageType):
// 1-64 bytes of [a-z0-9._-]; "vault.*" is the vault's own, except "vault.answer", which an agent
// may send in reply to a query.
const char* MessageTypeProblem(absl::string_view type) {
  if (type.empty() || type.size() > kMaxMessageTypeBytes) {
    return "must be 1-64 of [a-z0-9._-]";
  }
  for (char c : type) {
    if (!IsLowerAlnum(c) && c != '.' && c != '_' && c != '-') return "must be 1-64 of [a-z0-9._-]";
  }
  if (absl::StartsWith(type, "vault.") && type != "vault.answer") {
    return "is reserved for the vault";
  }
  return nullptr;
}

// Checks a grant. Returns true when valid; otherwise false, and when `why` is not null sets it
// to a description of the first problem. With `why` null it does not allocate.
bool CheckGrant(const Grant& g, std::string* why) {
  auto fail = [why](absl::string_view what, absl::string_view value, const char* problem) {
    if (why != nullptr) *why = absl::StrCat(what, " ", Quoted(value), " ", problem);
    return false;
  };
  auto fail_plain = [why](absl::string_view message) {
    if (why != nullptr) *why = std::string(message);
    return false;
  };
  // Messages with numbers, built only when wanted.
  auto fail_number = [why](absl::string_view before, uint64_t n, absl::string_view after) {
    if (why != nullptr) *why = absl::StrCat(before, n, after);
    return false;
  };
  // Fields this build does not know could narrow a grant; ignoring them would widen it.
  if (!g.GetReflection()->GetUnknownFields(g).empty()) {
    return fail_plain("has fields this vault does not know");
  }

  // Which scope fields the kind allows; every other one must be empty.
  bool path = false, hash = false, host = false, port = false, agent = false, vaults = false,
       types = false, url = false;
  switch (g.kind()) {
    case Grant::READ:
      path = HasPath(g);
      hash = HasHash(g);
      url = HasUrl(g);
      if (path + hash + url != 1)
        return fail_plain("needs exactly one of a path, a hash and a url");
      break;
    case Grant::WRITE:
      url = HasUrl(g);
      path = !url;
      if (url && HasPath(g)) return fail_plain("needs exactly one of a path and a url");
      break;
    case Grant::CAS_READ:
    case Grant::CAS_WRITE:
    case Grant::SPAWN:
      break;
    case Grant::NETWORK:
      url = HasUrl(g);
      host = !url;
      port = !url;
      if (url && (HasHost(g) || HasPort(g))) {
        return fail_plain("needs a host (and port) or a url, not both");
      }
      break;
    case Grant::SEND:
    case Grant::RECEIVE:
      agent = types = true;
      break;
    case Grant::MIGRATE:
      vaults = true;
      break;
    default:
      return fail_plain("has no valid kind");
  }
  if (!path && HasPath(g)) return fail_plain("may not have a path");
  if (!hash && HasHash(g)) return fail_plain("may not have a hash");
  if (!host && HasHost(g)) return fail_plain("may not have a host");
  if (!port && HasPort(g)) return fail_plain("may not have a port");
  if (!agent && HasAgent(g)) return fail_plain("may not have an agent");
  if (!vaults && HasVaults(g)) return fail_plain("may not have vaults");
  if (!url && HasUrl(g)) return fail_plain("may not have a url");
  if (!types && HasMessageTypes(g)) {
    return fail_plain("may not have message_types (only send and receive grants have them)");
  }

  if (path) {
    if (const char* problem = PathProblem(g.path())) return fail("path", g.path(), problem);
  }
  if (hash && g.hash().size() != kHashBytes) {
    return fail_number("hash must be 32 bytes, got ", g.hash().size(), "");
  }
  if (url) {
    if (const char* problem = UrlProblem(g.url())) return fail("url", g.url(), problem);
  }
  if (host) {
    if (const char* problem = HostProblem(g.host())) return fail("host", g.host(), problem);
  }
  if (port && g.port() > kMaxPort) {
    return fail_number("port ", g.port(), " is above 65535");
  }
  if (agent) {
    if (const char* problem = AgentProblem(g.agent())) return fail("agent", g.agent(), problem);
  }
  if (vaults) {
    if (g.vaults_size() == 0) return fail_plain("needs at least one vault");
    if (static_cast<size_t>(g.vaults_size()) > kMaxVaultsPerGrant) {
      return fail_number("names ", g.vaults_size(), " vaults; at most 256");
    }
    for (int i = 0; i < g.vaults_size(); ++i) {
      const std::string& v = g.vaults(i);
      if (const char* problem = VaultNameProblem(v)) return fail("vault name", v, problem);
      if (i > 0 && !(g.vaults(i - 1) < v)) {
        return fail_plain(g.vaults(i - 1) == v ? "names a vault twice" : "vaults are not sorted");
      }
    }
  }
  if (types) {  // empty: any type
    if (static_cast<size_t>(g.message_types_size()) > kMaxMessageTypesPerGrant) {
      return fail_number("names ", g.message_types_size(), " message types; at most 256");
    }
    for (int i = 0; i < g.message_types_size(); ++i) {
      const std::string& t = g.message_types(i);
      if (const char* problem = MessageTypeProblem(t)) return fail("message type", t, problem);
      if (i > 0 && !(g.message_types(i - 1) < t)) {
        return fail_plain(g.message_types(i - 1) == t ? "names a message type twice"
                                                      : "message types are not sorted");
      }
    }
  }
  return true;
}

}  // namespace

bool IsValidGrant(const Grant& g) { return CheckGrant(g, nullptr); }

absl::Status ValidatePath(absl::string_view path) {
  if (const char* problem = PathProblem(path)) {
    return absl::InvalidArgumentError(absl::StrCat("path ", Quoted(path), " ", problem));
  }
  return absl::OkStatus();
}

absl::Status ValidateHost(absl::string_view host) {
  if (const char* problem = HostProblem(host)) {
    return absl::InvalidArgumentError(absl::StrCat("host ", Quoted(host), " ", problem));
  }
  return absl::OkStatus();
}

absl::Status ValidateMessageType(absl::string_view type) {
  if (const char* problem = MessageTypeProblem(type)) {
    return absl::InvalidArgumentError(absl::StrCat("message type ", Quoted(type), " ", problem));
  }
  return absl::OkStatus();
}

absl::Status ValidateGrant(const Grant& grant) {
  std::string why;
  if (!CheckGrant(grant, &why)) {
    return absl::InvalidArgumentError(absl::StrCat("grant ", GrantToString(grant), ": ", why));
  }
  return absl::OkStatus();
}

absl::Status ValidateGrants(const Grants& grants) {
  if (static_cast<size_t>(grants.size()) > kMaxGrants) {
    return absl::InvalidArgumentError(
        absl::StrCat(grants.size(), " grants; at most ", kMaxGrants, " are allowed"));
  }
  for (const Grant& g : grants) {
    if (absl::Status s = ValidateGrant(g); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace vault::capability
