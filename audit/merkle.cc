// SHA256_Init/Update/Final are deprecated in OpenSSL 3 in favour of EVP, but EVP's per-digest
// bookkeeping (EVP_DigestInit_ex2 alone runs ~550 instructions, even on a reused context) is a
// large share of the small digests a Merkle tree computes: a leaf and, amortized, one node per
// entry. They remain in OpenSSL 3 and run the same SHA-256 code (SHA-NI where available).
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "audit/merkle.h"

#include <openssl/sha.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace vault::audit {
namespace {

// SHA-256(a || b), without concatenating them first.
Hash Digest2(const void* a, size_t a_size, const void* b, size_t b_size) {
  Hash out;
  SHA256_CTX ctx;
  if (SHA256_Init(&ctx) != 1 || SHA256_Update(&ctx, a, a_size) != 1 ||
      SHA256_Update(&ctx, b, b_size) != 1 || SHA256_Final(out.data(), &ctx) != 1) {
    std::abort();  // cannot fail for SHA-256 in memory
  }
  return out;
}

Hash Digest(const void* data, size_t size) { return Digest2(data, size, nullptr, 0); }

// The largest power of two strictly less than n (n >= 2): the size of the left subtree in
// RFC 6962's split of n leaves.
uint64_t SplitPoint(uint64_t n) { return std::bit_floor(n - 1); }

// The hash of the RFC 6962 subtree made of `hashes` (the nodes of RangeNodes, in that order):
// the right fold h = n[k-1]; h = NodeHash(n[i], h) for i = k-2 .. 0.
Hash RightFold(absl::Span<const Hash> hashes) {
  Hash h = hashes.back();
  for (size_t i = hashes.size() - 1; i-- > 0;) h = NodeHash(hashes[i], h);
  return h;
}

// Reads `ids` with exactly one call of `reader` and checks that it kept its side of the contract
// (one hash per id), so that callers can index the result without further checks.
absl::StatusOr<std::vector<Hash>> ReadNodes(absl::Span<const NodeId> ids,
                                            const NodeReader& reader) {
  if (ids.empty()) return std::vector<Hash>();
  VAULT_ASSIGN_OR_RETURN(std::vector<Hash> hashes, reader(ids));
  if (hashes.size() != ids.size()) {
    return absl::InternalError(
        absl::StrCat("node reader returned ", hashes.size(), " hashes for ", ids.size(), " nodes"));
  }
  return hashes;
}

// The number of hashes in an RFC 9162 inclusion proof of `index` in a tree of `size` leaves
// (index < size). Below the level where the leaf's path and the last leaf's path meet ("inner"
// levels: the bit length of index ^ (size - 1)) every level has a sibling. Above it the path runs
// along the tree's right edge, where only left siblings exist: one per set bit of the remaining
// index ("border" levels).
size_t InclusionProofSize(uint64_t index, uint64_t size) {
  const int inner = std::bit_width(index ^ (size - 1));
  const int border = std::popcount(inner >= 64 ? 0 : index >> inner);
  return static_cast<size_t>(inner + border);
}

// The number of hashes in an RFC 9162 consistency proof from size1 to size2
// (0 < size1 < size2): the inclusion proof of leaf size1 - 1 in the tree of size2, without the
// levels inside the largest perfect subtree that ends at size1 (countr_zero(size1) of them: the
// verifier starts from that subtree's hash), plus that subtree's hash as the proof's first
// element unless it is the whole old tree (size1 a power of two: the verifier starts from root1).
size_t ConsistencyProofSize(uint64_t size1, uint64_t size2) {
  const int shift = std::countr_zero(size1);
  const size_t inclusion = InclusionProofSize(size1 - 1, size2);
  const bool seeded_by_root1 = std::has_single_bit(size1);
  return inclusion - static_cast<size_t>(shift) + (seeded_by_root1 ? 0 : 1);
}

}  // namespace

// --- Encoding ----------------------------------------------------------------------------------

absl::StatusOr<Hash> HashFromBytes(absl::string_view bytes) {
  if (bytes.size() != kHashSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("hash must be ", kHashSize, " bytes, got ", bytes.size()));
  }
  Hash h;
  std::memcpy(h.data(), bytes.data(), kHashSize);
  return h;
}

std::string HashToBase64(const Hash& h) { return absl::Base64Escape(AsBytes(h)); }

