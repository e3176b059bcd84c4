// common/testing/fault_env: a power cut for tests, as LevelDB's fault_injection_test has it. A
// FaultEnv wraps the POSIX Env and remembers, for every file written through it, how much of it
// was synced. Crash() then loses what a power cut would: from that moment writes and syncs are
// dropped (the process's last words never reach the disk), and DropUnsynced() cuts every file
// back to its size at its last sync, undoes the renames and removes the new files of every
// directory not synced since. storage/testing/fault_fs.h does the same for RocksDB's file
// contents, both driven by one CrashSwitch. Test-only.
//
//   CrashSwitch power;
//   FaultEnv env(&power);
//   ... run the store on &env, acknowledge some writes ...
//   power.Cut();               // everything after this is lost
//   store.reset();             // its shutdown writes go nowhere
//   env.DropUnsynced();        // the disk as it would be found after the cut
//   power.Restore();           // reopen and check what was acknowledged is there
//
// Thread-safety: thread-safe.
#ifndef VAULT_COMMON_TESTING_FAULT_ENV_H_
#define VAULT_COMMON_TESTING_FAULT_ENV_H_

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/env.h"

namespace vault::common::testing {

// Whether the simulated disk takes writes. Shared by the fault injectors of one test.
class CrashSwitch {
 public:
  bool on() const { return on_.load(); }
  void Cut() { on_.store(false); }
  void Restore() { on_.store(true); }

 private:
  std::atomic<bool> on_{true};
};

// What a fault injector knows of the files written through it: the bytes each holds and how many
// of them a sync made durable, and the names made in each directory (a new file, a rename)
// since that directory was last synced. DropUnsynced cuts each file back to its synced size
// (files are written append-only: RocksDB's files, the CAS's packs), undoes the renames and
// removes the new files whose directory was never synced after them, as a power cut may.
class SyncLedger {
 public:
  // `path` is known (it was written through this ledger since it began).
  bool Known(const std::string& path) {
    absl::MutexLock lock(&mu_);
    return files_.contains(path);
  }
  void Created(const std::string& path) {
    absl::MutexLock lock(&mu_);
    files_[path];
    pending_[Dir(path)].push_back(Op{.created = path});
  }
  void Wrote(const std::string& path, uint64_t end) {
    absl::MutexLock lock(&mu_);
    File& f = files_[path];
    f.size = std::max(f.size, end);
  }
  void Synced(const std::string& path) {
    absl::MutexLock lock(&mu_);
    File& f = files_[path];
    f.synced = f.size;
  }
  void DirSynced(const std::string& dir) {
    absl::MutexLock lock(&mu_);
    auto it = pending_.find(dir);
    if (it == pending_.end()) return;
    for (const Op& op : it->second) {
      if (!op.replaced.empty()) unlink(op.replaced.c_str());
    }
    pending_.erase(it);
  }
  // `undoable`: a power cut before the directory's next sync may undo it. `replaced`: where the
  // file that `to` named before is kept (a hard link) until then, "" when there was none.
  void Renamed(const std::string& from, const std::string& to, bool undoable = true,
               const std::string& replaced = "") {
    absl::MutexLock lock(&mu_);
    if (undoable) pending_[Dir(to)].push_back(Op{.from = from, .to = to, .replaced = replaced});
    auto it = files_.find(from);
    if (it == files_.end()) return;
    const File moved = it->second;  // (inserting `to` may move the table's elements)
    files_.erase(it);
    files_[to] = moved;
  }
  void Removed(const std::string& path) {
    absl::MutexLock lock(&mu_);
    files_.erase(path);
  }
  // The disk as a power cut leaves it. The count of files that lost bytes or names.
  int DropUnsynced() {
    absl::MutexLock lock(&mu_);
    int lost = 0;
    // Names first, newest first: a rename undone, a new file gone.
    for (auto& [dir, ops] : pending_) {
      for (auto op = ops.rbegin(); op != ops.rend(); ++op) {
        if (!op->created.empty()) {
          if (unlink(op->created.c_str()) == 0) ++lost;
          files_.erase(op->created);
        } else if (rename(op->to.c_str(), op->from.c_str()) == 0) {
          ++lost;
          if (auto it = files_.find(op->to); it != files_.end()) {
            const File moved = it->second;
            files_.erase(it);
            files_[op->from] = moved;
          }
          // The file it had replaced is back under its name.
          if (!op->replaced.empty()) rename(op->replaced.c_str(), op->to.c_str());
        }
      }
    }
    pending_.clear();
    for (auto& [path, f] : files_) {
      struct stat st;
      if (stat(path.c_str(), &st) != 0) continue;
      if (static_cast<uint64_t>(st.st_size) > f.synced) {
        if (truncate(path.c_str(), static_cast<off_t>(f.synced)) == 0) ++lost;
      }
      f.size = f.synced;
    }
    return lost;
  }

