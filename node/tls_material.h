// X.509 material for the federation's mutual TLS (design §2): a federation CA and the member
// certificates it issues. ECDSA P-256 keys, SHA-256 signatures, PEM everywhere. A member
// certificate names its vault in the subject CN and in a DNS subjectAltName.
//
//   VAULT_ASSIGN_OR_RETURN(KeyAndCert ca, CreateFederationCa("acme", absl::Hours(24 * 3650)));
//   VAULT_ASSIGN_OR_RETURN(KeyAndCert a, IssueMemberCert(ca, "vault-a", absl::Hours(24 * 365)));
//   VAULT_RETURN_IF_ERROR(VerifyIssuedBy(a.cert_pem, ca.cert_pem));
//   VAULT_ASSIGN_OR_RETURN(std::string name, CertificateCommonName(a.cert_pem));  // "vault-a"
//
// Thread-safety: free functions sharing no state; safe to call concurrently.
#ifndef VAULT_NODE_TLS_MATERIAL_H_
#define VAULT_NODE_TLS_MATERIAL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace vault::node {

// A private key (unencrypted PKCS#8 PEM) and its certificate (PEM).
struct KeyAndCert {
  std::string key_pem;
  std::string cert_pem;
};

// A self-signed CA certificate with subject CN = `federation_name` (1-64 bytes), valid from an hour
// ago (to tolerate clock skew) for `validity` (> 0). INVALID_ARGUMENT on a bad name or validity.
absl::StatusOr<KeyAndCert> CreateFederationCa(absl::string_view federation_name,
                                              absl::Duration validity);

// A TLS server+client certificate for `member_name`, signed by `ca`. The name must be 1-63
// characters of [a-z0-9-], neither starting nor ending with '-'. INVALID_ARGUMENT on a bad name, a
// bad validity, unparsable CA material, a CA key that does not match the CA certificate, or a CA
// certificate that is not a CA.
absl::StatusOr<KeyAndCert> IssueMemberCert(const KeyAndCert& ca, absl::string_view member_name,
                                           absl::Duration validity);

// The subject CN of a PEM certificate. INVALID_ARGUMENT if unparsable, NOT_FOUND if there is no CN.
absl::StatusOr<std::string> CertificateCommonName(absl::string_view cert_pem);

// OK when `cert_pem` chains to `ca_pem` (the only trusted certificate) and is currently valid.
// UNAUTHENTICATED with OpenSSL's reason otherwise; INVALID_ARGUMENT if either PEM is unparsable.
absl::Status VerifyIssuedBy(absl::string_view cert_pem, absl::string_view ca_pem);

}  // namespace vault::node

#endif  // VAULT_NODE_TLS_MATERIAL_H_
