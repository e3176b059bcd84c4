// libFuzzer target for capability/text_form: any input either fails with INVALID_ARGUMENT or
// parses to a spec whose canonical S-expression parses back to the same message (and prints
// the same again); the spec's protobuf JSON and text format parse back to it too.
//
//   cmake -B build-fuzz -DVAULT_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ && ninja -C build-fuzz
//   sexpr_fuzz build-fuzz/capability/sexpr_fuzz -max_len=4096 -timeout=5 corpus/
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "capability/text_form.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"

namespace {

using google::protobuf::util::MessageDifferencer;
using vault::capability::AgentSpecToSexpr;
using vault::capability::ParseAgentSpec;
using vault::capability::TextFormat;

[[noreturn]] void Fail(const char* what, const vault::v1::AgentSpec& spec,
                       const std::string& detail) {
  std::fprintf(stderr, "round trip failed: %s\nspec:\n%s\ndetail:\n%s\n", what,
               spec.DebugString().c_str(), detail.c_str());
  std::abort();
}

// `text` in `format` must parse to exactly `spec`.
void ExpectSame(const vault::v1::AgentSpec& spec, const std::string& text, TextFormat format,
                const char* what) {
  absl::StatusOr<vault::v1::AgentSpec> again = ParseAgentSpec(text, "again", format);
  if (!again.ok()) Fail(what, spec, std::string(again.status().message()) + "\n" + text);
  if (!MessageDifferencer::Equals(spec, *again)) Fail(what, spec, again->DebugString());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<vault::v1::AgentSpec> spec = ParseAgentSpec(text, "fuzz", TextFormat::kSexpr);
  if (!spec.ok()) {
    if (spec.status().code() != absl::StatusCode::kInvalidArgument) {
      std::fprintf(stderr, "unexpected code: %s\n", spec.status().ToString().c_str());
      std::abort();
    }
    return 0;
  }
  std::string printed = AgentSpecToSexpr(*spec);
  ExpectSame(*spec, printed, TextFormat::kSexpr, "S-expression");
  if (AgentSpecToSexpr(*ParseAgentSpec(printed, "again", TextFormat::kSexpr)) != printed) {
    Fail("printing is not stable", *spec, printed);
  }

  std::string json;
  if (!google::protobuf::util::MessageToJsonString(*spec, &json).ok()) {
    Fail("MessageToJsonString", *spec, "");
  }
  ExpectSame(*spec, json, TextFormat::kJson, "JSON");

  std::string textproto;
  if (!google::protobuf::TextFormat::PrintToString(*spec, &textproto)) {
    Fail("TextFormat::PrintToString", *spec, "");
  }
  ExpectSame(*spec, textproto, TextFormat::kTextproto, "text format");
  return 0;
}
