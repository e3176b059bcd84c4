// audit/merkle: RFC 6962 / RFC 9162 Merkle tree hashing, proofs and their verification.
//
// The audit log's entries are the leaves of a Merkle tree (design §4): leaf hash
// SHA-256(0x00 || entry bytes), interior node SHA-256(0x01 || left || right), empty tree
// SHA-256(""). The log stores the hash of every *perfect* subtree (NodeId{level, index} covers
// leaves [index << level, (index + 1) << level)); any RFC 6962 subtree, proof element or root is a
// right fold of O(log n) of those, so proofs for any tree size cost O(log n) reads.
//
//   Frontier f;                                        // the right edge of the tree, O(log n)
//   f.Append(LeafHash(entry), [&](NodeId id, const Hash& h) { store.Put(id, h); });
//   Hash root = f.Root();
//
//   ProofPlan plan = InclusionProofPlan(index, size);  // which stored nodes a proof needs
//   VAULT_ASSIGN_OR_RETURN(std::vector<Hash> proof, BuildProof(plan, reader));
//   VAULT_RETURN_IF_ERROR(VerifyInclusion(index, size, LeafHash(entry), proof, root));
//
// Thread-safety: free functions are pure and thread-safe. A Frontier is a value; concurrent use of
// one Frontier needs external synchronization.
#ifndef VAULT_AUDIT_MERKLE_H_
#define VAULT_AUDIT_MERKLE_H_

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace vault::audit {

inline constexpr size_t kHashSize = 32;
using Hash = std::array<unsigned char, kHashSize>;

inline absl::string_view AsBytes(const Hash& h) {
  return absl::string_view(reinterpret_cast<const char*>(h.data()), h.size());
}
// INVALID_ARGUMENT unless `bytes` is exactly 32 bytes.
absl::StatusOr<Hash> HashFromBytes(absl::string_view bytes);
// Standard base64 (with padding) of the 32 bytes, as in checkpoints and JSON output.
std::string HashToBase64(const Hash& h);
// INVALID_ARGUMENT unless `text` is standard base64 of exactly 32 bytes.
absl::StatusOr<Hash> HashFromBase64(absl::string_view text);

Hash Sha256(absl::string_view data);
// SHA-256("") : the root of the empty tree.
Hash EmptyRoot();
// SHA-256(0x00 || leaf).
Hash LeafHash(absl::string_view leaf);
// SHA-256(0x01 || left || right).
Hash NodeHash(const Hash& left, const Hash& right);

// A perfect subtree: covers leaves [index << level, (index + 1) << level). Level 0 is a leaf.
struct NodeId {
  uint8_t level = 0;
  uint64_t index = 0;
  friend bool operator==(const NodeId& a, const NodeId& b) {
    return a.level == b.level && a.index == b.index;
  }
};

// The perfect subtrees that make up leaves [begin, end), left to right: the fewest aligned
// power-of-two blocks, growing from `begin` and then shrinking towards `end` (for a prefix
// [0, n), and for every subtree below, that is simply largest first); empty when begin >= end.
// The RFC 6962 hash of a subtree [begin, end) whose begin is a multiple of the largest power of
// two < (end - begin) (every subtree RFC 6962 ever hashes has this shape) is the right fold of
// their hashes: h = n[k-1]; for i = k-2 .. 0: h = NodeHash(n[i], h).
std::vector<NodeId> RangeNodes(uint64_t begin, uint64_t end);

// Reads stored perfect-subtree hashes, all at once (one batched read). NOT_FOUND / DATA_LOSS from
// the reader are passed through.
using NodeReader = std::function<absl::StatusOr<std::vector<Hash>>(absl::Span<const NodeId> nodes)>;

// A proof (or a root) as the list of leaf ranges whose subtree hashes form it, in proof order.
struct ProofPlan {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) each
};

// RFC 9162 §2.1.3.1 inclusion proof of leaf `index` in the tree of `size` leaves.
// INVALID_ARGUMENT when index >= size.
absl::StatusOr<ProofPlan> InclusionProofPlan(uint64_t index, uint64_t size);
// RFC 9162 §2.1.4.1 consistency proof between sizes size1 and size2.
// INVALID_ARGUMENT when size1 == 0 or size1 > size2 (size1 == size2 gives an empty proof).
absl::StatusOr<ProofPlan> ConsistencyProofPlan(uint64_t size1, uint64_t size2);
// The root of the tree of `size` leaves as a one-range plan ([0, size)); size 0 gives no ranges.
ProofPlan RootPlan(uint64_t size);
// Reads every node the plan needs with one call of `reader` and folds each range into its hash.
absl::StatusOr<std::vector<Hash>> BuildProof(const ProofPlan& plan, const NodeReader& reader);
// The root of the tree of `size` leaves (EmptyRoot() for 0), read through `reader`.
absl::StatusOr<Hash> RootAt(uint64_t size, const NodeReader& reader);

// Verification (RFC 9162 §2.1.3.2 and §2.1.4.2). Return OK, or UNAUTHENTICATED when the proof
// does not prove the claim ("inclusion proof does not match root", ...), or INVALID_ARGUMENT when
// the arguments cannot describe a valid proof (index >= size, size1 > size2, size1 == 0 even
// when size2 == 0, wrong proof length).
absl::Status VerifyInclusion(uint64_t index, uint64_t size, const Hash& leaf_hash,
                             absl::Span<const Hash> proof, const Hash& root);
absl::StatusOr<Hash> RootFromInclusionProof(uint64_t index, uint64_t size, const Hash& leaf_hash,
                                            absl::Span<const Hash> proof);
absl::Status VerifyConsistency(uint64_t size1, uint64_t size2, absl::Span<const Hash> proof,
                               const Hash& root1, const Hash& root2);

// The right edge of a growing tree: the hashes of the perfect subtrees that make up [0, size)
// (RangeNodes(0, size)), enough to append leaves and to compute the root.
class Frontier {
 public:
  Frontier() = default;  // the empty tree
  // The frontier of a tree of `size` leaves, read through `reader` (O(log size) nodes, one call).
  static absl::StatusOr<Frontier> Load(uint64_t size, const NodeReader& reader);
  // From the hashes of RangeNodes(0, size), in that order. INVALID_ARGUMENT on a wrong count.
  static absl::StatusOr<Frontier> FromNodes(uint64_t size, std::vector<Hash> nodes);

  uint64_t size() const { return size_; }
  // Appends one leaf. Calls `emit` for the leaf (level 0) and then for every perfect subtree the
  // leaf completes, lowest level first — exactly the nodes a store must add to hold every
  // perfect subtree of the grown tree.
  void Append(const Hash& leaf_hash, absl::FunctionRef<void(NodeId, const Hash&)> emit);
  // The RFC 6962 root of [0, size); EmptyRoot() when empty.
  Hash Root() const;
  // RangeNodes(0, size()) with their hashes, largest first.
  const std::vector<Hash>& nodes() const { return nodes_; }

 private:
  uint64_t size_ = 0;
  std::vector<Hash> nodes_;  // hashes of RangeNodes(0, size_), largest first
};

}  // namespace vault::audit

#endif  // VAULT_AUDIT_MERKLE_H_
