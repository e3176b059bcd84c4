#include "replication/key_space.h"

#include <algorithm>

#include "storage/keys.h"

namespace vault::replication {
namespace {

const absl::uint128 kEnd = absl::MakeUint128(1, 0);  // 2^64: past the last prefix

uint64_t Prefix(const cas::Digest& d) { return storage::ParseBigEndian64(d.sha256().substr(0, 8)); }

}  // namespace

std::string KeySpan::start() const {
  return lo_ == 0 ? std::string() : storage::BigEndian64(absl::Uint128Low64(lo_));
}

std::string KeySpan::end() const {
  return hi_ >= kEnd ? std::string() : storage::BigEndian64(absl::Uint128Low64(hi_));
}

bool KeySpan::Contains(const cas::Digest& d) const {
  const absl::uint128 p = Prefix(d);
  return p >= lo_ && p < hi_;
}

std::vector<KeySpan> Split(const KeySpan& span, uint64_t parts) {
  const absl::uint128 width = span.width();
  absl::uint128 n = std::max<uint64_t>(parts, 1);
  if (n > width) n = width;
  const absl::uint128 base = width / n, extra = width % n;  // the first `extra` get one more
  std::vector<KeySpan> out;
  out.reserve(static_cast<size_t>(absl::Uint128Low64(n)));
  absl::uint128 lo = span.lo();
  for (absl::uint128 i = 0; i < n; ++i) {
    const absl::uint128 hi = lo + base + (i < extra ? 1 : 0);
    out.emplace_back(lo, hi);
    lo = hi;
  }
  return out;
}

uint64_t Fanout(uint64_t count, uint64_t target, uint64_t max_parts) {
  target = std::max<uint64_t>(target, 1);
  uint64_t parts = count / target + (count % target != 0 ? 1 : 0);
  return std::clamp<uint64_t>(parts, 2, std::max<uint64_t>(max_parts, 2));
}

ListDifference DiffSorted(absl::Span<const cas::Digest> ours,
                          absl::Span<const cas::Digest> theirs) {
  ListDifference out;
  size_t i = 0, j = 0;
  while (i < ours.size() || j < theirs.size()) {
    if (j == theirs.size()) {
      out.only_ours.push_back(ours[i++]);
    } else if (i == ours.size()) {
      out.only_theirs.push_back(theirs[j++]);
    } else if (ours[i] == theirs[j]) {
      ++i;
      ++j;
    } else if (ours[i].Key() < theirs[j].Key()) {
      out.only_ours.push_back(ours[i++]);
    } else {
      out.only_theirs.push_back(theirs[j++]);
    }
  }
  return out;
}

}  // namespace vault::replication
