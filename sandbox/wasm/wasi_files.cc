// WASI files (docs/wasm.md, "WASI"): the agent's read and write path grants become preopened
// directories (fd 3 and up, named by the grant's path: "/vault/pub"), and every file call is a
// host call on the vault's tree (read_file, write_file, list), so the vault checks each against
// the grants and the tree's own confinement (no symlinks, nothing outside it), and audits it.
// The runner resolves a path against its directory descriptor lexically: an absolute path, or a
// ".." that would leave that directory, is ENOTCAPABLE before anything reaches the vault.
// Writes go to the end of the file (a file opened with O_TRUNC is written from empty).
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "sandbox/wasm/runner_host.h"
#include "sandbox/wasm/wasi.h"

namespace vault::sandbox::wasm {
namespace {

using Fd = vault::v1::WasmHostState::Fd;

constexpr uint32_t kFirstPreopen = 3;
constexpr uint64_t kRightRead = 1u << 1, kRightWrite = 1u << 6;
constexpr uint32_t kOflagCreat = 1, kOflagDirectory = 2, kOflagExcl = 4, kOflagTrunc = 8;
constexpr uint32_t kFdflagAppend = 1;
constexpr uint8_t kTypeDirectory = 3, kTypeRegular = 4;

// An errno for a host call's failure on a path.
uint32_t FileErrno(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kNotFound:
      return kWasiNoent;
    case absl::StatusCode::kPermissionDenied:
      return kWasiNotcapable;
    case absl::StatusCode::kFailedPrecondition:
      return kWasiIsdir;
    case absl::StatusCode::kInvalidArgument:
      return kWasiInval;
    case absl::StatusCode::kResourceExhausted:
      return kWasiNospc;
    default:
      return kWasiIo;
  }
}

// The preopens, from the grants (made once, on the first descriptor call: the self_inspect
// call is in the log like any other).
absl::Status EnsurePreopens(RunnerHost& host) {
  vault::v1::WasmHostState& st = host.state();
  if (st.preopens_listed()) return absl::OkStatus();
  VAULT_ASSIGN_OR_RETURN(vault::v1::SelfInspectResult self, host.agent().SelfInspect());
  std::vector<std::string> paths;
  for (const vault::v1::Grant& g : self.grants()) {
    if ((g.kind() != vault::v1::Grant::READ && g.kind() != vault::v1::Grant::WRITE) ||
        g.path().empty()) {
      continue;
    }
    if (std::find(paths.begin(), paths.end(), g.path()) == paths.end()) paths.push_back(g.path());
  }
  std::sort(paths.begin(), paths.end());
  uint32_t next = kFirstPreopen;
  for (const std::string& p : paths) {
    Fd* fd = st.add_fds();
    fd->set_fd(next++);
    fd->set_path(p);
    fd->set_directory(true);
    fd->set_preopen(true);
    fd->set_readable(true);
    fd->set_writable(true);
  }
  st.set_preopens_listed(true);
  st.set_next_fd(next);
  return absl::OkStatus();
}

Fd* FindFd(RunnerHost& host, uint64_t fd) {
  for (Fd& f : *host.state().mutable_fds()) {
    if (f.fd() == fd) return &f;
  }
  return nullptr;
}

// `relative` under `dir`, lexically: NOTCAPABLE for an absolute path or one leaving `dir`.
absl::StatusOr<std::string> Resolve(const std::string& dir, absl::string_view relative) {
  if (absl::StartsWith(relative, "/")) return absl::PermissionDeniedError("absolute");
  if (relative.find('\0') != absl::string_view::npos) return absl::InvalidArgumentError("NUL");
  std::vector<std::string> parts;
  for (absl::string_view part : absl::StrSplit(relative, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      if (parts.empty()) return absl::PermissionDeniedError("leaves the directory");
      parts.pop_back();
      continue;
    }
    parts.emplace_back(part);
  }
  if (parts.empty()) return dir;
  return absl::StrCat(dir == "/" ? "" : dir, "/", absl::StrJoin(parts, "/"));
}

absl::StatusOr<std::string> PathArg(HostCall& c, uint64_t ptr, uint64_t len) {
  VAULT_ASSIGN_OR_RETURN(absl::string_view p, c.engine.Read(ptr, len));
  if (!IsUtf8(p)) return absl::InvalidArgumentError("a path that is not UTF-8");
  return std::string(p);
}

// The path argument of a path call (args 2 and 3) under `dir`, in *out; else its errno: FAULT
// for memory outside the module's, INVAL for one that is not UTF-8, NOTCAPABLE for one that is
// absolute or leaves `dir`.
uint32_t ResolvePathArg(HostCall& c, const Fd& dir, std::string* out) {
  absl::StatusOr<std::string> rel = PathArg(c, c.args[2], c.args[3]);
  if (!rel.ok()) return c.engine.Read(c.args[2], c.args[3]).ok() ? kWasiInval : kWasiFault;
  absl::StatusOr<std::string> path = Resolve(dir.path(), *rel);
  if (!path.ok()) return absl::IsPermissionDenied(path.status()) ? kWasiNotcapable : kWasiInval;
  *out = *std::move(path);
  return kWasiSuccess;
}

absl::Status Put(Engine& e, uint64_t at, uint64_t v, size_t n) {
  std::string b;
  for (size_t i = 0; i < n; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return e.Write(at, b);
}

}  // namespace

absl::StatusOr<std::vector<Iovec>> Iovecs(Engine& e, uint64_t at, uint64_t count) {
  std::vector<Iovec> out;
  for (uint64_t i = 0; i < count; ++i) {
    VAULT_ASSIGN_OR_RETURN(absl::string_view iov, e.Read(at + 8 * i, 8));
    Iovec v;
    for (int k = 0; k < 4; ++k) v.base |= uint64_t{static_cast<unsigned char>(iov[k])} << (8 * k);
    for (int k = 0; k < 4; ++k)
      v.len |= uint64_t{static_cast<unsigned char>(iov[4 + k])} << (8 * k);
    out.push_back(v);
  }
  return out;
}

absl::StatusOr<std::string> Gather(Engine& e, uint64_t at, uint64_t count) {
  VAULT_ASSIGN_OR_RETURN(std::vector<Iovec> iovs, Iovecs(e, at, count));
  std::string bytes;
  for (const Iovec& v : iovs) {
    VAULT_ASSIGN_OR_RETURN(absl::string_view b, e.Read(v.base, v.len));
    bytes.append(b.data(), b.size());
  }
  return bytes;
}

absl::StatusOr<uint32_t> WasiFileCall(RunnerHost& host, absl::string_view name, HostCall& c) {
  VAULT_RETURN_IF_ERROR(EnsurePreopens(host));
  Engine& e = c.engine;
  auto ok_or_fault = [](const absl::Status& s) { return s.ok() ? kWasiSuccess : kWasiFault; };
  if (name == "fd_prestat_get") {
    Fd* fd = FindFd(host, c.args[0]);
    if (fd == nullptr || !fd->preopen()) return kWasiBadf;
    std::string prestat(8, '\0');  // tag 0 (a directory), then the name's length
    const uint32_t n = static_cast<uint32_t>(fd->path().size());
    for (int i = 0; i < 4; ++i) prestat[4 + i] = static_cast<char>((n >> (8 * i)) & 0xff);
    return ok_or_fault(e.Write(c.args[1], prestat));
  }
  if (name == "fd_prestat_dir_name") {
    Fd* fd = FindFd(host, c.args[0]);
    if (fd == nullptr || !fd->preopen()) return kWasiBadf;
    if (c.args[2] < fd->path().size()) return kWasiInval;
    return ok_or_fault(e.Write(c.args[1], fd->path()));
  }
  if (name == "path_open") {
    // path_open(dirfd, dirflags, path, len, oflags, rights_base, rights_inh, fdflags, out_fd)
    Fd* dir = FindFd(host, c.args[0]);
    if (dir == nullptr) return kWasiBadf;
    if (!dir->directory()) return kWasiNotdir;
    std::string resolved;
    if (uint32_t err = ResolvePathArg(c, *dir, &resolved); err != kWasiSuccess) return err;
    const std::string* path = &resolved;
    const uint32_t oflags = static_cast<uint32_t>(c.args[4]);
    const bool read = (c.args[5] & kRightRead) != 0, write = (c.args[5] & kRightWrite) != 0;
    Fd opened;
    opened.set_path(*path);
    if (oflags & kOflagDirectory) {
      absl::StatusOr<std::vector<vault::v1::ListResult::Entry>> listed = host.agent().List(*path);
      if (!listed.ok()) {
        return absl::IsFailedPrecondition(listed.status()) ? kWasiNotdir
                                                           : FileErrno(listed.status());
      }
      opened.set_directory(true);
      opened.set_readable(true);
    } else {
      absl::StatusOr<std::string> probe = host.agent().ReadFile(*path, 0, 1);
      const bool exists = probe.ok();
      if (!exists && !absl::IsNotFound(probe.status())) {
        // A directory opened without O_DIRECTORY (as opendir may): a directory descriptor.
        if (absl::IsFailedPrecondition(probe.status()) && !write) {
          if (!host.agent().List(*path).ok()) return FileErrno(probe.status());
          opened.set_directory(true);
          opened.set_readable(true);
        } else {
          return FileErrno(probe.status());
        }
      }
      if (!opened.directory()) {
        if (exists && (oflags & kOflagCreat) && (oflags & kOflagExcl)) return kWasiExist;
        if (!exists && !(oflags & kOflagCreat)) return kWasiNoent;
        if (!exists || (oflags & kOflagTrunc)) {
          if (absl::Status made = host.agent().WriteFile(*path, "").status(); !made.ok()) {
            return FileErrno(made);
          }
        }
        opened.set_readable(read);
        opened.set_writable(write);
        opened.set_append((c.args[7] & kFdflagAppend) != 0);
      }
    }
    const uint32_t number = host.state().next_fd();
    host.state().set_next_fd(number + 1);
    opened.set_fd(number);
    *host.state().add_fds() = std::move(opened);
    return ok_or_fault(Put(e, c.args[8], number, 4));
  }
  // The calls on a descriptor above 2.
  Fd* fd = FindFd(host, c.args.empty() ? 0 : c.args[0]);
  if (fd == nullptr) return kWasiBadf;
  if (name == "fd_close") {
    auto* fds = host.state().mutable_fds();
    for (int i = 0; i < fds->size(); ++i) {
      if (fds->Get(i).fd() == fd->fd()) {
        fds->DeleteSubrange(i, 1);
        break;
      }
    }
    return kWasiSuccess;
  }
  if (name == "fd_fdstat_get") {
    std::string stat(24, '\0');
    stat[0] = static_cast<char>(fd->directory() ? kTypeDirectory : kTypeRegular);
    const uint64_t rights = (fd->readable() ? kRightRead : 0) | (fd->writable() ? kRightWrite : 0) |
                            (1u << 2) | (1u << 5) | (fd->directory() ? ~uint64_t{0} : 0);
    for (int i = 0; i < 8; ++i) stat[8 + i] = static_cast<char>((rights >> (8 * i)) & 0xff);
    for (int i = 0; i < 8; ++i) stat[16 + i] = static_cast<char>((rights >> (8 * i)) & 0xff);
    return ok_or_fault(e.Write(c.args[1], stat));
  }
  if (name == "fd_read") {
    if (fd->directory()) return kWasiIsdir;
    if (!fd->readable()) return kWasiBadf;
    absl::StatusOr<std::vector<Iovec>> iovs = Iovecs(e, c.args[1], c.args[2]);
    if (!iovs.ok()) return kWasiFault;
    uint64_t want = 0;
    for (const Iovec& v : *iovs) want += v.len;
    want = std::min<uint64_t>(want, host.agent().max_piece_bytes());
    std::string data;
    if (want > 0) {
      absl::StatusOr<std::string> got = host.agent().ReadFile(fd->path(), fd->offset(), want);
      if (!got.ok() && !absl::IsOutOfRange(got.status())) return FileErrno(got.status());
      if (got.ok()) data = *std::move(got);
    }
    size_t at = 0;
    for (const Iovec& v : *iovs) {
      const size_t n = std::min<size_t>(v.len, data.size() - at);
      if (n == 0) break;
      if (!e.Write(v.base, absl::string_view(data).substr(at, n)).ok()) return kWasiFault;
      at += n;
    }
    fd->set_offset(fd->offset() + at);
    return ok_or_fault(Put(e, c.args[3], at, 4));
  }
  if (name == "fd_write") {
    if (fd->directory()) return kWasiIsdir;
    if (!fd->writable()) return kWasiBadf;
    absl::StatusOr<std::string> gathered = Gather(e, c.args[1], c.args[2]);
    if (!gathered.ok()) return kWasiFault;
    std::string bytes = *std::move(gathered);
    if (bytes.size() > host.agent().max_piece_bytes()) bytes.resize(host.agent().max_piece_bytes());
    absl::StatusOr<uint64_t> size = host.agent().WriteFile(fd->path(), bytes, /*append=*/true);
    if (!size.ok()) return FileErrno(size.status());
    fd->set_offset(*size);
    return ok_or_fault(Put(e, c.args[3], bytes.size(), 4));
  }
  if (name == "fd_seek" || name == "fd_tell") {
    if (fd->directory()) return kWasiIsdir;
    uint64_t to = fd->offset();
    if (name == "fd_seek") {
      const int64_t delta = static_cast<int64_t>(c.args[1]);
      const uint64_t whence = c.args[2];
      int64_t base = 0;
      if (whence == 1) {
        base = static_cast<int64_t>(fd->offset());
      } else if (whence == 2) {
        absl::StatusOr<uint64_t> size = host.FileSizeOf(fd->path());
        if (!size.ok()) return FileErrno(size.status());
        base = static_cast<int64_t>(*size);
      } else if (whence != 0) {
        return kWasiInval;
      }
      int64_t target;
      if (__builtin_add_overflow(base, delta, &target) || target < 0) return kWasiInval;
      to = static_cast<uint64_t>(target);
      fd->set_offset(to);
    }
    return ok_or_fault(Put(e, c.args[name == "fd_seek" ? 3 : 1], to, 8));
  }
  if (name == "fd_filestat_get") {
    std::string stat(64, '\0');
    stat[16] = static_cast<char>(fd->directory() ? kTypeDirectory : kTypeRegular);
    stat[24] = 1;  // one link
    if (!fd->directory()) {
      absl::StatusOr<uint64_t> size = host.FileSizeOf(fd->path());
      if (!size.ok()) return FileErrno(size.status());
      for (int i = 0; i < 8; ++i) stat[32 + i] = static_cast<char>((*size >> (8 * i)) & 0xff);
    }
    return ok_or_fault(e.Write(c.args[1], stat));
  }
  if (name == "path_filestat_get") {
    // path_filestat_get(dirfd, flags, path, len, out)
    if (!fd->directory()) return kWasiNotdir;
    std::string resolved;
    if (uint32_t err = ResolvePathArg(c, *fd, &resolved); err != kWasiSuccess) return err;
    const std::string* path = &resolved;
    std::string stat(64, '\0');
    stat[24] = 1;
    absl::StatusOr<uint64_t> size = host.FileSizeOf(*path);
    if (size.ok()) {
      stat[16] = static_cast<char>(kTypeRegular);
      for (int i = 0; i < 8; ++i) stat[32 + i] = static_cast<char>((*size >> (8 * i)) & 0xff);
    } else if (absl::IsFailedPrecondition(size.status()) && host.agent().List(*path).ok()) {
      stat[16] = static_cast<char>(kTypeDirectory);
    } else {
      return FileErrno(size.status());
    }
    return ok_or_fault(e.Write(c.args[4], stat));
  }
  if (name == "fd_readdir") {
    // fd_readdir(fd, buf, len, cookie, out_used): dirents from entry `cookie` on
    if (!fd->directory()) return kWasiNotdir;
    absl::StatusOr<std::vector<vault::v1::ListResult::Entry>> listed =
        host.agent().List(fd->path());
    if (!listed.ok()) return FileErrno(listed.status());
    std::string out;
    for (uint64_t i = c.args[3]; i < listed->size() && out.size() < c.args[2]; ++i) {
      const vault::v1::ListResult::Entry& entry = (*listed)[i];
      std::string d(24, '\0');
      for (int k = 0; k < 8; ++k) d[k] = static_cast<char>(((i + 1) >> (8 * k)) & 0xff);
      for (int k = 0; k < 8; ++k) d[8 + k] = static_cast<char>(((i + 1) >> (8 * k)) & 0xff);
      const uint32_t n = static_cast<uint32_t>(entry.name().size());
      for (int k = 0; k < 4; ++k) d[16 + k] = static_cast<char>((n >> (8 * k)) & 0xff);
      d[20] = static_cast<char>(entry.directory() ? kTypeDirectory : kTypeRegular);
      out += d;
      out += entry.name();
    }
    if (out.size() > c.args[2]) out.resize(c.args[2]);  // full: the caller reads again
    if (!e.Write(c.args[1], out).ok()) return kWasiFault;
    return ok_or_fault(Put(e, c.args[4], out.size(), 4));
  }
  return kWasiNosys;
}

absl::StatusOr<uint64_t> RunnerHost::FileSizeOf(const std::string& path) {
  VAULT_ASSIGN_OR_RETURN(vault::v1::ReadFileResult r, agent_->ReadFileRange(path, 0, 1));
  return r.size();
}

}  // namespace vault::sandbox::wasm