absl::StatusOr<Hash> HashFromBase64(absl::string_view text) {
  std::string bytes;
  // absl::Base64Unescape is lenient (missing padding, stray bits in the last character). A hash
  // has exactly one standard encoding, so anything that does not re-encode to the input is
  // rejected: two spellings of one root must not both verify.
  if (!absl::Base64Unescape(text, &bytes) || bytes.size() != kHashSize ||
      absl::Base64Escape(bytes) != text) {
    return absl::InvalidArgumentError(
        absl::StrCat("not standard base64 of a ", kHashSize, "-byte hash: \"",
                     absl::CEscape(text.substr(0, 64)), text.size() > 64 ? "...\"" : "\""));
  }
  return HashFromBytes(bytes);
}

// --- Hashing -----------------------------------------------------------------------------------

Hash Sha256(absl::string_view data) { return Digest(data.data(), data.size()); }

Hash EmptyRoot() {
  static const Hash kEmpty = Sha256("");
  return kEmpty;
}

Hash LeafHash(absl::string_view leaf) {
  static constexpr unsigned char kLeafPrefix = 0x00;
  return Digest2(&kLeafPrefix, 1, leaf.data(), leaf.size());
}

Hash NodeHash(const Hash& left, const Hash& right) {
  // One contiguous buffer, one digest call: this is the hot path of appends and proofs.
  unsigned char buf[1 + 2 * kHashSize];
  buf[0] = 0x01;
  std::memcpy(buf + 1, left.data(), kHashSize);
  std::memcpy(buf + 1 + kHashSize, right.data(), kHashSize);
  return Digest(buf, sizeof(buf));
}

// --- Ranges and plans --------------------------------------------------------------------------

// The compact-range decomposition of [begin, end), left to right. From the left, each block is the
// largest aligned block starting at `begin` (its size is the lowest set bit of begin), so blocks
// grow; once the next aligned block would overshoot `end`, the rest is split by the binary digits
// of its length, largest first, so blocks shrink. For a prefix [0, n), and for every subtree that
// RFC 6962 hashes, the growing part is empty and the blocks are simply largest first. All
// arithmetic compares lengths (end - begin) rather than computing begin + block, which could wrap
// near 2^64.
std::vector<NodeId> RangeNodes(uint64_t begin, uint64_t end) {
  std::vector<NodeId> nodes;
  if (begin >= end) return nodes;
  // Growing part: aligned blocks at `begin` that still fit.
  while (begin != 0) {
    const int level = std::countr_zero(begin);
    const uint64_t block = uint64_t{1} << level;
    if (block > end - begin) break;
    nodes.push_back(NodeId{static_cast<uint8_t>(level), begin >> level});
    begin += block;
  }
  // Shrinking part: `begin` is now aligned to a power of two above end - begin (or is 0), so the
  // binary digits of the remaining length are aligned blocks.
  uint64_t rest = end - begin;
  while (rest != 0) {
    const int level = std::bit_width(rest) - 1;
    nodes.push_back(NodeId{static_cast<uint8_t>(level), begin >> level});
    const uint64_t block = uint64_t{1} << level;
    begin += block;
    rest -= block;
  }
  return nodes;
}

absl::StatusOr<ProofPlan> InclusionProofPlan(uint64_t index, uint64_t size) {
  if (index >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("leaf index ", index, " is not in a tree of size ", size));
  }
  // PATH(m, D[begin:end]) walks from the root down to the leaf; each step records the sibling
  // subtree. The proof lists siblings from the leaf up, so the walk's order is reversed at the end.
  ProofPlan plan;
  uint64_t begin = 0;
  uint64_t end = size;
  while (end - begin > 1) {
    const uint64_t mid = begin + SplitPoint(end - begin);
    if (index < mid) {
      plan.ranges.emplace_back(mid, end);
      end = mid;
    } else {
      plan.ranges.emplace_back(begin, mid);
      begin = mid;
    }
  }
  std::reverse(plan.ranges.begin(), plan.ranges.end());
  return plan;
}

absl::StatusOr<ProofPlan> ConsistencyProofPlan(uint64_t size1, uint64_t size2) {
  if (size1 == 0 || size1 > size2) {
    return absl::InvalidArgumentError(
        absl::StrCat("no consistency proof from size ", size1, " to size ", size2));
  }
  // SUBPROOF(m, D[begin:end], b) walks down from the root like PATH, recording siblings, until it
  // reaches a subtree that is exactly the old tree's part [begin, size1); that subtree is itself
  // part of the proof unless it is the whole old tree (b still true: the verifier has root1).
  // Elements come out root-first; the proof is leaf-first, hence the reverse.
  ProofPlan plan;
  uint64_t begin = 0;
  uint64_t end = size2;
  bool whole_old_tree = true;
  while (end != size1) {
    const uint64_t mid = begin + SplitPoint(end - begin);
    if (size1 <= mid) {
      plan.ranges.emplace_back(mid, end);
      end = mid;
    } else {
      plan.ranges.emplace_back(begin, mid);
      begin = mid;
      whole_old_tree = false;
    }
  }
  if (!whole_old_tree) plan.ranges.emplace_back(begin, end);
  std::reverse(plan.ranges.begin(), plan.ranges.end());
  return plan;
}

