#include "capability/grant.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace vault::capability {
namespace {

using vault::v1::Constraints;
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

// One line, printable: bytes outside printable ASCII and the backslash are escaped, so a hostile
// value can neither break a log line nor pose as another value. Valid scopes print unchanged.
void AppendEscaped(std::string* out, absl::string_view s) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c >= ' ' && c <= '~') {
      out->push_back(c);
    } else {
      absl::StrAppend(out, "\\x", absl::BytesToHexString(absl::string_view(&c, 1)));
    }
  }
}

std::string Quoted(absl::string_view s) {
  std::string out = "\"";
  AppendEscaped(&out, s);
  out.push_back('"');
  return out;
}

bool HasPath(const Grant& g) { return !g.path().empty(); }
bool HasHash(const Grant& g) { return !g.hash().empty(); }
bool HasHost(const Grant& g) { return !g.host().empty(); }
bool HasPort(const Grant& g) { return g.port() != 0; }
bool HasAgent(const Grant& g) { return !g.agent().empty(); }
bool HasVaults(const Grant& g) { return g.vaults_size() != 0; }
bool HasMessageTypes(const Grant& g) { return g.message_types_size() != 0; }

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
       types = false;
  switch (g.kind()) {
    case Grant::READ:
      path = HasPath(g);
      hash = HasHash(g);
      if (path == hash) return fail_plain("needs exactly one of a path and a hash");
      break;
    case Grant::WRITE:
      path = true;
      break;
    case Grant::CAS_READ:
    case Grant::CAS_WRITE:
    case Grant::SPAWN:
      break;
    case Grant::NETWORK:
      host = port = true;
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
  if (!types && HasMessageTypes(g)) {
    return fail_plain("may not have message_types (only send and receive grants have them)");
  }

  if (path) {
    if (const char* problem = PathProblem(g.path())) return fail("path", g.path(), problem);
  }
  if (hash && g.hash().size() != kHashBytes) {
    return fail_number("hash must be 32 bytes, got ", g.hash().size(), "");
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

bool IsValidGrant(const Grant& g) { return CheckGrant(g, nullptr); }

// PathCovers and HostCovers for inputs already known to be valid.
bool PathCoversValid(absl::string_view parent, absl::string_view child) {
  if (parent == "/") return true;
  return absl::StartsWith(child, parent) &&
         (child.size() == parent.size() || child[parent.size()] == '/');
}

bool HostCoversValid(absl::string_view parent, absl::string_view child) {
  if (parent == child) return true;
  if (!absl::StartsWith(parent, "*.")) return false;
  const absl::string_view dot_suffix = parent.substr(1);  // ".example.com"
  // At least one whole label before the suffix ("*" counts: "*.a.example.com").
  return child.size() > dot_suffix.size() && absl::EndsWith(child, dot_suffix);
}

// Is every element of sorted, unique `child` in sorted, unique `parent`? No allocation.
bool SortedSubset(const google::protobuf::RepeatedPtrField<std::string>& child,
                  const google::protobuf::RepeatedPtrField<std::string>& parent) {
  int p = 0;
  for (const std::string& c : child) {
    while (p < parent.size() && parent.Get(p) < c) ++p;
    if (p == parent.size() || parent.Get(p) != c) return false;
    ++p;
  }
  return true;
}

// Covers for grants already known to be valid.
bool CoversValid(const Grant& parent, const Grant& child) {
  if (parent.kind() != child.kind()) {
    return parent.kind() == Grant::CAS_READ && child.kind() == Grant::READ && HasHash(child);
  }
  switch (child.kind()) {
    case Grant::READ:
      if (HasHash(child)) return parent.hash() == child.hash();
      return HasPath(parent) && PathCoversValid(parent.path(), child.path());
    case Grant::WRITE:
      return PathCoversValid(parent.path(), child.path());
    case Grant::CAS_READ:
    case Grant::CAS_WRITE:
    case Grant::SPAWN:
      return true;
    case Grant::NETWORK:
      return HostCoversValid(parent.host(), child.host()) &&
             (parent.port() == 0 || parent.port() == child.port());
    case Grant::SEND:
    case Grant::RECEIVE:
      // Empty types: any type, so only an empty parent list covers an empty child list.
      return (parent.agent() == "*" || parent.agent() == child.agent()) &&
             (!HasMessageTypes(parent) ||
              (HasMessageTypes(child) &&
               SortedSubset(child.message_types(), parent.message_types())));
    case Grant::MIGRATE:
      return SortedSubset(child.vaults(), parent.vaults());
    default:
      return false;
  }
}

// The common elements of two sorted, unique lists, appended to `out` in order.
void SortedIntersection(const google::protobuf::RepeatedPtrField<std::string>& a,
                        const google::protobuf::RepeatedPtrField<std::string>& b,
                        google::protobuf::RepeatedPtrField<std::string>* out) {
  int i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::string& x = a.Get(i);
    const std::string& y = b.Get(j);
    if (x < y) {
      ++i;
    } else if (y < x) {
      ++j;
    } else {
      *out->Add() = x;
      ++i;
      ++j;
    }
  }
}

// The meet of two valid paths: the narrower when one covers the other.
bool IntersectPaths(absl::string_view a, absl::string_view b, absl::string_view* out) {
  if (PathCoversValid(a, b)) {
    *out = b;
  } else if (PathCoversValid(b, a)) {
    *out = a;
  } else {
    return false;
  }
  return true;
}

// IntersectOne for valid grants. Each case is the exact meet of the two sets of requests, so the
// result covers everything both grants cover.
bool IntersectValid(const Grant& a, const Grant& b, Grant* out) {
  if (a.kind() != b.kind()) {
    // The only cross-kind cover: CAS_READ covers READ(hash), so their meet is the READ(hash).
    if (CoversValid(a, b)) {
      *out = b;
      return true;
    }
    if (CoversValid(b, a)) {
      *out = a;
      return true;
    }
    return false;
  }
  Grant result;
  result.set_kind(a.kind());
  switch (a.kind()) {
    case Grant::READ:
      if (HasHash(a) || HasHash(b)) {
        if (a.hash() != b.hash()) return false;
        result.set_hash(a.hash());
        break;
      }
      [[fallthrough]];
    case Grant::WRITE: {
      absl::string_view path;
      if (!IntersectPaths(a.path(), b.path(), &path)) return false;
      result.set_path(std::string(path));
      break;
    }
    case Grant::CAS_READ:
    case Grant::CAS_WRITE:
    case Grant::SPAWN:
      break;
    case Grant::NETWORK: {
      if (HostCoversValid(a.host(), b.host())) {
        result.set_host(b.host());
      } else if (HostCoversValid(b.host(), a.host())) {
        result.set_host(a.host());
      } else {
        return false;
      }
      if (a.port() != 0 && b.port() != 0 && a.port() != b.port()) return false;
      result.set_port(a.port() != 0 ? a.port() : b.port());
      break;
    }
    case Grant::SEND:
    case Grant::RECEIVE:
      if (a.agent() == "*") {
        result.set_agent(b.agent());
      } else if (b.agent() == "*" || a.agent() == b.agent()) {
        result.set_agent(a.agent());
      } else {
        return false;
      }
      // Empty is any type: the other list. Two lists: their common types, none being disjoint.
      if (!HasMessageTypes(a)) {
        *result.mutable_message_types() = b.message_types();
      } else if (!HasMessageTypes(b)) {
        *result.mutable_message_types() = a.message_types();
      } else {
        SortedIntersection(a.message_types(), b.message_types(), result.mutable_message_types());
        if (!HasMessageTypes(result)) return false;
      }
      break;
    case Grant::MIGRATE:
      SortedIntersection(a.vaults(), b.vaults(), result.mutable_vaults());
      if (result.vaults_size() == 0) return false;
      break;
    default:
      return false;
  }
  *out = std::move(result);
  return true;
}

// The canonical order: kind, then path, hash, host, port, agent, vaults, message types (lists
// lexicographically; an empty list, "any type", first).
bool CanonicalLess(const Grant& a, const Grant& b) {
  auto key = [](const Grant& g) {
    return std::make_tuple(static_cast<int>(g.kind()), absl::string_view(g.path()),
                           absl::string_view(g.hash()), absl::string_view(g.host()), g.port(),
                           absl::string_view(g.agent()));
  };
  const auto ka = key(a);
  const auto kb = key(b);
  if (ka != kb) return ka < kb;
  if (!std::equal(a.vaults().begin(), a.vaults().end(), b.vaults().begin(), b.vaults().end())) {
    return std::lexicographical_compare(a.vaults().begin(), a.vaults().end(), b.vaults().begin(),
                                        b.vaults().end());
  }
  return std::lexicographical_compare(a.message_types().begin(), a.message_types().end(),
                                      b.message_types().begin(), b.message_types().end());
}

bool SameScope(const Grant& a, const Grant& b) {
  return !CanonicalLess(a, b) && !CanonicalLess(b, a);
}

// Is `g`, an element of `sorted` (canonical order, unique, all valid), covered by another
// element? Looks up the few grants that could cover it instead of comparing all pairs, so
// Intersect stays near-linear in the number of pairwise meets.
bool CoveredByAnother(const std::vector<Grant>& sorted, const Grant& g) {
  auto present = [&sorted, &g](const Grant& probe) {
    return !SameScope(probe, g) &&
           std::binary_search(sorted.begin(), sorted.end(), probe, CanonicalLess);
  };
  auto with_path = [&g](absl::string_view path) {
    Grant probe;
    probe.set_kind(g.kind());
    probe.set_path(std::string(path));
    return probe;
  };
  switch (g.kind()) {
    case Grant::READ:
      if (HasHash(g)) {
        Grant cas_read;
        cas_read.set_kind(Grant::CAS_READ);
        return present(cas_read);
      }
      [[fallthrough]];
    case Grant::WRITE: {
      // Every proper ancestor: "/", then "/a", "/a/b" for "/a/b/c".
      const absl::string_view path = g.path();
      if (path == "/") return false;
      if (present(with_path("/"))) return true;
      for (size_t slash = path.find('/', 1); slash != absl::string_view::npos;
           slash = path.find('/', slash + 1)) {
        if (present(with_path(path.substr(0, slash)))) return true;
      }
      return false;
    }
    case Grant::NETWORK: {
      // The host itself and each wildcard above it ("*.b.c", "*.c" for "a.b.c" or "*.b.c"),
      // each with the same port or port 0.
      std::vector<std::string> hosts = {g.host()};
      absl::string_view rest = g.host();
      for (size_t dot = rest.find('.'); dot != absl::string_view::npos; dot = rest.find('.')) {
        rest = rest.substr(dot + 1);
        hosts.push_back(absl::StrCat("*.", rest));
      }
      for (const std::string& host : hosts) {
        for (uint32_t port : {g.port(), uint32_t{0}}) {
          Grant probe;
          probe.set_kind(Grant::NETWORK);
          probe.set_host(host);
          probe.set_port(port);
          if (present(probe)) return true;
        }
      }
      return false;
    }
    case Grant::SEND:
    case Grant::RECEIVE: {
      // A cover names the same agent or "*", with any type or a superset of g's types (of more
      // types than g's when it names g's agent, or it would be g itself). Grants of one kind and
      // agent are contiguous in `sorted`: compare g with those two runs only.
      const int types = g.message_types_size();
      for (const std::string& agent : {g.agent(), std::string("*")}) {
        Grant first;  // the least grant of the run: no message types
        first.set_kind(g.kind());
        first.set_agent(agent);
        const auto begin = std::lower_bound(sorted.begin(), sorted.end(), first, CanonicalLess);
        const auto end = std::partition_point(begin, sorted.end(), [&](const Grant& x) {
          return x.kind() == g.kind() && x.agent() == agent;
        });
        const int fewest = agent == g.agent() ? types + 1 : types;
        for (auto it = begin; it != end; ++it) {
          const int n = it->message_types_size();
          if (&*it != &g && (n == 0 || (types != 0 && n >= fewest)) && CoversValid(*it, g)) {
            return true;
          }
        }
        if (g.agent() == "*") break;
      }
      return false;
    }
    case Grant::MIGRATE:
      // Subsets cannot be looked up; compare with every other MIGRATE grant.
      for (const Grant& other : sorted) {
        if (other.kind() == Grant::MIGRATE && !SameScope(other, g) && CoversValid(other, g)) {
          return true;
        }
      }
      return false;
    default:  // CAS_READ, CAS_WRITE, SPAWN: unique after deduplication
      return false;
  }
}

// Applies `has` / `get` to a Constraints field: an absent limit is no limit.
template <typename Has, typename Get>
absl::Status LimitSubset(absl::string_view name, const Constraints& child,
                         const Constraints& parent, Has has, Get get, absl::string_view larger) {
  if (!(parent.*has)()) return absl::OkStatus();
  if (!(child.*has)()) {
    return absl::PermissionDeniedError(absl::StrCat("constraint ", name, ": the parent's is ",
                                                    (parent.*get)(), " but the child has none"));
  }
  if ((child.*get)() > (parent.*get)()) {
    return absl::PermissionDeniedError(absl::StrCat("constraint ", name, ": the child's ",
                                                    (child.*get)(), " is ", larger,
                                                    " the parent's ", (parent.*get)()));
  }
  return absl::OkStatus();
}

template <typename Has, typename Get, typename Set>
void LimitIntersect(const Constraints& a, const Constraints& b, Constraints* out, Has has, Get get,
                    Set set) {
  if ((a.*has)() && (b.*has)()) {
    (out->*set)(std::min((a.*get)(), (b.*get)()));
  } else if ((a.*has)()) {
    (out->*set)((a.*get)());
  } else if ((b.*has)()) {
    (out->*set)((b.*get)());
  }
}

}  // namespace

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

