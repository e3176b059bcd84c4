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
#include <grpcpp/server_context.h>

#include <functional>
#include <string>

#include "absl/container/flat_hash_set.h"

namespace vault::node {

// The auth-context property that holds the verified member name after Process.
inline constexpr char kMemberProperty[] = "vault_member";

class MemberAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // Told of every refused call: the certificate's names and the reason. Must not block.
  using RefusalHook = std::function<void(const std::string& names, const std::string& reason)>;

  explicit MemberAuthProcessor(absl::flat_hash_set<std::string> members,
                               RefusalHook on_refused = nullptr)
      : members_(std::move(members)), on_refused_(std::move(on_refused)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  const absl::flat_hash_set<std::string> members_;
  const RefusalHook on_refused_;
};

// The member named by the caller's verified certificate ("" on the admin socket).
std::string CallerMember(const grpc::ServerContextBase* ctx);

}  // namespace vault::node

#endif  // VAULT_NODE_MEMBERSHIP_H_