ProofPlan RootPlan(uint64_t size) {
  ProofPlan plan;
  if (size > 0) plan.ranges.emplace_back(0, size);
  return plan;
}

absl::StatusOr<std::vector<Hash>> BuildProof(const ProofPlan& plan, const NodeReader& reader) {
  // All ranges' nodes go into one batch; `firsts[i]` is where range i's nodes start in it.
  std::vector<NodeId> ids;
  std::vector<size_t> firsts;
  firsts.reserve(plan.ranges.size() + 1);
  for (const auto& [begin, end] : plan.ranges) {
    if (begin >= end) {
      return absl::InvalidArgumentError(
          absl::StrCat("proof plan has an empty range [", begin, ", ", end, ")"));
    }
    firsts.push_back(ids.size());
    std::vector<NodeId> nodes = RangeNodes(begin, end);
    ids.insert(ids.end(), nodes.begin(), nodes.end());
  }
  firsts.push_back(ids.size());
  VAULT_ASSIGN_OR_RETURN(std::vector<Hash> hashes, ReadNodes(ids, reader));
  std::vector<Hash> proof;
  proof.reserve(plan.ranges.size());
  for (size_t i = 0; i < plan.ranges.size(); ++i) {
    proof.push_back(
        RightFold(absl::MakeConstSpan(hashes).subspan(firsts[i], firsts[i + 1] - firsts[i])));
  }
  return proof;
}

absl::StatusOr<Hash> RootAt(uint64_t size, const NodeReader& reader) {
  if (size == 0) return EmptyRoot();
  VAULT_ASSIGN_OR_RETURN(std::vector<Hash> root, BuildProof(RootPlan(size), reader));
  return root.front();
}

// --- Verification ------------------------------------------------------------------------------

