// A WASI preview1 subset, made of host calls (docs/wasm.md, "WASI"): fd_write to stdout and
// stderr becomes log lines; args and environ are the spec's; clock_time_get and random_get ask
// the vault (so the answers are in the agent's effect log and a replay sees the same); proc_exit
// ends the program; files under the directories preopened from the path grants (wasi_files.cc).
// Every other preview1 function is offered with its signature and answers ENOSYS, so that any
// wasi-libc program loads.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "sandbox/wasm/runner_host.h"
#include "sandbox/wasm/wasi.h"

namespace vault::sandbox::wasm {
namespace {

constexpr ValType I = ValType::kI32;
constexpr ValType L = ValType::kI64;

constexpr uint32_t kSuccess = kWasiSuccess, kBadf = kWasiBadf, kFault = kWasiFault,
                   kInval = kWasiInval, kIo = kWasiIo, kNosys = kWasiNosys, kSpipe = kWasiSpipe;

// Each preview1 function's parameters ("i" i32, "l" i64); all return an i32 errno but proc_exit.
struct Signature {
  const char* name;
  const char* params;
};
constexpr Signature kPreview1[] = {
    {"args_get", "ii"},
    {"args_sizes_get", "ii"},
    {"environ_get", "ii"},
    {"environ_sizes_get", "ii"},
    {"clock_res_get", "ii"},
    {"clock_time_get", "ili"},
    {"fd_advise", "illi"},
    {"fd_allocate", "ill"},
    {"fd_close", "i"},
    {"fd_datasync", "i"},
    {"fd_fdstat_get", "ii"},
    {"fd_fdstat_set_flags", "ii"},
    {"fd_fdstat_set_rights", "ill"},
    {"fd_filestat_get", "ii"},
    {"fd_filestat_set_size", "il"},
    {"fd_filestat_set_times", "illi"},
    {"fd_pread", "iiili"},
    {"fd_prestat_get", "ii"},
    {"fd_prestat_dir_name", "iii"},
    {"fd_pwrite", "iiili"},
    {"fd_read", "iiii"},
    {"fd_readdir", "iiili"},
    {"fd_renumber", "ii"},
    {"fd_seek", "ilii"},
    {"fd_sync", "i"},
    {"fd_tell", "ii"},
    {"fd_write", "iiii"},
    {"path_create_directory", "iii"},
    {"path_filestat_get", "iiiii"},
    {"path_filestat_set_times", "iiiilli"},
    {"path_link", "iiiiiii"},
    {"path_open", "iiiiillii"},
    {"path_readlink", "iiiiii"},
    {"path_remove_directory", "iii"},
    {"path_rename", "iiiiii"},
    {"path_symlink", "iiiii"},
    {"path_unlink_file", "iii"},
    {"poll_oneoff", "iiii"},
    {"proc_exit", "i"},
    {"proc_raise", "i"},
    {"sched_yield", ""},
    {"random_get", "ii"},
    {"sock_accept", "iii"},
    {"sock_recv", "iiiiii"},
    {"sock_send", "iiiii"},
    {"sock_shutdown", "ii"},
};

HostFunctionType TypeOf(const Signature& s) {
  HostFunctionType t;
  for (const char* p = s.params; *p != '\0'; ++p) t.params.push_back(*p == 'l' ? L : I);
  if (strcmp(s.name, "proc_exit") != 0) t.results.push_back(I);
  return t;
}

absl::Status PutU32(Engine& e, uint64_t at, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return e.Write(at, absl::string_view(b, 4));
}
absl::Status PutU64(Engine& e, uint64_t at, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return e.Write(at, absl::string_view(b, 8));
}
// args_sizes_get / environ_sizes_get, and args_get / environ_get, over `list`.
uint32_t Sizes(Engine& e, const std::vector<std::string>& list, uint64_t count_at,
               uint64_t size_at) {
  uint64_t bytes = 0;
  for (const std::string& s : list) bytes += s.size() + 1;
  if (!PutU32(e, count_at, static_cast<uint32_t>(list.size())).ok() ||
      !PutU32(e, size_at, static_cast<uint32_t>(bytes)).ok()) {
    return kFault;
  }
  return kSuccess;
}
uint32_t Strings(Engine& e, const std::vector<std::string>& list, uint64_t pointers_at,
                 uint64_t buffer_at) {
  uint64_t at = buffer_at;
  for (size_t i = 0; i < list.size(); ++i) {
    if (!PutU32(e, pointers_at + 4 * i, static_cast<uint32_t>(at)).ok()) return kFault;
    std::string s = list[i];
    s.push_back('\0');
    if (!e.Write(at, s).ok()) return kFault;
    at += s.size();
  }
  return kSuccess;
}

// An errno for a host call that failed.
uint32_t ErrnoOf(const absl::Status& s) { return absl::IsInvalidArgument(s) ? kInval : kIo; }

// A host function returning an errno, from `body`.
HostFunction Wasi(const Signature& sig, std::function<absl::StatusOr<uint32_t>(HostCall&)> body) {
  return HostFunction{TypeOf(sig), [body = std::move(body)](HostCall& c) -> absl::Status {
                        absl::StatusOr<uint32_t> r = body(c);
                        if (!r.ok()) {
                          if (r.status().GetPayload("vault.wasm/exit").has_value())
                            return r.status();
                          c.results[0] = ErrnoOf(r.status());
                        } else {
                          c.results[0] = *r;
                        }
                        return absl::OkStatus();
                      }};
}

}  // namespace

absl::StatusOr<HostFunction> WasiImport(RunnerHost& host, absl::string_view name) {
  const Signature* sig = nullptr;
  for (const Signature& s : kPreview1) {
    if (name == s.name) sig = &s;
  }
  if (sig == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("wasi_snapshot_preview1.", name, " is not a WASI preview1 function"));
  }
  if (name == "proc_exit") {
    return HostFunction{TypeOf(*sig), [&host](HostCall& c) {
                          host.FlushOutput();
                          return Engine::Exit(static_cast<int>(static_cast<int32_t>(c.args[0])));
                        }};
  }
  if (name == "args_sizes_get") {
    return Wasi(*sig, [&host](HostCall& c) -> absl::StatusOr<uint32_t> {
      return Sizes(c.engine, host.args(), c.args[0], c.args[1]);
    });
  }
  if (name == "args_get") {
    return Wasi(*sig, [&host](HostCall& c) -> absl::StatusOr<uint32_t> {
      return Strings(c.engine, host.args(), c.args[0], c.args[1]);
    });
  }
  if (name == "environ_sizes_get") {
    return Wasi(*sig, [&host](HostCall& c) -> absl::StatusOr<uint32_t> {
      return Sizes(c.engine, host.env(), c.args[0], c.args[1]);
    });
  }
  if (name == "environ_get") {
    return Wasi(*sig, [&host](HostCall& c) -> absl::StatusOr<uint32_t> {
      return Strings(c.engine, host.env(), c.args[0], c.args[1]);
    });
  }
  if (name == "clock_res_get") {
    return Wasi(*sig, [](HostCall& c) -> absl::StatusOr<uint32_t> {
      if (c.args[0] > 3) return kInval;
      return PutU64(c.engine, c.args[1], 1000).ok() ? kSuccess : kFault;
    });
  }
  if (name == "clock_time_get") {
    // Every clock from the vault's (logged, so a replay reads the same): realtime as it is; the
    // monotonic and CPU-time clocks never go back, hops included.
    return Wasi(*sig, [&host](HostCall& c) -> absl::StatusOr<uint32_t> {
      if (c.args[0] > 3) return kInval;
      VAULT_ASSIGN_OR_RETURN(vault::v1::ClockResult now, host.agent().Clock());
      int64_t ns = now.unix_nanos();
      if (c.args[0] != 0) {
        ns = std::max(ns, host.state().monotonic_floor_ns());
        host.state().set_monotonic_floor_ns(ns);
      }
      const uint64_t t = static_cast<uint64_t>(ns);
      return PutU64(c.engine, c.args[2], t).ok() ? kSuccess : kFault;
    });
  }
  if (name == "random_get") {
    return Wasi(*sig, [&host](HostCall& c) -> absl::StatusOr<uint32_t> {
      uint64_t at = c.args[0];
      uint64_t left = c.args[1];
      if (!c.engine.Read(at, left).ok()) return kFault;
      while (left > 0) {
        const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(left, 4096));
        VAULT_ASSIGN_OR_RETURN(std::string bytes, host.agent().Random(n));
        if (bytes.size() != n) return kIo;
        if (!c.engine.Write(at, bytes).ok()) return kFault;
        at += n;
        left -= n;
      }
      return kSuccess;
    });
  }
  // The calls on files and preopened directories.
  for (const char* file_call : {"fd_prestat_get", "fd_prestat_dir_name", "path_open",
                                "path_filestat_get", "fd_filestat_get", "fd_readdir"}) {
    if (name == file_call) {
      return Wasi(*sig, [&host, file_call](HostCall& c) -> absl::StatusOr<uint32_t> {
        return WasiFileCall(host, file_call, c);
      });
    }
  }
  // And the descriptor calls on a descriptor above 2 (0, 1 and 2 are below).
  auto on_file =
      [&host, name = std::string(name)](HostCall& c) -> std::optional<absl::StatusOr<uint32_t>> {
    if (c.args.empty() || c.args[0] <= 2) return std::nullopt;
    return WasiFileCall(host, name, c);
  };
  if (name == "fd_write") {
    // fd_write(fd, iovs, iovs_len, nwritten): stdout and stderr, as log lines
    return Wasi(*sig, [&host, on_file](HostCall& c) -> absl::StatusOr<uint32_t> {
      if (auto f = on_file(c)) return *f;
      const uint64_t fd = c.args[0];
      if (fd != 1 && fd != 2) return kBadf;
      absl::StatusOr<std::string> gathered = Gather(c.engine, c.args[1], c.args[2]);
      if (!gathered.ok()) return kFault;
      const std::string& bytes = *gathered;
      VAULT_RETURN_IF_ERROR(host.Output(static_cast<int>(fd), bytes));
      return PutU32(c.engine, c.args[3], static_cast<uint32_t>(bytes.size())).ok() ? kSuccess
                                                                                   : kFault;
    });
  }
  if (name == "fd_read") {
    // stdin is empty
    return Wasi(*sig, [on_file](HostCall& c) -> absl::StatusOr<uint32_t> {
      if (auto f = on_file(c)) return *f;
      if (c.args[0] != 0) return kBadf;
      return PutU32(c.engine, c.args[3], 0).ok() ? kSuccess : kFault;
    });
  }
  if (name == "fd_fdstat_get") {
    // 0, 1, 2: character devices (so wasi-libc buffers stdout by line) that read or write
    return Wasi(*sig, [on_file](HostCall& c) -> absl::StatusOr<uint32_t> {
      if (auto f = on_file(c)) return *f;
      std::string stat(24, '\0');
      stat[0] = 2;  // __WASI_FILETYPE_CHARACTER_DEVICE
      const uint64_t rights = c.args[0] == 0 ? (1u << 1) : (1u << 6);  // fd_read, fd_write
      for (int i = 0; i < 8; ++i) stat[8 + i] = static_cast<char>((rights >> (8 * i)) & 0xff);
      return c.engine.Write(c.args[1], stat).ok() ? kSuccess : kFault;
    });
  }
  if (name == "fd_close" || name == "fd_seek" || name == "fd_tell") {
    return Wasi(*sig,
                [on_file, close = name == "fd_close"](HostCall& c) -> absl::StatusOr<uint32_t> {
                  if (auto f = on_file(c)) return *f;
                  return close ? kSuccess : kSpipe;
                });
  }
  if (name == "fd_sync" || name == "fd_datasync") {
    return Wasi(*sig, [](HostCall&) -> absl::StatusOr<uint32_t> { return kSuccess; });
  }
  if (name == "sched_yield") {
    return Wasi(*sig, [](HostCall&) -> absl::StatusOr<uint32_t> { return kSuccess; });
  }
  return Wasi(*sig, [](HostCall&) -> absl::StatusOr<uint32_t> { return kNosys; });
}

}  // namespace vault::sandbox::wasm
