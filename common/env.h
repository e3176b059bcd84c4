// common/env: the files and the clock of the vault's own storage (the CAS's pack files, the
// durable file helpers, the agents' code folders) behind one interface, as LevelDB's Env: the
// components take an Env* in their options (default: Env::Default(), POSIX), and tests pass
// one that injects faults (common/testing/fault_env.h drops whatever was not synced, as a power
// cut would). RocksDB has its own (storage::DatabaseOptions::env); the fault-injection test wires
// both to the same simulated crash.
//
// The file calls return 0 or an errno value, as the system calls they stand for, because their
// callers decide on them (EINVAL: a file system without O_DIRECT; ENOSPC: a full disk).
//
//   common::Env* env = options.env != nullptr ? options.env : common::Env::Default();
//   int err = 0;
//   std::unique_ptr<common::EnvFile> f = env->Open(path, common::OpenMode::kCreateNew, false,
//   &err); if (f == nullptr) return common::PosixError(err, "create " + path); if (int e =
//   f->WriteAt(0, {{data, size}}); e != 0) ... if (int e = f->Sync(); e != 0) ...
//
// Thread-safety: an Env is thread-safe. An EnvFile's positional calls may run concurrently on
// disjoint ranges.
#ifndef VAULT_COMMON_ENV_H_
#define VAULT_COMMON_ENV_H_

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace vault::common {

class EnvFile {
 public:
  virtual ~EnvFile() = default;
  // Writes every piece at `offset`, going on after short writes. 0 or an errno value; on failure
  // the range holds some prefix of the pieces.
  virtual int WriteAt(uint64_t offset, std::vector<iovec> pieces) = 0;
  // Reads up to `n` bytes at `offset` into `out`: the count (0 past the end), or -errno.
  virtual ssize_t ReadAt(uint64_t offset, char* out, size_t n) = 0;
  // Makes every write so far durable (fdatasync). 0 or an errno value.
  virtual int Sync() = 0;
  // Makes the file and its metadata (mode, times) durable (fsync). 0 or an errno value.
  virtual int FullSync() = 0;
  // Closes it now and reports a late write error (the destructor closes too, silently).
  virtual int Close() = 0;
  // Gives the bytes of [offset, offset + length) back to the file system; they read as zeros.
  // EOPNOTSUPP where the file system has no holes.
  virtual int PunchHole(uint64_t offset, uint64_t length) = 0;
  // Sets the permission bits (fchmod).
  virtual int Chmod(mode_t mode) = 0;
};

enum class OpenMode {
  kCreateNew,  // read-write; EEXIST when the path exists
  kReadWrite,
  kReadOnly,
};

class Env {
 public:
  // The process's POSIX Env. Never destroyed.
  static Env* Default();
  virtual ~Env() = default;

  virtual absl::Time Now() { return absl::Now(); }

  // Opens `path` (a new file gets `mode` bits). `direct`: O_DIRECT (EINVAL where the file system
  // refuses it). Null on failure, with the errno in *err.
  virtual std::unique_ptr<EnvFile> Open(const std::string& path, OpenMode open_mode, bool direct,
                                        int* err, mode_t mode = 0600) = 0;
  // Makes the names in `dir` durable (fsync of the directory). 0 or an errno value.
  virtual int SyncDir(const std::string& dir) = 0;
  // mkdir: 0, or an errno value (EEXIST when it exists).
  virtual int CreateDir(const std::string& path, mode_t mode) = 0;
  // The names in `dir` (without "." and ".."). 0 or an errno value.
  virtual int ListDir(const std::string& dir, std::vector<std::string>* names) = 0;
  virtual int Rename(const std::string& from, const std::string& to) = 0;
  virtual int Remove(const std::string& path) = 0;
};

}  // namespace vault::common

#endif  // VAULT_COMMON_ENV_H_