absl::StatusOr<Hash> RootFromInclusionProof(uint64_t index, uint64_t size, const Hash& leaf_hash,
                                            absl::Span<const Hash> proof) {
  if (index >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("leaf index ", index, " is not in a tree of size ", size));
  }
  if (const size_t want = InclusionProofSize(index, size); proof.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("inclusion proof of leaf ", index, " in size ",
                                                   size, " has ", proof.size(), " hashes, want ",
                                                   want));
  }
  // RFC 9162 §2.1.3.2, steps 2-4. fn is the leaf's position and sn the last leaf's position at
  // the current level; a proof hash is a left sibling when fn is a right child or when fn is the
  // last node of its level (fn == sn), in which case the levels where it has no sibling at all
  // are skipped.
  uint64_t fn = index;
  uint64_t sn = size - 1;
  Hash r = leaf_hash;
  for (const Hash& p : proof) {
    if (sn == 0) return absl::InvalidArgumentError("inclusion proof is too long");
    if ((fn & 1) != 0 || fn == sn) {
      r = NodeHash(p, r);
      while ((fn & 1) == 0 && fn != 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else {
      r = NodeHash(r, p);
    }
    fn >>= 1;
    sn >>= 1;
  }
  if (sn != 0) return absl::InvalidArgumentError("inclusion proof is too short");
  return r;
}

absl::Status VerifyInclusion(uint64_t index, uint64_t size, const Hash& leaf_hash,
                             absl::Span<const Hash> proof, const Hash& root) {
  VAULT_ASSIGN_OR_RETURN(Hash computed, RootFromInclusionProof(index, size, leaf_hash, proof));
  if (computed != root) {
    return absl::UnauthenticatedError(
        absl::StrCat("inclusion proof of leaf ", index, " in size ", size, " does not match root"));
  }
  return absl::OkStatus();
}

absl::Status VerifyConsistency(uint64_t size1, uint64_t size2, absl::Span<const Hash> proof,
                               const Hash& root1, const Hash& root2) {
  // An empty old tree is consistent with everything, so a "proof" from it proves nothing; like
  // transparency-dev/merkle (and RFC 9162, whose algorithm starts from 0 < size1), reject it
  // rather than let a caller believe it checked something.
  if (size1 == 0) {
    return absl::InvalidArgumentError("consistency proof from the empty tree proves nothing");
  }
  if (size1 > size2) {
    return absl::InvalidArgumentError(
        absl::StrCat("consistency proof from size ", size1, " to smaller size ", size2));
  }
  if (size1 == size2) {
    if (!proof.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "consistency proof between equal sizes must be empty, has ", proof.size(), " hashes"));
    }
    if (root1 != root2) {
      return absl::UnauthenticatedError(
          absl::StrCat("different roots for the same tree size ", size1));
    }
    return absl::OkStatus();
  }
  if (const size_t want = ConsistencyProofSize(size1, size2); proof.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("consistency proof from size ", size1,
                                                   " to size ", size2, " has ", proof.size(),
                                                   " hashes, want ", want));
  }
  // RFC 9162 §2.1.4.2. When size1 is a power of two the old tree is a single node the proof
  // omits; the verifier starts from root1 instead (step 2).
  const bool seeded_by_root1 = std::has_single_bit(size1);
  const Hash& seed = seeded_by_root1 ? root1 : proof.front();
  absl::Span<const Hash> rest = seeded_by_root1 ? proof : proof.subspan(1);
  // Steps 3-4: skip the levels inside the largest perfect subtree that ends at size1.
  uint64_t fn = size1 - 1;
  uint64_t sn = size2 - 1;
  while ((fn & 1) != 0) {
    fn >>= 1;
    sn >>= 1;
  }
  // Steps 5-6: fr rebuilds root1 from the left siblings only; sr rebuilds root2 from all of them.
  Hash fr = seed;
  Hash sr = seed;
  for (const Hash& c : rest) {
    if (sn == 0) return absl::InvalidArgumentError("consistency proof is too long");
    if ((fn & 1) != 0 || fn == sn) {
      fr = NodeHash(c, fr);
      sr = NodeHash(c, sr);
      while ((fn & 1) == 0 && fn != 0) {
        fn >>= 1;
        sn >>= 1;
      }
    } else {
      sr = NodeHash(sr, c);
    }
    fn >>= 1;
    sn >>= 1;
  }
  // Step 7.
  if (sn != 0) return absl::InvalidArgumentError("consistency proof is too short");
  if (fr != root1) {
    return absl::UnauthenticatedError(
        absl::StrCat("consistency proof from size ", size1, " does not match root1"));
  }
  if (sr != root2) {
    return absl::UnauthenticatedError(
        absl::StrCat("consistency proof to size ", size2, " does not match root2"));
  }
  return absl::OkStatus();
}

// --- Frontier ----------------------------------------------------------------------------------

absl::StatusOr<Frontier> Frontier::Load(uint64_t size, const NodeReader& reader) {
  const std::vector<NodeId> ids = RangeNodes(0, size);
  VAULT_ASSIGN_OR_RETURN(std::vector<Hash> hashes, ReadNodes(ids, reader));
  return FromNodes(size, std::move(hashes));
}

absl::StatusOr<Frontier> Frontier::FromNodes(uint64_t size, std::vector<Hash> nodes) {
  // RangeNodes(0, size) has one node per set bit of size.
  const size_t want = static_cast<size_t>(std::popcount(size));
  if (nodes.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("frontier of size ", size, " needs ", want, " nodes, got ", nodes.size()));
  }
  Frontier f;
  f.size_ = size;
  f.nodes_ = std::move(nodes);
  return f;
}

void Frontier::Append(const Hash& leaf_hash, absl::FunctionRef<void(NodeId, const Hash&)> emit) {
  // A tree of 2^64 leaves cannot be described by uint64 sizes; reaching it means a corrupt size.
  if (size_ == std::numeric_limits<uint64_t>::max()) std::abort();
  const uint64_t index = size_;
  emit(NodeId{0, index}, leaf_hash);
  // Like incrementing a binary counter: every trailing 1 bit of the old size is a perfect subtree
  // on the right edge that the new leaf's subtree completes. Merging them is amortized O(1)
  // hashes per leaf.
  Hash h = leaf_hash;
  int level = 0;
  while (((index >> level) & 1) != 0) {
    h = NodeHash(nodes_.back(), h);
    nodes_.pop_back();
    ++level;
    emit(NodeId{static_cast<uint8_t>(level), index >> level}, h);
  }
  nodes_.push_back(h);
  size_ = index + 1;
}

Hash Frontier::Root() const {
  if (nodes_.empty()) return EmptyRoot();
  return RightFold(nodes_);
}

}  // namespace vault::audit
