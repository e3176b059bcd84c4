// Small, durable file helpers over POSIX, with errno converted to absl::Status once, here.
//
//   VAULT_RETURN_IF_ERROR(WriteFileAtomic("/var/lib/vault/a/vault.conf", text, 0600));
//   VAULT_ASSIGN_OR_RETURN(std::string pem, ReadFile(path));
//
// Thread-safety: every function is thread-compatible; they share no state.
#ifndef VAULT_COMMON_FILE_UTIL_H_
#define VAULT_COMMON_FILE_UTIL_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vault::common {

class Env;

// Converts an errno value into a Status whose code matches it (ENOENT -> NOT_FOUND, ...),
// with the message "<what>: <strerror>".
absl::Status PosixError(int err, absl::string_view what);

// Reads the whole file. NOT_FOUND when it does not exist.
absl::StatusOr<std::string> ReadFile(const std::string& path);

// Reads a file holding a secret (a private key): FAILED_PRECONDITION when it is not a regular
// file or its mode grants any group or other permission, naming the path and the fix.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path);

// Writes `data` to a temporary file beside `path` with `mode`, fsyncs it, renames it over `path`
// and fsyncs the directory: readers see the old or the new content, never a mix. `env`: the
// files' Env (common/env.h), Env::Default() when null.
absl::Status WriteFileAtomic(const std::string& path, absl::string_view data, mode_t mode,
                             Env* env = nullptr);

// Like WriteFileAtomic, but fails with ALREADY_EXISTS (changing nothing) when `path` exists.
absl::Status WriteNewFile(const std::string& path, absl::string_view data, mode_t mode,
                          Env* env = nullptr);

// Creates `path` and missing parents with `mode`. OK when it already is a directory.
absl::Status MakeDirs(const std::string& path, mode_t mode);

bool PathExists(const std::string& path);

// Joins `path` to `base` unless `path` is absolute or empty.
std::string ResolvePath(absl::string_view base_dir, absl::string_view path);

// The directory part of `path` ("." when there is none).
std::string DirName(absl::string_view path);

}  // namespace vault::common

#endif  // VAULT_COMMON_FILE_UTIL_H_
