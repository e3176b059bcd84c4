#include "cas/chunker.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace vault::cas {
namespace {

// 256 fixed pseudo-random 64-bit values (splitmix64 from a fixed seed). Changing them changes
// every boundary, so they are part of the storage format.
constexpr std::array<uint64_t, 256> MakeGear() {
  std::array<uint64_t, 256> gear{};
  uint64_t x = 0x7661756c74636463ULL;  // "vaultcdc"
  for (uint64_t& g : gear) {
    x += 0x9e3779b97f4a7c15ULL;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    g = z ^ (z >> 31);
  }
  return gear;
}
constexpr std::array<uint64_t, 256> kGear = MakeGear();

int Log2(size_t v) {
  int bits = 0;
  while ((size_t{1} << (bits + 1)) <= v) ++bits;
  return bits;
}

// A mask of `bits` one-bits at the top of the word: the gear hash's high bits depend on the
// last 64 bytes, which is the window FastCDC means.
uint64_t TopMask(int bits) { return bits <= 0 ? 0 : ~uint64_t{0} << (64 - bits); }

}  // namespace

absl::StatusOr<ChunkerParams> ChunkerParams::ForAverage(size_t avg_size) {
  if (avg_size < (64u << 10) || avg_size > (4u << 20) || (avg_size & (avg_size - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk average size ", avg_size, " must be a power of two between 64 KiB and 4 MiB"));
  }
  return ChunkerParams{avg_size / 4, avg_size, avg_size * 4};
}

size_t FindBoundary(absl::string_view data, const ChunkerParams& params) {
  const size_t n = data.size();
  if (n <= params.min_size) return n;
  const size_t limit = n < params.max_size ? n : params.max_size;
  const size_t normal = params.avg_size < limit ? params.avg_size : limit;
  // Normalized chunking, level 2: harder to cut before the average, easier after it.
  const int bits = Log2(params.avg_size);
  const uint64_t mask_small = TopMask(bits + 2);
  const uint64_t mask_large = TopMask(bits - 2);
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  uint64_t hash = 0;
  size_t i = params.min_size;
  for (; i < normal; ++i) {
    hash = (hash << 1) + kGear[p[i]];
    if ((hash & mask_small) == 0) return i + 1;
  }
  for (; i < limit; ++i) {
    hash = (hash << 1) + kGear[p[i]];
    if ((hash & mask_large) == 0) return i + 1;
  }
  return limit;
}

std::optional<std::string> Chunker::Next(bool eof) {
  absl::string_view pending(buffer_.data() + consumed_, buffer_.size() - consumed_);
  if (pending.empty()) return std::nullopt;
  // Without eof, a boundary is only final once max_size bytes are visible (or one was found
  // before the end of what we have).
  size_t cut = FindBoundary(pending, params_);
  if (!eof && cut == pending.size() && pending.size() < params_.max_size) return std::nullopt;
  std::string chunk(pending.substr(0, cut));
  consumed_ += cut;
  // Compact the buffer once the consumed prefix dominates.
  if (consumed_ >= params_.max_size || consumed_ == buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  return chunk;
}

}  // namespace vault::cas
