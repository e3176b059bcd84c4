// sandbox/wasm/wasi: the WASI preview1 errno values the runner answers with, and the descriptor
// calls on files and preopened directories (wasi_files.cc), shared by wasi_imports.cc.
//
// Thread safety: none; the runner is single-threaded.
#ifndef VAULT_SANDBOX_WASM_WASI_H_
#define VAULT_SANDBOX_WASM_WASI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sandbox/wasm/engine.h"
#include "sandbox/wasm/runner_host.h"

namespace vault::sandbox::wasm {

inline constexpr uint32_t kWasiSuccess = 0, kWasiAcces = 2, kWasiBadf = 8, kWasiExist = 20,
                          kWasiFault = 21, kWasiInval = 28, kWasiIo = 29, kWasiIsdir = 31,
                          kWasiNoent = 44, kWasiNospc = 51, kWasiNosys = 52, kWasiNotdir = 54,
                          kWasiSpipe = 70, kWasiNotcapable = 76;

// One iovec of a module's fd_read or fd_write (the 8-byte {base, length} records it points to).
struct Iovec {
  uint64_t base = 0;
  uint64_t len = 0;
};
// The `count` iovecs at `at`; and the bytes they name, gathered. INVALID_ARGUMENT when any of it
// is outside the module's memory.
absl::StatusOr<std::vector<Iovec>> Iovecs(Engine& e, uint64_t at, uint64_t count);
absl::StatusOr<std::string> Gather(Engine& e, uint64_t at, uint64_t count);

// fd_prestat_get, fd_prestat_dir_name, path_open, path_filestat_get, and fd_read, fd_write,
// fd_close, fd_seek, fd_tell, fd_fdstat_get, fd_filestat_get, fd_readdir on a descriptor above
// 2: the errno, or a status that ends the program (a channel failure).
absl::StatusOr<uint32_t> WasiFileCall(RunnerHost& host, absl::string_view name, HostCall& call);

}  // namespace vault::sandbox::wasm

#endif  // VAULT_SANDBOX_WASM_WASI_H_
