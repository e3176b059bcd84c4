// cas: content-defined chunking (FastCDC, with normalized chunking) of large objects.
//
// Boundaries depend only on content, so an insertion early in a file moves few boundaries and
// identical regions of different objects produce identical chunks (stored once). After a cut the
// chunker restarts from scratch, so chunking resumed at a chunk boundary gives the same chunks
// as an uninterrupted pass: this is what makes uploads resumable.
//
//   Chunker chunker(ChunkerParams::ForAverage(512 << 10));
//   chunker.Append(data);
//   while (auto chunk = chunker.Next(/*eof=*/false)) Store(*chunk);
//   ... at the end: while (auto chunk = chunker.Next(/*eof=*/true)) Store(*chunk);
//
// Thread-safety: a Chunker must not be shared between threads. FindBoundary is pure.
#ifndef VAULT_CAS_CHUNKER_H_
#define VAULT_CAS_CHUNKER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vault::cas {

struct ChunkerParams {
  size_t min_size;
  size_t avg_size;
  size_t max_size;
  // avg must be a power of two in [64 KiB, 4 MiB]; min = avg / 4, max = avg * 4.
  static absl::StatusOr<ChunkerParams> ForAverage(size_t avg_size);
};

// Length of the first chunk of `data`: a content-defined boundary in (min, max], or
// data.size() when `data` is shorter than max and no boundary is found (the caller decides
// whether more data may follow), or max.
size_t FindBoundary(absl::string_view data, const ChunkerParams& params);

class Chunker {
 public:
  explicit Chunker(const ChunkerParams& params) : params_(params) {}

  void Append(absl::string_view data) { buffer_.append(data.data(), data.size()); }
  // The next complete chunk, if one is known. With eof, the remaining bytes end the last chunk.
  std::optional<std::string> Next(bool eof);
  size_t buffered() const { return buffer_.size() - consumed_; }
  // Every buffered byte as one chunk, wherever content would cut (for a boundary the caller
  // knows); the chunker starts afresh after it.
  std::string TakeAll();

 private:
  const ChunkerParams params_;
  std::string buffer_;
  size_t consumed_ = 0;
  // Of the pending bytes, [min_size, scanned_) were hashed without finding a boundary, leaving
  // the gear hash at scan_hash_.
  size_t scanned_ = 0;
  uint64_t scan_hash_ = 0;
};

}  // namespace vault::cas

#endif  // VAULT_CAS_CHUNKER_H_
