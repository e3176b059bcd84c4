// common/proto_util: the one deterministic serialization of a protobuf message, for bytes that
// are hashed or signed (audit entries, capability links, revocations) and must have exactly one
// encoding. Header-only: used by components that already link protobuf.
//
//   std::string bytes = common::SerializeDeterministic(payload);
//
// Thread-safety: pure function.
#ifndef VAULT_COMMON_PROTO_UTIL_H_
#define VAULT_COMMON_PROTO_UTIL_H_

#include <string>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/message_lite.h"

namespace vault::common {

inline std::string SerializeDeterministic(const google::protobuf::MessageLite& m) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    m.SerializeToCodedStream(&coded);
  }
  return out;
}

}  // namespace vault::common

#endif  // VAULT_COMMON_PROTO_UTIL_H_
