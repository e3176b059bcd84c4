// libFuzzer target: arbitrary bytes as an image layer (its first byte picks plain, gzip or zstd).
// ApplyLayer must never crash, hang or write outside the root it is given: after each input the
// folder beside the root holds exactly what it held before.
//
//   cmake -DVAULT_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ ...; build/image/layer_unpack_fuzz
//   -max_total_time=60
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "common/unique_fd.h"
#include "image/layer_unpack.h"

namespace {

const std::string& Base() {
  static const std::string* base = [] {
    std::string templ = "/tmp/layer_unpack_fuzz.XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) abort();
    std::FILE* f = std::fopen((templ + "/sentinel").c_str(), "w");
    if (f == nullptr) abort();
    std::fclose(f);
    return new std::string(templ);
  }();
  return *base;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using vault::image::Compression;
  if (size == 0) return 0;
  const Compression c = data[0] % 3 == 0   ? Compression::kNone
                        : data[0] % 3 == 1 ? Compression::kGzip
                                           : Compression::kZstd;
  const std::string root = Base() + "/root";
  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);
  if (mkdir(root.c_str(), 0755) != 0) abort();
  vault::common::UniqueFd fd(open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) abort();
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  bool given = false;
  vault::image::ByteSource source = [&]() -> absl::StatusOr<absl::string_view> {
    if (given) return absl::string_view();
    given = true;
    return absl::string_view(bytes);
  };
  vault::image::UnpackLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_entries = 1000;
  vault::image::UnpackBudget budget(limits);
  vault::image::UnpackReport report;
  (void)vault::image::ApplyLayer(source, c, fd.get(), &budget, &report);
  // Nothing but the root and the sentinel beside it.
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(Base())) {
    const std::string name = e.path().filename();
    if (name != "root" && name != "sentinel") abort();
    ++count;
  }
  if (count != 2) abort();
  return 0;
}
