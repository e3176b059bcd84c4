#include "audit/merkle.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::audit {
namespace {

using ::testing::ElementsAreArray;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
// Every (index, size) and (size1, size2) up to this size is checked against the reference.
constexpr uint64_t kMaxSize = 70;

Hash FromHex(absl::string_view hex) {
  absl::StatusOr<Hash> h = HashFromBytes(absl::HexStringToBytes(hex));
  EXPECT_TRUE(h.ok()) << hex;
  return h.ok() ? *h : Hash{};
}

std::vector<Hash> FromHex(const std::vector<absl::string_view>& hexes) {
  std::vector<Hash> out;
  for (absl::string_view hex : hexes) out.push_back(FromHex(hex));
  return out;
}

std::string Hex(const Hash& h) { return absl::BytesToHexString(AsBytes(h)); }

Hash FlipBit(Hash h, size_t bit) {
  h[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
  return h;
}

// --- Known answers (transcribed.json: rfc6962_hasher_kats, reference_tree_8_leaves) -------------

constexpr absl::string_view kEmptyRootHex =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
constexpr absl::string_view kEmptyLeafHex =
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d";
constexpr absl::string_view kLeafL123456Hex =
    "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56";
constexpr absl::string_view kChildrenN123N456Hex =
    "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb";

constexpr absl::string_view kReferenceLeavesHex[] = {
    "",
    "00",
    "10",
    "2021",
    "3031",
    "40414243",
    "5051525354555657",
    "606162636465666768696a6b6c6d6e6f",
};

// node_hashes_by_level: level k index i = MTH(D[i*2^k:(i+1)*2^k]).
const std::vector<std::vector<absl::string_view>> kReferenceNodesHex = {
    {
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
        "07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7",
        "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
        "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
        "46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1",
    },
    {
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
    },
    {
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
    },
    {
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    },
};

// root_by_tree_size, sizes 0..8.
constexpr absl::string_view kReferenceRootsHex[] = {
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
};

struct InclusionKat {
  uint64_t index;
  uint64_t size;
  absl::string_view leaf_hash;
  absl::string_view root;
  std::vector<absl::string_view> proof;
};
const InclusionKat kInclusionKats[] = {
    {0,
     1,
     "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
     "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
     {}},
    {0,
     8,
     "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
     "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
     {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
      "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
      "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
    {5,
     8,
     "4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658",
     "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
     {"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
      "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
      "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
    {2,
     3,
     "0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7",
     "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
     {"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"}},
    {1,
     5,
     "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
     "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
     {"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
      "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
      "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
};

struct ConsistencyKat {
  uint64_t size1;
  uint64_t size2;
  absl::string_view root1;
  absl::string_view root2;
  std::vector<absl::string_view> proof;
};
const ConsistencyKat kConsistencyKats[] = {
    {1,
     1,
     "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
     "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
     {}},
    {1,
     8,
     "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
     "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
     {"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
      "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
      "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
    {6,
     8,
     "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
     "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
     {"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
      "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
      "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
    {2,
     5,
     "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
     "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
     {"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
      "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
    {6,
     7,
     "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
     "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
     {"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
      "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
      "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
};

// --- A naive RFC 6962 / RFC 9162 reference, written straight from the RFC's recursive definitions
// (MTH, PATH, SUBPROOF) and sharing no code with merkle.cc beyond SHA-256. ----------------------

Hash RefNode(const Hash& left, const Hash& right) {
  return Sha256(absl::StrCat(std::string(1, '\x01'), AsBytes(left), AsBytes(right)));
}

// The largest power of two strictly less than n (n >= 2).
uint64_t RefSplit(uint64_t n) {
  uint64_t k = 1;
  while (k < n - k) k *= 2;  // k * 2 < n, without wrapping for n near 2^64
  return k;
}

// MTH over leaf hashes.
Hash RefMth(absl::Span<const Hash> leaves) {
  if (leaves.empty()) return Sha256("");
  if (leaves.size() == 1) return leaves[0];
  const uint64_t k = RefSplit(leaves.size());
  return RefNode(RefMth(leaves.subspan(0, k)), RefMth(leaves.subspan(k)));
}

std::vector<Hash> RefPath(uint64_t m, absl::Span<const Hash> leaves) {
  if (leaves.size() <= 1) return {};
  const uint64_t k = RefSplit(leaves.size());
  std::vector<Hash> path;
  if (m < k) {
    path = RefPath(m, leaves.subspan(0, k));
    path.push_back(RefMth(leaves.subspan(k)));
  } else {
    path = RefPath(m - k, leaves.subspan(k));
    path.push_back(RefMth(leaves.subspan(0, k)));
  }
  return path;
}

std::vector<Hash> RefSubproof(uint64_t m, absl::Span<const Hash> leaves, bool b) {
  const uint64_t n = leaves.size();
  if (m == n) return b ? std::vector<Hash>{} : std::vector<Hash>{RefMth(leaves)};
  const uint64_t k = RefSplit(n);
  std::vector<Hash> proof;
  if (m <= k) {
    proof = RefSubproof(m, leaves.subspan(0, k), b);
    proof.push_back(RefMth(leaves.subspan(k)));
  } else {
    proof = RefSubproof(m - k, leaves.subspan(k), false);
    proof.push_back(RefMth(leaves.subspan(0, k)));
  }
  return proof;
}

// Reference verifiers: PATH and SUBPROOF run backwards. Each level of the recursion consumes the
// proof's last hash (the sibling nearest the root); the base case consumes what remains. They
// return INVALID_ARGUMENT for a proof of the wrong length and UNAUTHENTICATED for a mismatch, the
// contract of VerifyInclusion / VerifyConsistency.
absl::StatusOr<Hash> RefRootFromPath(uint64_t m, uint64_t n, const Hash& leaf,
                                     absl::Span<const Hash> proof) {
  if (n == 1) {
    if (!proof.empty()) return absl::InvalidArgumentError("proof too long");
    return leaf;
  }
  if (proof.empty()) return absl::InvalidArgumentError("proof too short");
  const Hash& last = proof.back();
  const uint64_t k = RefSplit(n);
  const auto rest = proof.subspan(0, proof.size() - 1);
  if (m < k) {
    absl::StatusOr<Hash> r = RefRootFromPath(m, k, leaf, rest);
    if (!r.ok()) return r;
    return RefNode(*r, last);
  }
  absl::StatusOr<Hash> r = RefRootFromPath(m - k, n - k, leaf, rest);
  if (!r.ok()) return r;
  return RefNode(last, *r);
}

absl::Status RefVerifyInclusion(uint64_t index, uint64_t size, const Hash& leaf,
                                absl::Span<const Hash> proof, const Hash& root) {
  if (index >= size) return absl::InvalidArgumentError("index out of range");
  absl::StatusOr<Hash> r = RefRootFromPath(index, size, leaf, proof);
  if (!r.ok()) return r.status();
  return *r == root ? absl::OkStatus() : absl::UnauthenticatedError("mismatch");
}

// The (old, new) subtree hashes that a consistency proof for SUBPROOF(m, D[n], b) rebuilds.
absl::StatusOr<std::pair<Hash, Hash>> RefRootsFromSubproof(uint64_t m, uint64_t n, bool b,
                                                           absl::Span<const Hash> proof,
                                                           const Hash& root1) {
  if (m == n) {
    if (b) {
      if (!proof.empty()) return absl::InvalidArgumentError("proof too long");
      return std::make_pair(root1, root1);
    }
    if (proof.size() != 1) return absl::InvalidArgumentError("proof length");
    return std::make_pair(proof[0], proof[0]);
  }
  if (proof.empty()) return absl::InvalidArgumentError("proof too short");
  const Hash& last = proof.back();
  const uint64_t k = RefSplit(n);
  const auto rest = proof.subspan(0, proof.size() - 1);
  if (m <= k) {
    absl::StatusOr<std::pair<Hash, Hash>> r = RefRootsFromSubproof(m, k, b, rest, root1);
    if (!r.ok()) return r;
    return std::make_pair(r->first, RefNode(r->second, last));
  }
  absl::StatusOr<std::pair<Hash, Hash>> r = RefRootsFromSubproof(m - k, n - k, false, rest, root1);
  if (!r.ok()) return r;
  return std::make_pair(RefNode(last, r->first), RefNode(last, r->second));
}

absl::Status RefVerifyConsistency(uint64_t size1, uint64_t size2, absl::Span<const Hash> proof,
                                  const Hash& root1, const Hash& root2) {
  if (size1 == 0 || size1 > size2) return absl::InvalidArgumentError("sizes");
  absl::StatusOr<std::pair<Hash, Hash>> r = RefRootsFromSubproof(size1, size2, true, proof, root1);
  if (!r.ok()) return r.status();
  return r->first == root1 && r->second == root2 ? absl::OkStatus()
                                                 : absl::UnauthenticatedError("mismatch");
}

// Leaf hashes: the 8 reference leaves, then "leaf <i>".
std::vector<Hash> TestLeaves(uint64_t n) {
  std::vector<Hash> leaves;
  for (uint64_t i = 0; i < n; ++i) {
    leaves.push_back(i < 8 ? LeafHash(absl::HexStringToBytes(kReferenceLeavesHex[i]))
                           : LeafHash(absl::StrCat("leaf ", i)));
  }
  return leaves;
}

// An in-memory node store: a NodeReader that counts its calls and the nodes it was asked for.
class MemStore {
 public:
  MemStore() = default;
  // Every perfect subtree of `leaves`, computed by the reference.
  explicit MemStore(absl::Span<const Hash> leaves) {
    for (int level = 0; (uint64_t{1} << level) <= leaves.size(); ++level) {
      const uint64_t width = uint64_t{1} << level;
      for (uint64_t index = 0; (index + 1) * width <= leaves.size(); ++index) {
        Put(NodeId{static_cast<uint8_t>(level), index},
            RefMth(leaves.subspan(index * width, width)));
      }
    }
  }

  void Put(NodeId id, const Hash& h) { nodes_[{id.level, id.index}] = h; }
  void Erase(NodeId id) { nodes_.erase({id.level, id.index}); }
  const std::map<std::pair<int, uint64_t>, Hash>& nodes() const { return nodes_; }
  int calls() const { return calls_; }
  size_t nodes_read() const { return nodes_read_; }

  NodeReader Reader() {
    return [this](absl::Span<const NodeId> ids) -> absl::StatusOr<std::vector<Hash>> {
      ++calls_;
      nodes_read_ += ids.size();
      std::vector<Hash> out;
      for (const NodeId& id : ids) {
        auto it = nodes_.find({id.level, id.index});
        if (it == nodes_.end()) {
          return absl::NotFoundError(absl::StrCat("node ", int{id.level}, "/", id.index));
        }
        out.push_back(it->second);
      }
      return out;
    };
  }

 private:
  std::map<std::pair<int, uint64_t>, Hash> nodes_;
  int calls_ = 0;
  size_t nodes_read_ = 0;
};

// A reader for astronomically large trees: any node, distinct made-up hashes.
NodeReader FakeReader(int* calls, size_t* nodes_read) {
  return [calls, nodes_read](absl::Span<const NodeId> ids) -> absl::StatusOr<std::vector<Hash>> {
    ++*calls;
    *nodes_read += ids.size();
    std::vector<Hash> out;
    for (const NodeId& id : ids) out.push_back(Sha256(absl::StrCat(int{id.level}, "/", id.index)));
    return out;
  };
}

// --- Encoding and hashing ----------------------------------------------------------------------

TEST(MerkleHashTest, HasherKnownAnswers) {
  EXPECT_EQ(Hex(EmptyRoot()), kEmptyRootHex);
  EXPECT_EQ(Hex(Sha256("")), kEmptyRootHex);
  EXPECT_EQ(Hex(LeafHash("")), kEmptyLeafHex);
  EXPECT_EQ(Hex(LeafHash("L123456")), kLeafL123456Hex);
  // The KAT hashes raw 4-byte children, which NodeHash (32-byte children only) cannot take; it
  // pins the 0x01 prefix, and NodeHash must be exactly that construction.
  EXPECT_EQ(Hex(Sha256(absl::StrCat(std::string(1, '\x01'), "N123", "N456"))),
            kChildrenN123N456Hex);
  const Hash l = LeafHash("l");
  const Hash r = LeafHash("r");
  EXPECT_EQ(NodeHash(l, r), RefNode(l, r));
  EXPECT_NE(NodeHash(l, r), NodeHash(r, l));
}

TEST(MerkleHashTest, Base64RoundTripAndStrictness) {
  const Hash h = LeafHash("x");
  const std::string b64 = HashToBase64(h);
  EXPECT_EQ(b64, absl::Base64Escape(AsBytes(h)));
  EXPECT_THAT(b64, SizeIs(44));
  absl::StatusOr<Hash> back = HashFromBase64(b64);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, h);
  EXPECT_EQ(HashFromBase64("bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=").value(),
            FromHex(kEmptyLeafHex));

  const std::string short31 = absl::Base64Escape(std::string(31, 'a'));
  const std::string long33 = absl::Base64Escape(std::string(33, 'a'));
  for (const std::string& bad : {std::string(), short31, long33, b64.substr(0, 43),  // no padding
                                 b64 + "=", " " + b64, b64 + "\n", std::string("ZG9uJ3QgY2FyZSAy"),
                                 b64.substr(0, 42) + "B=",  // non-zero trailing bits
                                 std::string(44, '*')}) {
    EXPECT_EQ(HashFromBase64(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }

  EXPECT_EQ(HashFromBytes(AsBytes(h)).value(), h);
  EXPECT_EQ(HashFromBytes(std::string(31, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HashFromBytes(std::string(33, 'a')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HashFromBytes("").status().code(), absl::StatusCode::kInvalidArgument);
}

// --- RangeNodes ---------------------------------------------------------------------------------

// The canonical decomposition, found greedily: at each position the largest aligned block that
// fits.
std::vector<NodeId> GreedyRangeNodes(uint64_t begin, uint64_t end) {
  std::vector<NodeId> out;
  while (begin < end) {
    int level = 0;
    while (level < 63 && begin % (uint64_t{2} << level) == 0 &&
           (uint64_t{2} << level) <= end - begin) {
      ++level;
    }
    out.push_back(NodeId{static_cast<uint8_t>(level), begin >> level});
    begin += uint64_t{1} << level;
  }
  return out;
}

Hash FoldFromStore(const std::vector<NodeId>& ids, const MemStore& store) {
  Hash h = store.nodes().at({ids.back().level, ids.back().index});
  for (size_t i = ids.size() - 1; i-- > 0;) {
    h = NodeHash(store.nodes().at({ids[i].level, ids[i].index}), h);
  }
  return h;
}

// Every node [begin, end) of the RFC 6962 tree over [begin, end), root included.
void CollectRfcNodes(uint64_t begin, uint64_t end,
                     std::vector<std::pair<uint64_t, uint64_t>>* out) {
  out->emplace_back(begin, end);
  if (end - begin <= 1) return;
  const uint64_t mid = begin + RefSplit(end - begin);
  CollectRfcNodes(begin, mid, out);
  CollectRfcNodes(mid, end, out);
}

TEST(RangeNodesTest, IsTheCompactRangeOfEveryRange) {
  for (uint64_t begin = 0; begin <= kMaxSize; ++begin) {
    for (uint64_t end = begin; end <= kMaxSize; ++end) {
      const std::vector<NodeId> nodes = RangeNodes(begin, end);
      ASSERT_THAT(nodes, ElementsAreArray(GreedyRangeNodes(begin, end)))
          << "[" << begin << ", " << end << ")";
      // Contiguous, aligned, and first growing then shrinking.
      uint64_t at = begin;
      bool shrinking = false;
      for (size_t i = 0; i < nodes.size(); ++i) {
        EXPECT_EQ(nodes[i].index << nodes[i].level, at);
        at += uint64_t{1} << nodes[i].level;
        if (i > 0 && nodes[i].level < nodes[i - 1].level) shrinking = true;
        if (i > 0 && shrinking) {
          EXPECT_LT(nodes[i].level, nodes[i - 1].level);
        }
      }
      EXPECT_EQ(at, end);
    }
  }
  EXPECT_THAT(RangeNodes(5, 3), IsEmpty());
}

TEST(RangeNodesTest, RightFoldIsTheRfc6962HashOfEverySubtree) {
  const std::vector<Hash> leaves = TestLeaves(kMaxSize);
  const MemStore store(leaves);
  auto check = [&](uint64_t begin, uint64_t end) {
    const Hash want = RefMth(absl::MakeConstSpan(leaves).subspan(begin, end - begin));
    EXPECT_EQ(FoldFromStore(RangeNodes(begin, end), store), want)
        << "[" << begin << ", " << end << ")";
  };
  // Every node of every tree of size <= kMaxSize (prefixes [0, n) are the roots).
  for (uint64_t size = 1; size <= kMaxSize; ++size) {
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    CollectRfcNodes(0, size, &ranges);
    for (const auto& [begin, end] : ranges) check(begin, end);
  }
  // Every range the header promises: begin a multiple of the largest power of two < end - begin.
  for (uint64_t begin = 0; begin < kMaxSize; ++begin) {
    for (uint64_t end = begin + 1; end <= kMaxSize; ++end) {
      if (end - begin == 1 || begin % RefSplit(end - begin) == 0) check(begin, end);
    }
  }
}

TEST(RangeNodesTest, ExtremeRanges) {
  std::vector<NodeId> all = RangeNodes(0, kMax);
  ASSERT_THAT(all, SizeIs(64));
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(all[i], (NodeId{static_cast<uint8_t>(63 - i), i == 0 ? 0 : (kMax >> (63 - i)) - 1}))
        << i;
  }
  EXPECT_THAT(RangeNodes(kMax - 1, kMax), ElementsAreArray({NodeId{0, kMax - 1}}));
  EXPECT_THAT(RangeNodes(uint64_t{1} << 63, kMax), SizeIs(63));
  EXPECT_THAT(RangeNodes(1, kMax), SizeIs(126));  // 63 growing, then 63 shrinking
  EXPECT_THAT(RangeNodes(1, kMax), ElementsAreArray(GreedyRangeNodes(1, kMax)));
  EXPECT_THAT(RangeNodes(kMax, kMax), IsEmpty());
}

// --- Proof plans and BuildProof against the reference -------------------------------------------

TEST(ProofPlanTest, RootsOfTheReferenceTree) {
  const std::vector<Hash> leaves = TestLeaves(8);
  MemStore store(leaves);
  for (uint64_t size = 0; size <= 8; ++size) {
    const int calls_before = store.calls();
    absl::StatusOr<Hash> root = RootAt(size, store.Reader());
    ASSERT_TRUE(root.ok()) << root.status();
    EXPECT_EQ(Hex(*root), kReferenceRootsHex[size]) << size;
    EXPECT_EQ(Hex(RefMth(absl::MakeConstSpan(leaves).subspan(0, size))), kReferenceRootsHex[size]);
    EXPECT_EQ(store.calls() - calls_before, size == 0 ? 0 : 1);
  }
  for (size_t level = 0; level < kReferenceNodesHex.size(); ++level) {
    for (size_t index = 0; index < kReferenceNodesHex[level].size(); ++index) {
      EXPECT_EQ(Hex(store.nodes().at({static_cast<int>(level), index})),
                kReferenceNodesHex[level][index])
          << level << "/" << index;
    }
  }
  EXPECT_THAT(RootPlan(0).ranges, IsEmpty());
  EXPECT_THAT(RootPlan(5).ranges, ElementsAreArray({std::pair<uint64_t, uint64_t>{0, 5}}));
}

TEST(ProofPlanTest, ReferenceProofs) {
  MemStore store(TestLeaves(8));
  for (const InclusionKat& kat : kInclusionKats) {
    SCOPED_TRACE(absl::StrCat("inclusion ", kat.index, " in ", kat.size));
    absl::StatusOr<ProofPlan> plan = InclusionProofPlan(kat.index, kat.size);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<std::vector<Hash>> proof = BuildProof(*plan, store.Reader());
    ASSERT_TRUE(proof.ok()) << proof.status();
    EXPECT_THAT(*proof, ElementsAreArray(FromHex(kat.proof)));
    EXPECT_TRUE(VerifyInclusion(kat.index, kat.size, FromHex(kat.leaf_hash), FromHex(kat.proof),
                                FromHex(kat.root))
                    .ok());
  }
  for (const ConsistencyKat& kat : kConsistencyKats) {
    SCOPED_TRACE(absl::StrCat("consistency ", kat.size1, " to ", kat.size2));
    absl::StatusOr<ProofPlan> plan = ConsistencyProofPlan(kat.size1, kat.size2);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<std::vector<Hash>> proof = BuildProof(*plan, store.Reader());
    ASSERT_TRUE(proof.ok()) << proof.status();
    EXPECT_THAT(*proof, ElementsAreArray(FromHex(kat.proof)));
    EXPECT_TRUE(VerifyConsistency(kat.size1, kat.size2, FromHex(kat.proof), FromHex(kat.root1),
                                  FromHex(kat.root2))
                    .ok());
  }
}

// Every single-bit flip of the reference proofs, leaves and roots is rejected as UNAUTHENTICATED.
TEST(ProofPlanTest, ReferenceProofsRejectEveryBitFlip) {
  for (const InclusionKat& kat : kInclusionKats) {
    const std::vector<Hash> proof = FromHex(kat.proof);
    const Hash leaf = FromHex(kat.leaf_hash);
    const Hash root = FromHex(kat.root);
    for (size_t bit = 0; bit < 8 * kHashSize; ++bit) {
      for (size_t i = 0; i < proof.size(); ++i) {
        std::vector<Hash> bad = proof;
        bad[i] = FlipBit(bad[i], bit);
        EXPECT_EQ(VerifyInclusion(kat.index, kat.size, leaf, bad, root).code(),
                  absl::StatusCode::kUnauthenticated);
      }
      EXPECT_EQ(VerifyInclusion(kat.index, kat.size, FlipBit(leaf, bit), proof, root).code(),
                absl::StatusCode::kUnauthenticated);
      EXPECT_EQ(VerifyInclusion(kat.index, kat.size, leaf, proof, FlipBit(root, bit)).code(),
                absl::StatusCode::kUnauthenticated);
    }
  }
  for (const ConsistencyKat& kat : kConsistencyKats) {
    const std::vector<Hash> proof = FromHex(kat.proof);
    const Hash root1 = FromHex(kat.root1);
    const Hash root2 = FromHex(kat.root2);
    for (size_t bit = 0; bit < 8 * kHashSize; ++bit) {
      for (size_t i = 0; i < proof.size(); ++i) {
        std::vector<Hash> bad = proof;
        bad[i] = FlipBit(bad[i], bit);
        EXPECT_EQ(VerifyConsistency(kat.size1, kat.size2, bad, root1, root2).code(),
                  absl::StatusCode::kUnauthenticated);
      }
      EXPECT_EQ(VerifyConsistency(kat.size1, kat.size2, proof, FlipBit(root1, bit), root2).code(),
                absl::StatusCode::kUnauthenticated);
      EXPECT_EQ(VerifyConsistency(kat.size1, kat.size2, proof, root1, FlipBit(root2, bit)).code(),
                absl::StatusCode::kUnauthenticated);
    }
  }
}

// A few bits of every byte position class: first and last bit of the hash plus two that move.
std::vector<size_t> SampleBits(uint64_t salt) {
  return {0, 8 * kHashSize - 1, (salt * 37) % (8 * kHashSize), (salt * 101 + 13) % (8 * kHashSize)};
}

TEST(ProofPlanTest, InclusionMatchesReferenceForAllSmallTrees) {
  // Twice kMaxSize: the reference also gives proof lengths for wrong (doubled) sizes.
  const std::vector<Hash> leaves = TestLeaves(2 * kMaxSize + 1);
  MemStore store(leaves);
  const auto all = absl::MakeConstSpan(leaves);
  for (uint64_t size = 1; size <= kMaxSize; ++size) {
    const Hash root = RefMth(all.subspan(0, size));
    for (uint64_t index = 0; index < size; ++index) {
      SCOPED_TRACE(absl::StrCat("leaf ", index, " in size ", size));
      const std::vector<Hash> want = RefPath(index, all.subspan(0, size));
      absl::StatusOr<ProofPlan> plan = InclusionProofPlan(index, size);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const int calls = store.calls();
      const size_t read = store.nodes_read();
      absl::StatusOr<std::vector<Hash>> proof = BuildProof(*plan, store.Reader());
      ASSERT_TRUE(proof.ok()) << proof.status();
      ASSERT_THAT(*proof, ElementsAreArray(want));
      EXPECT_EQ(store.calls() - calls, want.empty() ? 0 : 1);
      EXPECT_LE(store.nodes_read() - read, 2 * static_cast<size_t>(std::bit_width(size)));

      const Hash leaf = leaves[index];
      ASSERT_TRUE(VerifyInclusion(index, size, leaf, want, root).ok());
      absl::StatusOr<Hash> computed = RootFromInclusionProof(index, size, leaf, want);
      ASSERT_TRUE(computed.ok());
      EXPECT_EQ(*computed, root);

      for (size_t i = 0; i < want.size(); ++i) {
        for (size_t bit : SampleBits(index * kMaxSize + size + i)) {
          std::vector<Hash> bad = want;
          bad[i] = FlipBit(bad[i], bit);
          EXPECT_EQ(VerifyInclusion(index, size, leaf, bad, root).code(),
                    absl::StatusCode::kUnauthenticated);
        }
      }
      for (size_t bit : SampleBits(index + size)) {
        EXPECT_EQ(VerifyInclusion(index, size, FlipBit(leaf, bit), want, root).code(),
                  absl::StatusCode::kUnauthenticated);
        EXPECT_EQ(VerifyInclusion(index, size, leaf, want, FlipBit(root, bit)).code(),
                  absl::StatusCode::kUnauthenticated);
      }
      // Another leaf's hash at this index.
      EXPECT_EQ(VerifyInclusion(index, size, leaves[size], want, root).code(),
                absl::StatusCode::kUnauthenticated);
      // A wrong size or index: the verdict (and code) of the reference verifier. This is not
      // always a rejection: an inclusion proof does not bind the tree size by itself (see
      // ProofsDoNotBindTheSizeOnTheirOwn), only a proof of a different shape is rejected.
      for (uint64_t wrong_size : {size - 1, size + 1, size * 2, size / 2}) {
        EXPECT_EQ(VerifyInclusion(index, wrong_size, leaf, want, root).code(),
                  RefVerifyInclusion(index, wrong_size, leaf, want, root).code())
            << "size " << wrong_size;
      }
      for (uint64_t wrong_index : {index - 1, index + 1, index ^ 2, kMax}) {
        absl::Status s = VerifyInclusion(wrong_index, size, leaf, want, root);
        EXPECT_EQ(s.code(), RefVerifyInclusion(wrong_index, size, leaf, want, root).code())
            << "index " << wrong_index;
        EXPECT_FALSE(s.ok()) << "index " << wrong_index;  // the position is bound
      }
      // Truncated and extended proofs.
      if (!want.empty()) {
        std::vector<Hash> truncated(want.begin(), want.end() - 1);
        EXPECT_EQ(VerifyInclusion(index, size, leaf, truncated, root).code(),
                  absl::StatusCode::kInvalidArgument);
        std::vector<Hash> dropped_first(want.begin() + 1, want.end());
        EXPECT_EQ(VerifyInclusion(index, size, leaf, dropped_first, root).code(),
                  absl::StatusCode::kInvalidArgument);
      }
      std::vector<Hash> extended = want;
      extended.push_back(root);
      EXPECT_EQ(VerifyInclusion(index, size, leaf, extended, root).code(),
                absl::StatusCode::kInvalidArgument);
      std::vector<Hash> prepended = want;
      prepended.insert(prepended.begin(), leaf);
      EXPECT_EQ(VerifyInclusion(index, size, leaf, prepended, root).code(),
                absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(ProofPlanTest, ConsistencyMatchesReferenceForAllSmallTrees) {
  const std::vector<Hash> leaves = TestLeaves(2 * kMaxSize + 1);
  MemStore store(leaves);
  const auto all = absl::MakeConstSpan(leaves);
  std::vector<Hash> roots;
  for (uint64_t size = 0; size <= kMaxSize; ++size) roots.push_back(RefMth(all.subspan(0, size)));
  for (uint64_t size2 = 1; size2 <= kMaxSize; ++size2) {
    for (uint64_t size1 = 1; size1 <= size2; ++size1) {
      SCOPED_TRACE(absl::StrCat("consistency ", size1, " to ", size2));
      const std::vector<Hash> want = RefSubproof(size1, all.subspan(0, size2), true);
      absl::StatusOr<ProofPlan> plan = ConsistencyProofPlan(size1, size2);
      ASSERT_TRUE(plan.ok()) << plan.status();
      const int calls = store.calls();
      const size_t read = store.nodes_read();
      absl::StatusOr<std::vector<Hash>> proof = BuildProof(*plan, store.Reader());
      ASSERT_TRUE(proof.ok()) << proof.status();
      ASSERT_THAT(*proof, ElementsAreArray(want));
      EXPECT_EQ(store.calls() - calls, want.empty() ? 0 : 1);
      EXPECT_LE(store.nodes_read() - read, 2 * static_cast<size_t>(std::bit_width(size2)));

      const Hash& root1 = roots[size1];
      const Hash& root2 = roots[size2];
      ASSERT_TRUE(VerifyConsistency(size1, size2, want, root1, root2).ok());

      for (size_t i = 0; i < want.size(); ++i) {
        for (size_t bit : SampleBits(size1 * kMaxSize + size2 + i)) {
          std::vector<Hash> bad = want;
          bad[i] = FlipBit(bad[i], bit);
          EXPECT_EQ(VerifyConsistency(size1, size2, bad, root1, root2).code(),
                    absl::StatusCode::kUnauthenticated);
        }
      }
      for (size_t bit : SampleBits(size1 + size2)) {
        EXPECT_EQ(VerifyConsistency(size1, size2, want, FlipBit(root1, bit), root2).code(),
                  absl::StatusCode::kUnauthenticated);
        EXPECT_EQ(VerifyConsistency(size1, size2, want, root1, FlipBit(root2, bit)).code(),
                  absl::StatusCode::kUnauthenticated);
      }
      if (size1 != size2) {
        EXPECT_EQ(VerifyConsistency(size1, size2, want, root2, root1).code(),
                  absl::StatusCode::kUnauthenticated);
      }
      // Wrong sizes: the verdict (and code) of the reference verifier, which accepts a wrong
      // size2 when the proof's shape is the same (see ProofsDoNotBindTheSizeOnTheirOwn).
      for (const auto& [s1, s2] : std::vector<std::pair<uint64_t, uint64_t>>{{size1 - 1, size2},
                                                                             {size1 + 1, size2},
                                                                             {size1, size2 - 1},
                                                                             {size1, size2 + 1},
                                                                             {size1 ^ 2, size2},
                                                                             {size1, size2 * 2},
                                                                             {0, size2},
                                                                             {size1, kMax}}) {
        EXPECT_EQ(VerifyConsistency(s1, s2, want, root1, root2).code(),
                  RefVerifyConsistency(s1, s2, want, root1, root2).code())
            << s1 << " -> " << s2;
      }
      // Truncated and extended proofs.
      if (!want.empty()) {
        std::vector<Hash> truncated(want.begin(), want.end() - 1);
        EXPECT_EQ(VerifyConsistency(size1, size2, truncated, root1, root2).code(),
                  absl::StatusCode::kInvalidArgument);
      }
      std::vector<Hash> extended = want;
      extended.push_back(root2);
      EXPECT_EQ(VerifyConsistency(size1, size2, extended, root1, root2).code(),
                absl::StatusCode::kInvalidArgument);
      std::vector<Hash> prepended = want;
      prepended.insert(prepended.begin(), root1);
      EXPECT_EQ(VerifyConsistency(size1, size2, prepended, root1, root2).code(),
                absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(ProofPlanTest, InvalidArguments) {
  EXPECT_EQ(InclusionProofPlan(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InclusionProofPlan(5, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InclusionProofPlan(kMax, kMax).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(InclusionProofPlan(kMax, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConsistencyProofPlan(0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConsistencyProofPlan(0, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConsistencyProofPlan(6, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConsistencyProofPlan(kMax, 1).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<ProofPlan> same = ConsistencyProofPlan(5, 5);
  ASSERT_TRUE(same.ok());
  EXPECT_THAT(same->ranges, IsEmpty());

  const Hash h = LeafHash("a");
  const Hash empty = EmptyRoot();
  EXPECT_EQ(VerifyInclusion(0, 0, h, {}, empty).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyInclusion(1, 1, h, {}, h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyInclusion(kMax, 1, h, {}, h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyInclusion(kMax, kMax, h, {}, h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RootFromInclusionProof(3, 2, h, {h}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(VerifyInclusion(0, 1, h, {}, h).ok());
  EXPECT_EQ(VerifyInclusion(0, 1, h, {}, empty).code(), absl::StatusCode::kUnauthenticated);

  // size1 == 0 is always an error, even 0 -> 0 with matching roots (as in the vectors).
  EXPECT_EQ(VerifyConsistency(0, 0, {}, empty, empty).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyConsistency(0, 1, {}, empty, h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyConsistency(0, 1, {h}, empty, h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyConsistency(2, 1, {}, h, h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyConsistency(kMax, 0, {}, h, h).code(), absl::StatusCode::kInvalidArgument);
  // Equal sizes: empty proof and equal roots, nothing else.
  EXPECT_TRUE(VerifyConsistency(1, 1, {}, h, h).ok());
  EXPECT_TRUE(VerifyConsistency(kMax, kMax, {}, h, h).ok());
  EXPECT_EQ(VerifyConsistency(1, 1, {h}, h, h).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyConsistency(1, 1, {}, h, empty).code(), absl::StatusCode::kUnauthenticated);
  // Different sizes need a proof.
  EXPECT_EQ(VerifyConsistency(1, 2, {}, h, h).code(), absl::StatusCode::kInvalidArgument);
}

// The verifiers see the sizes only through the proof's shape: a proof for one size also proves
// the same claim for another size whose proof has the same shape, and a wrong size is caught only
// when the shape differs (the conformance vectors' treeSize-mul/div cases) or by the root. That is
// RFC 9162 as specified, not a bug: a (size, root) pair must come from one signed checkpoint.
TEST(ProofPlanTest, ProofsDoNotBindTheSizeOnTheirOwn) {
  const std::vector<Hash> leaves = TestLeaves(4);
  const auto all = absl::MakeConstSpan(leaves);
  const Hash root3 = RefMth(all.subspan(0, 3));
  // Leaf 0 of size 3: [leaf 1, leaf 2]. As "size 4", the verifier pairs the same hashes the same
  // way and gets root3 again.
  const std::vector<Hash> proof = RefPath(0, all.subspan(0, 3));
  EXPECT_TRUE(VerifyInclusion(0, 3, leaves[0], proof, root3).ok());
  EXPECT_TRUE(VerifyInclusion(0, 4, leaves[0], proof, root3).ok());
  // But not against the real root of size 4.
  EXPECT_EQ(VerifyInclusion(0, 4, leaves[0], proof, RefMth(all)).code(),
            absl::StatusCode::kUnauthenticated);
  // A different shape is rejected outright.
  EXPECT_EQ(VerifyInclusion(0, 5, leaves[0], proof, root3).code(),
            absl::StatusCode::kInvalidArgument);
}

// Plans for huge trees: O(log n) nodes, one read, and exactly the proof length the verifiers
// expect (made-up hashes then fail as UNAUTHENTICATED, not INVALID_ARGUMENT). Nothing overflows.
TEST(ProofPlanTest, HugeTreesAgreeWithVerifierLengths) {
  std::mt19937_64 rng(6962);
  std::vector<std::pair<uint64_t, uint64_t>> pairs = {
      {0, kMax},
      {kMax - 1, kMax},
      {kMax - 2, kMax - 1},
      {1, kMax},
      {uint64_t{1} << 63, kMax},
      {(uint64_t{1} << 63) - 1, uint64_t{1} << 63},
      {0, uint64_t{1} << 63},
      {kMax / 3, kMax / 2},
  };
  for (int i = 0; i < 200; ++i) {
    uint64_t a = rng() >> (rng() % 64);
    uint64_t b = rng() >> (rng() % 64);
    if (a > b) std::swap(a, b);
    if (a == b && b == kMax) {
      --a;
    } else if (a == b) {
      ++b;
    }
    pairs.emplace_back(a, b);
  }
  const Hash h = LeafHash("x");
  for (const auto& [a, b] : pairs) {
    SCOPED_TRACE(absl::StrCat(a, " / ", b));
    int calls = 0;
    size_t read = 0;
    absl::StatusOr<ProofPlan> incl = InclusionProofPlan(a, b);
    ASSERT_TRUE(incl.ok()) << incl.status();
    absl::StatusOr<std::vector<Hash>> proof = BuildProof(*incl, FakeReader(&calls, &read));
    ASSERT_TRUE(proof.ok()) << proof.status();
    EXPECT_LE(calls, 1);
    EXPECT_LE(read, 128u);
    EXPECT_EQ(VerifyInclusion(a, b, h, *proof, h).code(), absl::StatusCode::kUnauthenticated);

    if (a == 0) continue;
    calls = 0;
    read = 0;
    absl::StatusOr<ProofPlan> cons = ConsistencyProofPlan(a, b);
    ASSERT_TRUE(cons.ok()) << cons.status();
    proof = BuildProof(*cons, FakeReader(&calls, &read));
    ASSERT_TRUE(proof.ok()) << proof.status();
    EXPECT_EQ(calls, 1);
    EXPECT_LE(read, 128u);
    EXPECT_EQ(VerifyConsistency(a, b, *proof, h, h).code(), absl::StatusCode::kUnauthenticated);
  }
  int calls = 0;
  size_t read = 0;
  ASSERT_TRUE(RootAt(kMax, FakeReader(&calls, &read)).ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(read, 64u);
}

TEST(BuildProofTest, ReaderErrorsPassThrough) {
  MemStore store(TestLeaves(8));
  store.Erase(NodeId{1, 2});  // leaves [4, 6)
  absl::StatusOr<ProofPlan> plan = InclusionProofPlan(7, 8);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(BuildProof(*plan, store.Reader()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(RootAt(6, store.Reader()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(RootAt(8, store.Reader()).ok());
  EXPECT_TRUE(RootAt(4, store.Reader()).ok());

  NodeReader data_loss = [](absl::Span<const NodeId>) -> absl::StatusOr<std::vector<Hash>> {
    return absl::DataLossError("corrupt");
  };
  EXPECT_EQ(BuildProof(*plan, data_loss).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(RootAt(3, data_loss).status().code(), absl::StatusCode::kDataLoss);
  // The empty tree's root needs no read.
  EXPECT_EQ(RootAt(0, data_loss).value(), EmptyRoot());

  // A reader that breaks its contract (wrong number of hashes) is a bug, not a proof failure.
  NodeReader short_reader = [](absl::Span<const NodeId> ids) -> absl::StatusOr<std::vector<Hash>> {
    return std::vector<Hash>(ids.size() - 1);
  };
  EXPECT_EQ(BuildProof(*plan, short_reader).status().code(), absl::StatusCode::kInternal);

  ProofPlan empty_range;
  empty_range.ranges.emplace_back(3, 3);
  EXPECT_EQ(BuildProof(empty_range, store.Reader()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// --- Frontier -----------------------------------------------------------------------------------

constexpr uint64_t kFrontierLeaves = 200;

TEST(FrontierTest, AppendEmitsExactlyThePerfectSubtrees) {
  const std::vector<Hash> leaves = TestLeaves(kFrontierLeaves);
  const auto all = absl::MakeConstSpan(leaves);
  Frontier f;
  EXPECT_EQ(f.size(), 0u);
  EXPECT_EQ(f.Root(), EmptyRoot());
  EXPECT_THAT(f.nodes(), IsEmpty());
  MemStore store;
  for (uint64_t i = 0; i < kFrontierLeaves; ++i) {
    SCOPED_TRACE(absl::StrCat("leaf ", i));
    std::vector<std::pair<NodeId, Hash>> emitted;
    f.Append(leaves[i], [&](NodeId id, const Hash& h) {
      emitted.emplace_back(id, h);
      store.Put(id, h);
    });
    const uint64_t size = i + 1;
    ASSERT_EQ(f.size(), size);
    // The new perfect subtrees are those ending at `size`, lowest level first.
    size_t want_count = 0;
    for (int level = 0; size % (uint64_t{1} << level) == 0; ++level) {
      ASSERT_LT(want_count, emitted.size());
      const uint64_t width = uint64_t{1} << level;
      EXPECT_EQ(emitted[want_count].first, (NodeId{static_cast<uint8_t>(level), size / width - 1}));
      EXPECT_EQ(emitted[want_count].second, RefMth(all.subspan(size - width, width)));
      ++want_count;
    }
    EXPECT_EQ(emitted.size(), want_count);
    EXPECT_EQ(f.Root(), RefMth(all.subspan(0, size)));
    // nodes() are the hashes of RangeNodes(0, size), largest first.
    const std::vector<NodeId> ids = RangeNodes(0, size);
    ASSERT_EQ(f.nodes().size(), ids.size());
    for (size_t k = 0; k < ids.size(); ++k) {
      EXPECT_EQ(f.nodes()[k], store.nodes().at({ids[k].level, ids[k].index}));
    }
  }
  // Exactly every perfect subtree, nothing else.
  EXPECT_EQ(store.nodes(), MemStore(leaves).nodes());
}

TEST(FrontierTest, LoadAndFromNodesRoundTrip) {
  const std::vector<Hash> leaves = TestLeaves(kFrontierLeaves);
  MemStore store;
  std::vector<Frontier> grown = {Frontier()};
  for (const Hash& leaf : leaves) {
    Frontier next = grown.back();
    next.Append(leaf, [&](NodeId id, const Hash& h) { store.Put(id, h); });
    grown.push_back(next);
  }
  for (uint64_t size = 0; size <= kFrontierLeaves; ++size) {
    SCOPED_TRACE(absl::StrCat("size ", size));
    const int calls = store.calls();
    absl::StatusOr<Frontier> loaded = Frontier::Load(size, store.Reader());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(store.calls() - calls, size == 0 ? 0 : 1);
    EXPECT_EQ(loaded->size(), size);
    EXPECT_EQ(loaded->nodes(), grown[size].nodes());
    EXPECT_EQ(loaded->Root(), grown[size].Root());

    absl::StatusOr<Frontier> rebuilt = Frontier::FromNodes(size, grown[size].nodes());
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    EXPECT_EQ(rebuilt->Root(), grown[size].Root());

    // A loaded frontier keeps growing like the original.
    Frontier cont = *loaded;
    for (uint64_t i = size; i < std::min(size + 5, kFrontierLeaves); ++i) {
      cont.Append(leaves[i], [](NodeId, const Hash&) {});
      EXPECT_EQ(cont.Root(), grown[i + 1].Root());
    }
    // A root read through the store agrees with the frontier.
    absl::StatusOr<Hash> root = RootAt(size, store.Reader());
    ASSERT_TRUE(root.ok());
    EXPECT_EQ(*root, grown[size].Root());
  }
}

TEST(FrontierTest, Errors) {
  const std::vector<Hash> leaves = TestLeaves(13);
  MemStore store(leaves);
  std::vector<Hash> nodes = Frontier::Load(13, store.Reader()).value().nodes();
  ASSERT_THAT(nodes, SizeIs(3));
  EXPECT_EQ(Frontier::FromNodes(13, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Frontier::FromNodes(12, nodes).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Frontier::FromNodes(0, nodes).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Frontier::FromNodes(0, {}).ok());
  nodes.push_back(nodes.back());
  EXPECT_EQ(Frontier::FromNodes(13, nodes).status().code(), absl::StatusCode::kInvalidArgument);

  store.Erase(NodeId{2, 2});  // leaves [8, 12): part of the frontier of 13
  EXPECT_EQ(Frontier::Load(13, store.Reader()).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Frontier::Load(8, store.Reader()).ok());
  NodeReader short_reader = [](absl::Span<const NodeId> ids) -> absl::StatusOr<std::vector<Hash>> {
    return std::vector<Hash>(ids.size() + 1);
  };
  EXPECT_EQ(Frontier::Load(13, short_reader).status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace vault::audit
