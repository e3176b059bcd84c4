// replication: the digest key space and its ranges, for anti-entropy (Reconciler).
//
// An object's store key is sha256 || size (40 bytes), so keys are spread uniformly by their
// first 8 bytes. A KeySpan is a half-open interval [lo, hi) of those 8-byte prefixes (hi up to
// 2^64): it holds exactly the keys whose prefix lies in it, and on the wire (Cas.RangeFingerprints)
// it is the key range [BigEndian64(lo), BigEndian64(hi)) with "" for the ends of the key space.
// Split cuts a span into nearly equal parts, so a range holding n objects splits into parts of
// about n / parts each.
//
//   KeySpan all = KeySpan::All();
//   for (const KeySpan& part : Split(all, 256)) { ... part.start(), part.end() ... }
//
// Thread-safety: values and pure functions.
#ifndef VAULT_REPLICATION_KEY_SPACE_H_
#define VAULT_REPLICATION_KEY_SPACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/types/span.h"
#include "cas/digest.h"

namespace vault::replication {

class KeySpan {
 public:
  // The whole key space.
  static KeySpan All() { return KeySpan(0, absl::MakeUint128(1, 0)); }
  // [lo, hi) of 8-byte prefixes; lo < hi <= 2^64.
  KeySpan(absl::uint128 lo, absl::uint128 hi) : lo_(lo), hi_(hi) {}

  absl::uint128 lo() const { return lo_; }
  absl::uint128 hi() const { return hi_; }
  // Prefixes in the span (at least 1).
  absl::uint128 width() const { return hi_ - lo_; }
  // The wire form: keys in [start(), end()); "" for the start and the end of the key space.
  std::string start() const;
  std::string end() const;
  bool Contains(const cas::Digest& d) const;

  friend bool operator==(const KeySpan& a, const KeySpan& b) {
    return a.lo_ == b.lo_ && a.hi_ == b.hi_;
  }

 private:
  absl::uint128 lo_;
  absl::uint128 hi_;
};

// `span` cut into min(parts, width) adjacent spans of nearly equal width (they differ by at most
// one prefix), in order, covering it exactly. parts 0 counts as 1.
std::vector<KeySpan> Split(const KeySpan& span, uint64_t parts);

// How many parts a differing range of `count` objects is cut into so that each part holds about
// `target` objects: ceil(count / target), at least 2 and at most `max_parts`.
uint64_t Fanout(uint64_t count, uint64_t target, uint64_t max_parts);

// The difference of two digest lists sorted by key (Digest::Key) without duplicates: what only
// `ours` holds and what only `theirs` holds, each in key order.
struct ListDifference {
  std::vector<cas::Digest> only_ours;
  std::vector<cas::Digest> only_theirs;
};
ListDifference DiffSorted(absl::Span<const cas::Digest> ours, absl::Span<const cas::Digest> theirs);

}  // namespace vault::replication

#endif  // VAULT_REPLICATION_KEY_SPACE_H_
