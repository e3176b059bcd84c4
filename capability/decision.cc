#include "capability/decision.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "capability/grant.h"

namespace vault::capability {
namespace {

// Four bytes, big-endian.
void AppendU32(uint32_t n, std::string* out) {
  const char bytes[4] = {static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                         static_cast<char>(n >> 8), static_cast<char>(n)};
  out->append(bytes, 4);
}

// Each field length-prefixed (4 bytes), so no two different operations share a key.
void AppendField(absl::string_view s, std::string* out) {
  AppendU32(static_cast<uint32_t>(s.size()), out);
  out->append(s.data(), s.size());
}

}  // namespace

void OperationKey(const vault::v1::Grant& op, std::string* out) {
  out->push_back(static_cast<char>(op.kind()));
  AppendField(op.path(), out);
  AppendField(op.hash(), out);
  AppendField(op.host(), out);
  AppendU32(op.port(), out);
  AppendField(op.agent(), out);
  AppendField(op.url(), out);
  // Each list is counted first, so that neither can pass for the other.
  AppendU32(op.vaults_size(), out);
  for (const std::string& v : op.vaults()) AppendField(v, out);
  AppendU32(op.message_types_size(), out);
  for (const std::string& t : op.message_types()) AppendField(t, out);
}

AgentAuthority::AgentAuthority(std::vector<vault::v1::Grant> grants, size_t max_cached)
    : grants_(std::move(grants)), max_cached_(max_cached) {}

bool AgentAuthority::Allows(const vault::v1::Grant& operation) {
  if (revoked()) return false;
  thread_local std::string key;
  key.clear();
  OperationKey(operation, &key);
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second && !revoked();
  }
  bool allowed = ValidateGrant(operation).ok();
  if (allowed) {
    allowed = false;
    for (const vault::v1::Grant& g : grants_) {
      if (Covers(g, operation)) {
        allowed = true;
        break;
      }
    }
  }
  absl::MutexLock lock(&mu_);
  if (revoked()) return false;
  if (cache_.size() >= max_cached_) cache_.clear();
  cache_.emplace(key, allowed);
  return allowed;
}

void AgentAuthority::Revoke() {
  revoked_.store(true, std::memory_order_release);
  absl::MutexLock lock(&mu_);
  cache_.clear();
}

}  // namespace vault::capability