// Both are fail-closed: false unless both arguments are valid.
bool PathCovers(absl::string_view parent, absl::string_view child) {
  return PathProblem(parent) == nullptr && PathProblem(child) == nullptr &&
         PathCoversValid(parent, child);
}

bool HostCovers(absl::string_view parent, absl::string_view child) {
  return HostProblem(parent) == nullptr && HostProblem(child) == nullptr &&
         HostCoversValid(parent, child);
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

// Fail-closed: an invalid grant covers nothing and is covered by nothing. The checks do not
// allocate; they cost time linear in the scopes' sizes.
bool Covers(const Grant& parent, const Grant& child) {
  return IsValidGrant(parent) && IsValidGrant(child) && CoversValid(parent, child);
}

absl::Status IsSubset(const Grants& child, const Grants& parent) {
  // Validate each grant once: invalid parent grants authorize nothing; an invalid child grant is
  // never within anything.
  std::vector<const Grant*> valid_parent;
  valid_parent.reserve(parent.size());
  for (const Grant& p : parent) {
    if (IsValidGrant(p)) valid_parent.push_back(&p);
  }
  for (const Grant& c : child) {
    bool covered = false;
    if (IsValidGrant(c)) {
      for (const Grant* p : valid_parent) {
        if (CoversValid(*p, c)) {
          covered = true;
          break;
        }
      }
    }
    if (!covered) {
      return absl::PermissionDeniedError(
          absl::StrCat("grant ", GrantToString(c), " is not within the parent's grants"));
    }
  }
  return absl::OkStatus();
}

bool IntersectOne(const Grant& a, const Grant& b, Grant* out) {
  if (!IsValidGrant(a) || !IsValidGrant(b)) return false;
  return IntersectValid(a, b, out);
}

std::vector<Grant> Intersect(const Grants& a, const Grants& b) {
  std::vector<const Grant*> valid_b;
  valid_b.reserve(b.size());
  for (const Grant& g : b) {
    if (IsValidGrant(g)) valid_b.push_back(&g);
  }
  std::vector<Grant> meets;
  for (const Grant& x : a) {
    if (!IsValidGrant(x)) continue;  // authorizes nothing
    for (const Grant* y : valid_b) {
      Grant meet;
      if (IntersectValid(x, *y, &meet)) meets.push_back(std::move(meet));
    }
  }
  std::sort(meets.begin(), meets.end(), CanonicalLess);
  meets.erase(std::unique(meets.begin(), meets.end(), SameScope), meets.end());
  // Drop every grant another one covers. Covering is a partial order on valid grants (distinct
  // grants never cover each other both ways), so what remains, the maximal grants in canonical
  // order, depends only on the authority and not on the order of the inputs.
  std::vector<bool> covered(meets.size());
  for (size_t i = 0; i < meets.size(); ++i) covered[i] = CoveredByAnother(meets, meets[i]);
  std::vector<Grant> out;
  for (size_t i = 0; i < meets.size(); ++i) {
    if (!covered[i]) out.push_back(std::move(meets[i]));
  }
  return out;
}

absl::Status ConstraintsSubset(const Constraints& child, const Constraints& parent) {
  using C = Constraints;
  constexpr absl::string_view kLarger = "larger than";
  VAULT_RETURN_IF_ERROR(LimitSubset("max_runtime_ms", child, parent, &C::has_max_runtime_ms,
                                    &C::max_runtime_ms, kLarger));
  VAULT_RETURN_IF_ERROR(LimitSubset("max_memory_bytes", child, parent, &C::has_max_memory_bytes,
                                    &C::max_memory_bytes, kLarger));
  VAULT_RETURN_IF_ERROR(LimitSubset("max_storage_bytes", child, parent, &C::has_max_storage_bytes,
                                    &C::max_storage_bytes, kLarger));
  VAULT_RETURN_IF_ERROR(
      LimitSubset("max_cpu_ms", child, parent, &C::has_max_cpu_ms, &C::max_cpu_ms, kLarger));
  VAULT_RETURN_IF_ERROR(LimitSubset("max_open_files", child, parent, &C::has_max_open_files,
                                    &C::max_open_files, kLarger));
  VAULT_RETURN_IF_ERROR(LimitSubset("max_processes", child, parent, &C::has_max_processes,
                                    &C::max_processes, kLarger));
  VAULT_RETURN_IF_ERROR(LimitSubset("max_migrations", child, parent, &C::has_max_migrations,
                                    &C::max_migrations, kLarger));
  return LimitSubset("expires_unix_ms", child, parent, &C::has_expires_unix_ms, &C::expires_unix_ms,
                     "later than");
}

Constraints IntersectConstraints(const Constraints& a, const Constraints& b) {
  using C = Constraints;
  Constraints out;
  LimitIntersect(a, b, &out, &C::has_max_runtime_ms, &C::max_runtime_ms, &C::set_max_runtime_ms);
  LimitIntersect(a, b, &out, &C::has_max_memory_bytes, &C::max_memory_bytes,
                 &C::set_max_memory_bytes);
  LimitIntersect(a, b, &out, &C::has_max_storage_bytes, &C::max_storage_bytes,
                 &C::set_max_storage_bytes);
  LimitIntersect(a, b, &out, &C::has_max_cpu_ms, &C::max_cpu_ms, &C::set_max_cpu_ms);
  LimitIntersect(a, b, &out, &C::has_max_open_files, &C::max_open_files, &C::set_max_open_files);
  LimitIntersect(a, b, &out, &C::has_max_processes, &C::max_processes, &C::set_max_processes);
  LimitIntersect(a, b, &out, &C::has_max_migrations, &C::max_migrations, &C::set_max_migrations);
  LimitIntersect(a, b, &out, &C::has_expires_unix_ms, &C::expires_unix_ms, &C::set_expires_unix_ms);
  return out;
}

std::string GrantToString(const Grant& grant) {
  std::string out;
  // The scope fields the kind's form prints; any other non-empty one is appended in brackets so
  // that a malformed grant is never shown as a well-formed one.
  bool path = false, hash = false, network = false, agent = false, vaults = false, types = false;
  switch (grant.kind()) {
    case Grant::READ:
      out = "read";
      hash = HasHash(grant);
      path = HasPath(grant);
      break;
    case Grant::WRITE:
      out = "write";
      path = true;
      break;
    case Grant::CAS_READ:
      out = "cas-read";
      break;
    case Grant::CAS_WRITE:
      out = "cas-write";
      break;
    case Grant::SPAWN:
      out = "spawn";
      break;
    case Grant::NETWORK:
      out = "network";
      network = true;
      break;
    case Grant::SEND:
      out = "send";
      agent = types = true;
      break;
    case Grant::RECEIVE:
      out = "receive";
      agent = types = true;
      break;
    case Grant::MIGRATE:
      out = "migrate";
      vaults = true;
      break;
    default:
      out = absl::StrCat("kind(", static_cast<int>(grant.kind()), ")");
      break;
  }
  if (path && HasPath(grant)) {
    out.push_back(' ');
    AppendEscaped(&out, grant.path());
  }
  if (hash) absl::StrAppend(&out, " sha256:", absl::BytesToHexString(grant.hash()));
  if (network) {
    out.push_back(' ');
    AppendEscaped(&out, grant.host());
    out.push_back(':');
    if (grant.port() == 0) {
      out.push_back('*');
    } else {
      absl::StrAppend(&out, grant.port());
    }
  }
  if (agent && HasAgent(grant)) {
    out.push_back(' ');
    AppendEscaped(&out, grant.agent());
  }
  if (vaults) {
    for (const std::string& v : grant.vaults()) {
      out.push_back(' ');
      AppendEscaped(&out, v);
    }
  }
  auto append_types = [&out, &grant] {
    for (int i = 0; i < grant.message_types_size(); ++i) {
      if (i > 0) out.push_back(',');
      AppendEscaped(&out, grant.message_types(i));
    }
  };
  if (types && HasMessageTypes(grant)) {
    out.append(" types=");
    append_types();
  }
  // Fields the kind does not have.
  if (!path && HasPath(grant)) {
    out.append(" [path ");
    AppendEscaped(&out, grant.path());
    out.push_back(']');
  }
  if (!hash && HasHash(grant)) {
    absl::StrAppend(&out, " [hash ", absl::BytesToHexString(grant.hash()), "]");
  }
  if (!network && HasHost(grant)) {
    out.append(" [host ");
    AppendEscaped(&out, grant.host());
    out.push_back(']');
  }
  if (!network && HasPort(grant)) absl::StrAppend(&out, " [port ", grant.port(), "]");
  if (!agent && HasAgent(grant)) {
    out.append(" [agent ");
    AppendEscaped(&out, grant.agent());
    out.push_back(']');
  }
  if (!vaults && HasVaults(grant)) {
    out.append(" [vaults");
    for (const std::string& v : grant.vaults()) {
      out.push_back(' ');
      AppendEscaped(&out, v);
    }
    out.push_back(']');
  }
  if (!types && HasMessageTypes(grant)) {
    out.append(" [message_types ");
    append_types();
    out.push_back(']');
  }
  return out;
}

}  // namespace vault::capability
