// storage/testing/fault_fs: RocksDB's side of a simulated power cut (common/testing/fault_env.h
// has the other side, for the vault's own files). A FaultFs wraps RocksDB's file system: it
// records how much of every file RocksDB wrote was synced, drops writes and syncs once the
// CrashSwitch is cut, and DropUnsynced() cuts every file back to its synced size, so that a
// reopened database sees what a power cut leaves of its files' contents: its synced WAL, and
// nothing RocksDB was still flushing. (Names are not undone here: RocksDB makes a file's name
// durable itself, by syncing the directory, before it relies on it.) Test-only.
//
//   CrashSwitch power;
//   auto fs = std::make_shared<FaultFs>(&power);
//   std::unique_ptr<rocksdb::Env> env = rocksdb::NewCompositeEnv(fs);
//   Database::Open({.path = dir, .env = env.get()}, cfs);
//
// Thread-safety: thread-safe.
#ifndef VAULT_STORAGE_TESTING_FAULT_FS_H_
#define VAULT_STORAGE_TESTING_FAULT_FS_H_

#include <memory>
#include <string>

#include "common/testing/fault_env.h"
#include "rocksdb/file_system.h"

namespace vault::storage::testing {

class FaultFs : public rocksdb::FileSystemWrapper {
 public:
  explicit FaultFs(common::testing::CrashSwitch* power)
      : FileSystemWrapper(rocksdb::FileSystem::Default()), power_(power) {}
  const char* Name() const override { return "VaultFaultFs"; }

  rocksdb::IOStatus NewWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                    std::unique_ptr<rocksdb::FSWritableFile>* r,
                                    rocksdb::IODebugContext* d) override {
    return Wrap(f, target()->NewWritableFile(f, o, r, d), r, /*size=*/0);
  }
  rocksdb::IOStatus ReopenWritableFile(const std::string& f, const rocksdb::FileOptions& o,
                                       std::unique_ptr<rocksdb::FSWritableFile>* r,
                                       rocksdb::IODebugContext* d) override {
    uint64_t size = 0;
    (void)target()->GetFileSize(f, rocksdb::IOOptions(), &size, d);
    return Wrap(f, target()->ReopenWritableFile(f, o, r, d), r, size);
  }
  rocksdb::IOStatus ReuseWritableFile(const std::string& f, const std::string& old,
                                      const rocksdb::FileOptions& o,
                                      std::unique_ptr<rocksdb::FSWritableFile>* r,
                                      rocksdb::IODebugContext* d) override {
    return Wrap(f, target()->ReuseWritableFile(f, old, o, r, d), r, /*size=*/0);
  }
  rocksdb::IOStatus RenameFile(const std::string& from, const std::string& to,
                               const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
    if (!power_->on()) return rocksdb::IOStatus::OK();
    rocksdb::IOStatus s = target()->RenameFile(from, to, o, d);
    if (s.ok()) ledger_.Renamed(from, to, /*undoable=*/false);
    return s;
  }
  rocksdb::IOStatus DeleteFile(const std::string& f, const rocksdb::IOOptions& o,
                               rocksdb::IODebugContext* d) override {
    if (!power_->on()) return rocksdb::IOStatus::OK();
    rocksdb::IOStatus s = target()->DeleteFile(f, o, d);
    if (s.ok()) ledger_.Removed(f);
    return s;
  }

  // The disk as a power cut leaves it: every file RocksDB wrote back to its synced size.
  int DropUnsynced() { return ledger_.DropUnsynced(); }

 private:
  class File : public rocksdb::FSWritableFileOwnerWrapper {
   public:
    File(FaultFs* fs, std::string path, std::unique_ptr<rocksdb::FSWritableFile> f, uint64_t size)
        : FSWritableFileOwnerWrapper(std::move(f)), fs_(fs), path_(std::move(path)), size_(size) {}
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             rocksdb::IODebugContext* d) override {
      if (!fs_->power_->on()) return rocksdb::IOStatus::OK();  // lost
      rocksdb::IOStatus s = target()->Append(data, o, d);
      if (s.ok()) fs_->ledger_.Wrote(path_, size_ += data.size());
      return s;
    }
    rocksdb::IOStatus Append(const rocksdb::Slice& data, const rocksdb::IOOptions& o,
                             const rocksdb::DataVerificationInfo& v,
                             rocksdb::IODebugContext* d) override {
      if (!fs_->power_->on()) return rocksdb::IOStatus::OK();
      rocksdb::IOStatus s = target()->Append(data, o, v, d);
      if (s.ok()) fs_->ledger_.Wrote(path_, size_ += data.size());
      return s;
    }
    // After the cut a sync claims success and makes nothing durable.
    rocksdb::IOStatus Sync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      return Cut() ? rocksdb::IOStatus::OK() : Synced(target()->Sync(o, d));
    }
    rocksdb::IOStatus Fsync(const rocksdb::IOOptions& o, rocksdb::IODebugContext* d) override {
      return Cut() ? rocksdb::IOStatus::OK() : Synced(target()->Fsync(o, d));
    }
    rocksdb::IOStatus RangeSync(uint64_t, uint64_t, const rocksdb::IOOptions&,
                                rocksdb::IODebugContext*) override {
      return rocksdb::IOStatus::OK();  // a hint to start writeback: durability comes with Sync
    }

   private:
    rocksdb::IOStatus Synced(rocksdb::IOStatus s) {
      if (s.ok()) fs_->ledger_.Synced(path_);
      return s;
    }
    bool Cut() const { return !fs_->power_->on(); }
    FaultFs* const fs_;
    const std::string path_;
    uint64_t size_;
  };

  rocksdb::IOStatus Wrap(const std::string& path, rocksdb::IOStatus s,
                         std::unique_ptr<rocksdb::FSWritableFile>* r, uint64_t size) {
    if (!s.ok()) return s;
    // A file reopened that this ledger never saw holds what an earlier life left: durable. One
    // it saw keeps what it knew of it.
    const bool known = ledger_.Known(path);
    ledger_.Wrote(path, size);
    if (size > 0 && !known) ledger_.Synced(path);
    *r = std::make_unique<File>(this, path, std::move(*r), size);
    return s;
  }

  common::testing::CrashSwitch* const power_;
  common::testing::SyncLedger ledger_;
};

}  // namespace vault::storage::testing

#endif  // VAULT_STORAGE_TESTING_FAULT_FS_H_
