// Test helper: a fresh private directory under $TMPDIR (or /tmp), removed with everything in it
// when the TempDir is destroyed. Aborts the test binary if it cannot be created.
//
//   common::testing::TempDir tmp("store_test");
//   Open(tmp.Path("db"));
//
// Thread-safety: immutable after construction.
#ifndef VAULT_COMMON_TESTING_TEMP_DIR_H_
#define VAULT_COMMON_TESTING_TEMP_DIR_H_

#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace vault::common::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    const char* base = getenv("TMPDIR");
    std::string templ =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + ".XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror(("mkdtemp " + templ).c_str());
      std::abort();
    }
    path_ = templ;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::string Path(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace vault::common::testing

#endif  // VAULT_COMMON_TESTING_TEMP_DIR_H_
