// libFuzzer target: arbitrary bytes as an image archive handed to `vaultctl image import` (its
// first byte says whether they are gzip-compressed first). ReadArchive must never crash or hang;
// whatever plan it accepts must name blobs ForBlob can stream again, each of the size it planned.
//
//   cmake -DVAULT_BUILD_FUZZ=ON -DCMAKE_CXX_COMPILER=clang++ ...; build/image/archive_reader_fuzz
//   -max_total_time=60
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "image/archive_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string* path = [] {
    std::string templ = "/tmp/archive_reader_fuzz.XXXXXX";
    const int fd = mkstemp(templ.data());
    if (fd < 0) abort();
    close(fd);
    return new std::string(templ);
  }();
  std::FILE* f = std::fopen(path->c_str(), "wb");
  if (f == nullptr) abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) abort();
  std::fclose(f);
  absl::StatusOr<vault::image::ArchivePlan> plan =
      vault::image::ReadArchive(*path, vault::image::ArchiveLimits{});
  if (!plan.ok()) return 0;
  std::vector<const vault::image::PlannedBlob*> blobs{&plan->config};
  for (const vault::image::PlannedBlob& l : plan->layers) blobs.push_back(&l);
  for (const vault::image::PlannedBlob* b : blobs) {
    uint64_t got = 0;
    absl::Status s = vault::image::ForBlob(*path, b->path, vault::image::ArchiveLimits{},
                                           [&](const vault::image::ByteSource& src) {
                                             for (;;) {
                                               absl::StatusOr<absl::string_view> piece = src();
                                               if (!piece.ok()) return piece.status();
                                               if (piece->empty()) return absl::OkStatus();
                                               got += piece->size();
                                             }
                                           });
    if (!s.ok() || got != b->digest.size()) abort();
  }
  return 0;
}