 private:
  struct File {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  struct Op {
    std::string created;  // a new file; else a rename
    std::string from, to;
    std::string replaced;  // a link to the file `to` named before the rename, or ""
  };
  static std::string Dir(const std::string& path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? "." : path.substr(0, slash);
  }
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::vector<Op>> pending_ ABSL_GUARDED_BY(mu_);
};

class FaultEnv : public Env {
 public:
  explicit FaultEnv(CrashSwitch* power, Env* base = Env::Default()) : power_(power), base_(base) {}

  std::unique_ptr<EnvFile> Open(const std::string& path, OpenMode open_mode, bool direct, int* err,
                                mode_t mode) override {
    std::unique_ptr<EnvFile> f = base_->Open(path, open_mode, direct, err, mode);
    if (f == nullptr) return nullptr;
    // After the cut too: a file made then is gone at DropUnsynced (its directory is never
    // synced again).
    if (open_mode == OpenMode::kCreateNew) ledger_.Created(path);
    return std::make_unique<File>(this, path, std::move(f));
  }
  int SyncDir(const std::string& dir) override {
    if (!power_->on()) return 0;
    const int err = base_->SyncDir(dir);
    if (err == 0) ledger_.DirSynced(dir);
    return err;
  }
  int CreateDir(const std::string& path, mode_t mode) override {
    return base_->CreateDir(path, mode);
  }
  int ListDir(const std::string& dir, std::vector<std::string>* names) override {
    return base_->ListDir(dir, names);
  }
  int Rename(const std::string& from, const std::string& to) override {
    if (!power_->on()) return 0;
    // Keep the file `to` names now, for a cut that undoes the rename.
    std::string replaced = absl::StrCat(to, ".fault-replaced-", next_link_.fetch_add(1));
    if (link(to.c_str(), replaced.c_str()) != 0) replaced.clear();
    int err = base_->Rename(from, to);
    if (err == 0) {
      ledger_.Renamed(from, to, /*undoable=*/true, replaced);
    } else if (!replaced.empty()) {
      unlink(replaced.c_str());
    }
    return err;
  }
  int Remove(const std::string& path) override {
    if (!power_->on()) return 0;
    int err = base_->Remove(path);
    if (err == 0) ledger_.Removed(path);
    return err;
  }

  // The disk as a power cut leaves it: every file back to its synced size.
  int DropUnsynced() { return ledger_.DropUnsynced(); }

 private:
  class File : public EnvFile {
   public:
    File(FaultEnv* env, std::string path, std::unique_ptr<EnvFile> base)
        : env_(env), path_(std::move(path)), base_(std::move(base)) {}
    int WriteAt(uint64_t offset, std::vector<iovec> pieces) override {
      if (!env_->power_->on()) return 0;  // lost
      uint64_t bytes = 0;
      for (const iovec& v : pieces) bytes += v.iov_len;
      int err = base_->WriteAt(offset, std::move(pieces));
      if (err == 0) env_->ledger_.Wrote(path_, offset + bytes);
      return err;
    }
    ssize_t ReadAt(uint64_t offset, char* out, size_t n) override {
      return base_->ReadAt(offset, out, n);
    }
    int Sync() override {
      if (!env_->power_->on()) return 0;  // claims success; nothing reaches the disk
      int err = base_->Sync();
      if (err == 0) env_->ledger_.Synced(path_);
      return err;
    }
    int PunchHole(uint64_t offset, uint64_t length) override {
      return env_->power_->on() ? base_->PunchHole(offset, length) : 0;
    }
    int Chmod(mode_t mode) override { return base_->Chmod(mode); }
    int FullSync() override {
      if (!env_->power_->on()) return 0;
      int err = base_->FullSync();
      if (err == 0) env_->ledger_.Synced(path_);
      return err;
    }
    int Close() override { return base_->Close(); }

   private:
    FaultEnv* const env_;
    const std::string path_;
    std::unique_ptr<EnvFile> base_;
  };

  CrashSwitch* const power_;
  Env* const base_;
  SyncLedger ledger_;
  std::atomic<uint64_t> next_link_{0};
};

}  // namespace vault::common::testing

#endif  // VAULT_COMMON_TESTING_FAULT_ENV_H_
