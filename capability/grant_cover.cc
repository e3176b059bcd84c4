// Matching: whether one grant covers another, or a list of grants or constraints those of a
// parent (Covers, IsSubset, ConstraintsSubset, PathCovers, HostCovers in grant.h).
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "capability/internal/grant_rules.h"
#include "common/status_macros.h"

namespace vault::capability {
namespace {

using vault::v1::Constraints;
using vault::v1::Grant;

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

}  // namespace

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

// Covers for grants already known to be valid.
bool CoversValid(const Grant& parent, const Grant& child) {
  if (parent.kind() != child.kind()) {
    return parent.kind() == Grant::CAS_READ && child.kind() == Grant::READ && HasHash(child);
  }
  switch (child.kind()) {
    case Grant::READ:
      if (HasHash(child)) return parent.hash() == child.hash();
      [[fallthrough]];
    case Grant::WRITE:
      if (HasUrl(child)) return HasUrl(parent) && UrlCoversValid(parent.url(), child.url());
      return HasPath(parent) && PathCoversValid(parent.path(), child.path());
    case Grant::CAS_READ:
    case Grant::CAS_WRITE:
    case Grant::SPAWN:
      return true;
    case Grant::NETWORK:
      if (HasUrl(child) || HasUrl(parent)) {
        return HasUrl(parent) && HasUrl(child) && UrlCoversValid(parent.url(), child.url());
      }
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

// Both are fail-closed: false unless both arguments are valid.
bool PathCovers(absl::string_view parent, absl::string_view child) {
  return PathProblem(parent) == nullptr && PathProblem(child) == nullptr &&
         PathCoversValid(parent, child);
}

bool HostCovers(absl::string_view parent, absl::string_view child) {
  return HostProblem(parent) == nullptr && HostProblem(child) == nullptr &&
         HostCoversValid(parent, child);
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
  VAULT_RETURN_IF_ERROR(
      LimitSubset("max_steps", child, parent, &C::has_max_steps, &C::max_steps, kLarger));
  VAULT_RETURN_IF_ERROR(LimitSubset("max_allocation_bytes", child, parent,
                                    &C::has_max_allocation_bytes, &C::max_allocation_bytes,
                                    kLarger));
  return LimitSubset("expires_unix_ms", child, parent, &C::has_expires_unix_ms, &C::expires_unix_ms,
                     "later than");
}

}  // namespace vault::capability
