// Attenuation: the authority two grant lists both allow (Intersect, IntersectOne), in canonical
// order without covered grants, and the tighter of two sets of constraints (IntersectConstraints).
#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "capability/grant.h"
#include "capability/internal/grant_rules.h"

namespace vault::capability {
namespace {

using vault::v1::Constraints;
using vault::v1::Grant;

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

// The meet of two valid scopes (paths, URL patterns) that `covers` orders: the narrower when one
// covers the other, nothing otherwise (two URL prefixes neither of which covers the other differ
// before either '*', so no URL matches both).
bool Narrower(absl::string_view a, absl::string_view b,
              bool (*covers)(absl::string_view, absl::string_view), absl::string_view* out) {
  if (covers(a, b)) {
    *out = b;
  } else if (covers(b, a)) {
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
  // A URL scope (read, write or network) meets only another URL scope of the same kind.
  if (HasUrl(a) || HasUrl(b)) {
    absl::string_view url;
    if (!HasUrl(a) || !HasUrl(b) || !Narrower(a.url(), b.url(), &UrlCoversValid, &url)) {
      return false;
    }
    result.set_url(std::string(url));
    *out = std::move(result);
    return true;
  }
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
      if (!Narrower(a.path(), b.path(), &PathCoversValid, &path)) return false;
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

// The canonical order: kind, then path, hash, url, host, port, agent, vaults, message types (lists
// lexicographically; an empty list, "any type", first).
bool CanonicalLess(const Grant& a, const Grant& b) {
  auto key = [](const Grant& g) {
    return std::make_tuple(static_cast<int>(g.kind()), absl::string_view(g.path()),
                           absl::string_view(g.hash()), absl::string_view(g.url()),
                           absl::string_view(g.host()), g.port(), absl::string_view(g.agent()));
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
  if (HasUrl(g)) {
    // Patterns that cover another are few; compare with every other URL grant of the kind.
    for (const Grant& other : sorted) {
      if (other.kind() == g.kind() && HasUrl(other) && !SameScope(other, g) &&
          CoversValid(other, g)) {
        return true;
      }
    }
    return false;
  }
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
  LimitIntersect(a, b, &out, &C::has_max_steps, &C::max_steps, &C::set_max_steps);
  LimitIntersect(a, b, &out, &C::has_max_allocation_bytes, &C::max_allocation_bytes,
                 &C::set_max_allocation_bytes);
  LimitIntersect(a, b, &out, &C::has_expires_unix_ms, &C::expires_unix_ms, &C::set_expires_unix_ms);
  return out;
}

}  // namespace vault::capability
