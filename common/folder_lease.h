// common/folder_lease: a process's claim on a folder that others may clean away. A vault keeps
// files its sandboxes read (staged runners, laid-out code) in folders outside its data directory;
// a vault killed with SIGKILL cannot remove them. Each user of such a folder holds a lease (an
// flock on the folder itself, shared or exclusive, released by the kernel when the process dies)
// and any later process removes the folders under the same parent that nobody leases.
//
//   VAULT_ASSIGN_OR_RETURN(FolderLease lease, FolderLease::Take(dir, /*exclusive=*/false));
//   RemoveUnleased(parent, [](absl::string_view name) { return absl::StartsWith(name, "wasm-"); });
//
// A folder being removed is renamed away first, under an exclusive lease, so Take (which checks
// that the folder it locked is still the one at its path) never holds a lease on a folder that is
// gone: it answers ABORTED and its caller makes the folder again.
//
// Thread-safety: a FolderLease is a value with one owner; the functions share no state.
#ifndef VAULT_COMMON_FOLDER_LEASE_H_
#define VAULT_COMMON_FOLDER_LEASE_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/unique_fd.h"

namespace vault::common {

class FolderLease {
 public:
  FolderLease() = default;  // holds nothing

  // Locks `dir` (waiting while a remover holds it). NOT_FOUND when it does not exist; ABORTED
  // when it was removed or replaced while this waited (make it again and retry).
  static absl::StatusOr<FolderLease> Take(const std::string& dir, bool exclusive);

  bool held() const { return fd_.valid(); }

 private:
  explicit FolderLease(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // O_CLOEXEC: a sandbox's program never holds it
};

// Marks `dir` as one whose users take leases (an empty file, kLeaseMark): only such a folder is
// ever removed by RemoveUnleased, so that folders of builds that take no leases, in use or not,
// are left alone.
inline constexpr char kLeaseMark[] = ".vault-lease";
absl::Status MarkLeased(const std::string& dir);

// Removes every folder directly under `parent` that is marked (MarkLeased), whose name `matches`
// accepts and that no process holds a lease on. Returns how many it removed; a folder it cannot
// remove stays for the next call.
int RemoveUnleased(const std::string& parent, absl::FunctionRef<bool(absl::string_view)> matches);

}  // namespace vault::common

#endif  // VAULT_COMMON_FOLDER_LEASE_H_
