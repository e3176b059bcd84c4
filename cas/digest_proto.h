// cas: object digests on the wire (vault::v1::Digest) and in memory (cas::Digest). The wire form
// is untrusted: FromProto checks the hash is 32 bytes.
//
//   VAULT_ASSIGN_OR_RETURN(cas::Digest d, cas::FromProto(request.digest()));
//   cas::ToProto(d, response.mutable_digest());
//
// Thread-safety: pure functions.
#ifndef VAULT_CAS_DIGEST_PROTO_H_
#define VAULT_CAS_DIGEST_PROTO_H_

#include "absl/status/statusor.h"
#include "cas/digest.h"
#include "vault/v1/cas.pb.h"

namespace vault::cas {

inline absl::StatusOr<Digest> FromProto(const vault::v1::Digest& d) {
  return Digest::FromParts(d.sha256(), d.size());
}

inline void ToProto(const Digest& d, vault::v1::Digest* out) {
  out->set_sha256(d.sha256());
  out->set_size(d.size());
}

inline vault::v1::Digest ToProto(const Digest& d) {
  vault::v1::Digest out;
  ToProto(d, &out);
  return out;
}

}  // namespace vault::cas

#endif  // VAULT_CAS_DIGEST_PROTO_H_
