// node: who may call this vault over TCP. Federation traffic is mutual TLS; the client's
// certificate must chain to the federation CA (checked by the TLS handshake) and name, in its
// subjectAltName, a vault listed among the members (checked here, on every call).
//
//   auto creds = grpc::SslServerCredentials(opts);
//   creds->SetAuthMetadataProcessor(std::make_shared<MemberAuthProcessor>(member_names));
//
// Thread-safety: immutable after construction.
#ifndef VAULT_NODE_MEMBERSHIP_H_
#define VAULT_NODE_MEMBERSHIP_H_

#include <grpcpp/security/auth_metadata_processor.h>

#include <string>

#include "absl/container/flat_hash_set.h"

namespace vault::node {

// The auth-context property that holds the verified member name after Process.
inline constexpr char kMemberProperty[] = "vault_member";

class MemberAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit MemberAuthProcessor(absl::flat_hash_set<std::string> members)
      : members_(std::move(members)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const absl::flat_hash_set<std::string> members_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_MEMBERSHIP_H_
