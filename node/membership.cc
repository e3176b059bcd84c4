#include "node/membership.h"

#include <grpc/grpc_security_constants.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vault::node {

grpc::Status MemberAuthProcessor::Process(const InputMetadata&, grpc::AuthContext* context,
                                          OutputMetadata*, OutputMetadata*) {
  std::vector<std::string> names;
  for (const grpc::string_ref& san : context->FindPropertyValues(GRPC_X509_SAN_PROPERTY_NAME)) {
    std::string name(san.data(), san.size());
    if (members_.contains(name)) {
      context->AddProperty(kMemberProperty, name);
      context->SetPeerIdentityPropertyName(kMemberProperty);
      return grpc::Status::OK;
    }
    names.push_back(std::move(name));
  }
  std::string joined = names.empty() ? "none" : absl::StrJoin(names, ",");
  std::string reason = absl::StrCat(
      "TLS client is not a member of this federation (certificate names: ", joined, ")");
  if (on_refused_) on_refused_(joined, reason);
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, reason);
}

std::string CallerMember(const grpc::ServerContextBase* ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
  if (auth == nullptr) return "";
  for (const grpc::string_ref& v : auth->FindPropertyValues(kMemberProperty)) {
    return std::string(v.data(), v.size());
  }
  return "";
}

}  // namespace vault::node
