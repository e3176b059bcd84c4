// Tests' WebAssembly modules written as text: compiled to the binary format by wabt's own parser
// and writer (libwabt), so that a test shows the module it runs.
#ifndef VAULT_SANDBOX_WASM_WAT_TEST_UTIL_H_
#define VAULT_SANDBOX_WASM_WAT_TEST_UTIL_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vault::sandbox::wasm {

// The binary module of `wat` (text format), or INVALID_ARGUMENT with wabt's errors.
absl::StatusOr<std::string> WatToWasm(absl::string_view wat);

}  // namespace vault::sandbox::wasm

#endif  // VAULT_SANDBOX_WASM_WAT_TEST_UTIL_H_
