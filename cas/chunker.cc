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

namespace {

// Continues the gear hash `*hash` over data[from, limit) of a chunk and returns the length of
// the chunk when a content-defined boundary is found there, or 0. The mask applied at a position
// depends only on the position, so a scan may stop at any point and resume later with more data.
size_t Scan(absl::string_view data, size_t from, size_t limit, const ChunkerParams& params,
            uint64_t* hash) {
  // Normalized chunking, level 2: harder to cut before the average, easier after it.
  const int bits = Log2(params.avg_size);
  const uint64_t mask_small = TopMask(bits + 2);
  const uint64_t mask_large = TopMask(bits - 2);
  const size_t normal = params.avg_size < limit ? params.avg_size : limit;
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  uint64_t h = *hash;
  size_t i = from;
  for (; i < normal; ++i) {
    h = (h << 1) + kGear[p[i]];
    if ((h & mask_small) == 0) return i + 1;
  }
  for (; i < limit; ++i) {
    h = (h << 1) + kGear[p[i]];
    if ((h & mask_large) == 0) return i + 1;
  }
  *hash = h;
  return 0;
}

}  // namespace

size_t FindBoundary(absl::string_view data, const ChunkerParams& params) {
  const size_t n = data.size();
  if (n <= params.min_size) return n;
  const size_t limit = n < params.max_size ? n : params.max_size;
  uint64_t hash = 0;
  size_t cut = Scan(data, params.min_size, limit, params, &hash);
  return cut != 0 ? cut : limit;
}

std::optional<std::string> Chunker::Next(bool eof) {
  absl::string_view pending(buffer_.data() + consumed_, buffer_.size() - consumed_);
  if (pending.empty()) return std::nullopt;
  // Same cuts as FindBoundary(pending), but bytes already scanned without finding a boundary are
  // not scanned again when more data arrives (small appends would otherwise cost quadratic time).
  size_t cut = 0;
  if (pending.size() > params_.min_size) {
    const size_t limit = pending.size() < params_.max_size ? pending.size() : params_.max_size;
    const size_t from = scanned_ > params_.min_size ? scanned_ : params_.min_size;
    cut = Scan(pending, from, limit, params_, &scan_hash_);
    if (cut == 0) {
      scanned_ = limit;
      if (limit == params_.max_size) cut = limit;
    }
  }
  // Without eof, the chunk only ends at a boundary found or at max_size: more data may follow.
  if (cut == 0) {
    if (!eof) return std::nullopt;
    cut = pending.size();
  }
  std::string chunk(pending.substr(0, cut));
  consumed_ += cut;
  scanned_ = 0;
  scan_hash_ = 0;
  // Compact the buffer once the consumed prefix dominates.
  if (consumed_ >= params_.max_size || consumed_ == buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  return chunk;
}

std::string Chunker::TakeAll() {
  std::string chunk = consumed_ == 0 ? std::move(buffer_) : buffer_.substr(consumed_);
  buffer_.clear();
  consumed_ = 0;
  scanned_ = 0;
  scan_hash_ = 0;
  return chunk;
}

}  // namespace vault::cas
