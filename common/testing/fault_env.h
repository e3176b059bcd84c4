// common/testing/fault_env: a power cut for tests, as LevelDB's fault_injection_test has it. A
// FaultEnv wraps the POSIX Env and remembers, for every file written through it, how much of it
// was synced. Crash() then loses what a power cut would: from that moment writes and syncs are
// dropped (the process's last words never reach the disk), and DropUnsynced() cuts every file
// back to its size at its last sync. storage/testing/fault_fs.h does the same for RocksDB, both
// driven by one CrashSwitch. Test-only.
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
// of them a sync made durable. DropUnsynced cuts each file back to its synced size (files are
// written append-only: RocksDB's files, the CAS's packs).
class SyncLedger {
 public:
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
  void Renamed(const std::string& from, const std::string& to) {
    absl::MutexLock lock(&mu_);
    auto it = files_.find(from);
    if (it == files_.end()) return;
    files_[to] = it->second;
    files_.erase(from);
  }
  void Removed(const std::string& path) {
    absl::MutexLock lock(&mu_);
    files_.erase(path);
  }
  // Truncates every file written since the ledger began to its synced size. The count of files
  // that lost bytes.
  int DropUnsynced() {
    absl::MutexLock lock(&mu_);
    int cut = 0;
    for (auto& [path, f] : files_) {
      struct stat st;
      if (stat(path.c_str(), &st) != 0) continue;
      if (static_cast<uint64_t>(st.st_size) > f.synced) {
        if (truncate(path.c_str(), static_cast<off_t>(f.synced)) == 0) ++cut;
      }
      f.size = f.synced;
    }
    return cut;
  }

 private:
  struct File {
    uint64_t size = 0;
    uint64_t synced = 0;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, File> files_ ABSL_GUARDED_BY(mu_);
};

class FaultEnv : public Env {
 public:
  explicit FaultEnv(CrashSwitch* power, Env* base = Env::Default()) : power_(power), base_(base) {}

  std::unique_ptr<EnvFile> Open(const std::string& path, OpenMode open_mode, bool direct,
                                int* err, mode_t mode) override {
    std::unique_ptr<EnvFile> f = base_->Open(path, open_mode, direct, err, mode);
    if (f == nullptr) return nullptr;
    if (open_mode == OpenMode::kCreateNew) ledger_.Wrote(path, 0);
    return std::make_unique<File>(this, path, std::move(f));
  }
  int SyncDir(const std::string& dir) override { return power_->on() ? base_->SyncDir(dir) : 0; }
  int CreateDir(const std::string& path, mode_t mode) override {
    return base_->CreateDir(path, mode);
  }
  int ListDir(const std::string& dir, std::vector<std::string>* names) override {
    return base_->ListDir(dir, names);
  }
  int Rename(const std::string& from, const std::string& to) override {
    if (!power_->on()) return 0;
    int err = base_->Rename(from, to);
    if (err == 0) ledger_.Renamed(from, to);
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

   private:
    FaultEnv* const env_;
    const std::string path_;
    std::unique_ptr<EnvFile> base_;
  };

  CrashSwitch* const power_;
  Env* const base_;
  SyncLedger ledger_;
};

}  // namespace vault::common::testing

#endif  // VAULT_COMMON_TESTING_FAULT_ENV_H_
