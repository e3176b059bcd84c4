#include "sandbox/wasm/wat_test_util.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "wabt/binary-writer.h"
#include "wabt/error-formatter.h"
#include "wabt/ir.h"
#include "wabt/stream.h"
#include "wabt/validator.h"
#include "wabt/wast-lexer.h"
#include "wabt/wast-parser.h"

namespace vault::sandbox::wasm {

absl::StatusOr<std::string> WatToWasm(absl::string_view wat) {
  wabt::Errors errors;
  std::unique_ptr<wabt::WastLexer> lexer =
      wabt::WastLexer::CreateBufferLexer("test.wat", wat.data(), wat.size(), &errors);
  std::unique_ptr<wabt::Module> module;
  wabt::Features features;
  wabt::WastParseOptions parse_options(features);
  wabt::Result result = wabt::ParseWatModule(lexer.get(), &module, &errors, &parse_options);
  if (wabt::Succeeded(result)) {
    wabt::ValidateOptions options(features);
    result = wabt::ValidateModule(module.get(), &errors, options);
  }
  if (wabt::Failed(result)) {
    return absl::InvalidArgumentError(
        absl::StrCat("wat: ", wabt::FormatErrorsToString(errors, wabt::Location::Type::Text)));
  }
  wabt::MemoryStream stream;
  wabt::WriteBinaryOptions write_options;
  write_options.features = features;
  if (wabt::Failed(wabt::WriteBinaryModule(&stream, module.get(), write_options))) {
    return absl::InternalError("wat: the binary writer failed");
  }
  const std::vector<uint8_t>& bytes = stream.output_buffer().data;
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace vault::sandbox::wasm
