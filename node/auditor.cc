#include "node/auditor.h"

#include "absl/strings/str_cat.h"
#include "node/membership.h"

namespace vault::node {

Auditor::Auditor(audit::AuditLog* log, const vault::v1::VaultConfig& config, std::string self_key)
    : log_(log), self_(std::move(self_key)) {
  for (const vault::v1::Member& m : config.members()) member_keys_[m.name()] = m.public_key();
}

std::string Auditor::Actor(const grpc::ServerContextBase* ctx) const {
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth != nullptr) {
    for (const grpc::string_ref& v : auth->FindPropertyValues(kMemberProperty)) {
      std::string name(v.data(), v.size());
      auto it = member_keys_.find(name);
      return it != member_keys_.end() ? it->second : absl::StrCat("member:", name);
    }
  }
  return kLocalAdminActor;
}

vault::v1::AuditEntry Auditor::Entry(std::string actor, std::string action, std::string subject,
                                     vault::v1::AuditEntry::Decision decision,
                                     std::string motivation,
                                     std::vector<std::pair<std::string, std::string>> details) {
  return audit::MakeEntry(std::move(actor), std::move(action), std::move(subject), decision,
                          std::move(motivation), std::move(details));
}

absl::Status Auditor::Record(vault::v1::AuditEntry entry) {
  return log_->Append(std::move(entry)).status();
}

absl::Status Auditor::RecordMany(std::vector<vault::v1::AuditEntry> entries) {
  if (entries.empty()) return absl::OkStatus();
  return log_->AppendMany(absl::MakeSpan(entries)).status();
}

}  // namespace vault::node
