#include "audit/verify.h"

#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "audit/internal/entry_fields.h"
#include "audit/log.h"
#include "vault/v1/audit.pb.h"

namespace vault::audit {
namespace {

struct Failure {
  std::optional<uint64_t> seq;
  std::string error;
};

// The checks of one entry record that need nothing but the record and the stored leaf hash of
// the record before it. They run on a worker thread, batch by batch (the worker then grows the
// tree from the batch's leaves), while the calling thread scans the next batch out of RocksDB.
// `prev_leaf` is the previous record's *stored* leaf hash; since every record's stored hash is
// checked against its bytes, and the first failure in sequence order wins, this is the same
// check as against the recomputed one.
std::optional<std::string> CheckRecord(uint64_t seq, absl::string_view stored_leaf,
                                       absl::string_view bytes, absl::string_view prev_leaf,
                                       absl::string_view vault_name, vault::v1::AuditEntry& entry,
                                       Hash* leaf) {
  if (stored_leaf.empty()) return absl::StrCat("entry ", seq, ": record is truncated");
  // The plain form Append writes is read in place; anything else goes through protobuf.
  std::optional<internal::EntryFields> fields = internal::ReadPlainEntry(bytes);
  if (!fields.has_value()) {
    if (!entry.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return absl::StrCat("entry ", seq, " does not parse");
    }
    fields = internal::EntryFields{entry.sequence(), entry.vault(), entry.prev_hash()};
  }
  if (fields->sequence != seq) {
    return absl::StrCat("entry ", seq, " holds sequence number ", fields->sequence,
                        " (moved or reordered)");
  }
  if (fields->vault != vault_name) {
    return absl::StrCat("entry ", seq, " names vault \"", fields->vault, "\", not \"", vault_name,
                        "\"");
  }
  if (fields->prev_hash != prev_leaf) {
    return absl::StrCat("entry ", seq,
                        ": prev_hash is not the hash of the entry before it (hash chain broken)");
  }
  *leaf = LeafHash(bytes);
  if (stored_leaf != AsBytes(*leaf)) {
    return absl::StrCat("entry ", seq, ": its bytes do not match its stored hash");
  }
  return std::nullopt;
}

// Walks the stored interior nodes in step with the rebuilt tree, one cursor per level: the tree
// completes the nodes of each level in index order, so each stored node is read once, in key
// order. Not thread-safe: the worker checks levels 2 and up with one (batches grow the tree one
// after another), the calling thread level 1 with another, so that the two share the reads.
class NodeChecker {
 public:
  explicit NodeChecker(const LogStore& store) : store_(store) {}

  // Whether the stored node `id` (level >= 1) exists and is `h`.
  std::optional<Failure> Check(NodeId id, const Hash& h) {
    std::unique_ptr<LogStore::NodeCursor>& c = cursors_[id.level];
    if (c == nullptr) c = std::make_unique<LogStore::NodeCursor>(store_.Nodes(id.level));
    const uint64_t first = id.index << id.level;
    const uint64_t last = first + (uint64_t{1} << id.level) - 1;
    if (!c->Valid() || c->index() != id.index) {
      if (!c->status().ok()) return Failure{first, std::string(c->status().message())};
      return Failure{first,
                     absl::StrCat("tree node over entries ", first, "..", last, " is missing")};
    }
    if (c->hash() != AsBytes(h)) {
      return Failure{first, absl::StrCat("tree node over entries ", first, "..", last,
                                         " does not match the entries")};
    }
    c->Next();
    return std::nullopt;
  }

 private:
  const LogStore& store_;
  std::unique_ptr<LogStore::NodeCursor> cursors_[64];
};

// A batch of consecutive records, copied out of the scan.
struct Batch {
  static constexpr size_t kRecords = 4096;
  struct Record {
    uint64_t seq;
    size_t offset;     // of the stored leaf hash in `data`, followed by the entry bytes
    size_t leaf_size;  // 0 (truncated record) or kHashSize
    size_t entry_size;
  };
  std::string prev_leaf;  // the stored leaf hash of the record before the first
  std::string data;
  std::vector<Record> records;
  // Filled by Check:
  std::vector<Hash> leaves;
  std::optional<std::pair<size_t, std::string>> failure;  // the first failing record
  struct EmittedNode {
    size_t record;  // the record whose leaf completed it
    NodeId id;
    Hash hash;
  };
  std::vector<EmittedNode> nodes;  // level-1 nodes the batch's leaves completed, in order
  // The first node above level 1 that does not match the stored one, and the record completing it.
  std::optional<std::pair<size_t, Failure>> node_failure;
  std::optional<size_t> root_mismatch;  // the record at the checkpoint's size, if its root is wrong
  size_t appended = 0;                  // leaves appended to the tree

  void Clear() {
    data.clear();
    records.clear();
    failure.reset();
    nodes.clear();
    node_failure.reset();
    root_mismatch.reset();
    appended = 0;
  }
  absl::string_view leaf(const Record& r) const {
    return absl::string_view(data).substr(r.offset, r.leaf_size);
  }
  absl::string_view entry(const Record& r) const {
    return absl::string_view(data).substr(r.offset + r.leaf_size, r.entry_size);
  }
  void Check(absl::string_view vault_name) {
    vault::v1::AuditEntry e;
    leaves.resize(records.size());
    absl::string_view prev = prev_leaf;
    for (size_t i = 0; i < records.size(); ++i) {
      std::optional<std::string> error = CheckRecord(
          records[i].seq, leaf(records[i]), entry(records[i]), prev, vault_name, e, &leaves[i]);
      if (error.has_value()) {
        failure.emplace(i, std::move(*error));
        return;
      }
      prev = leaf(records[i]);
    }
  }
  // Appends the checked leaves to `tree` (batches are appended strictly in order, one at a time).
  // Checks the nodes they complete above level 1 against the stored ones through `upper`, and
  // records the level-1 nodes (half of all) for the calling thread to check; stops at the first
  // mismatch, or at a root that differs from the checkpoint's.
  void Grow(Frontier* tree, NodeChecker* upper, const std::optional<Checkpoint>& signed_cp) {
    const size_t good = failure.has_value() ? failure->first : records.size();
    for (size_t i = 0; i < good; ++i) {
      tree->Append(leaves[i], [&](NodeId id, const Hash& h) {
        if (id.level == 1) {
          nodes.push_back({i, id, h});
        } else if (id.level > 1 && !node_failure.has_value()) {
          std::optional<Failure> f = upper->Check(id, h);
          if (f.has_value()) node_failure.emplace(i, std::move(*f));
        }
      });
      appended = i + 1;
      if (node_failure.has_value()) return;
      if (signed_cp.has_value() && tree->size() == signed_cp->size &&
          tree->Root() != signed_cp->root) {
        root_mismatch = i;
        return;
      }
    }
  }
};

}  // namespace

VerifyReport VerifyStoredLog(const LogStore& store, absl::string_view vault_name,
                             const NoteVerifier& verifier, bool is_mirror) {
  VerifyReport report;
  std::optional<Failure> failure;
  auto fail = [&](std::optional<uint64_t> seq, std::string error) {
    if (!failure.has_value()) failure = Failure{seq, std::move(error)};
    return false;
  };
  auto finish = [&]() {
    if (failure.has_value()) {
      report.ok = false;
      report.first_bad = failure->seq;
      report.error = std::move(failure->error);
    } else {
      report.ok = true;
    }
    return report;
  };

  // The signed checkpoint, checked before the entries so the tree can be compared at its size.
  std::optional<Checkpoint> signed_cp;
  absl::StatusOr<std::optional<vault::v1::StoredCheckpoint>> stored_cp = store.ReadCheckpoint();
  if (!stored_cp.ok()) {
    fail(std::nullopt, std::string(stored_cp.status().message()));
    return finish();
  }
  if (stored_cp->has_value()) {
    absl::StatusOr<std::string> body = OpenNote((*stored_cp)->note(), verifier);
    if (!body.ok()) {
      fail(std::nullopt, absl::StrCat("checkpoint signature: ", body.status().message()));
      return finish();
    }
    absl::StatusOr<Checkpoint> cp = ParseCheckpoint(*body);
    if (!cp.ok()) {
      fail(std::nullopt, absl::StrCat("checkpoint: ", cp.status().message()));
      return finish();
    }
    if (cp->origin != LogOrigin(vault_name)) {
      fail(std::nullopt, absl::StrCat("checkpoint origin is \"", cp->origin, "\", expected \"",
                                      LogOrigin(vault_name), "\""));
      return finish();
    }
    if (cp->size != (*stored_cp)->size() || AsBytes(cp->root) != (*stored_cp)->root()) {
      fail(std::nullopt, "the stored checkpoint record does not match its signed note");
      return finish();
    }
    signed_cp = *cp;
    report.checkpoint_size = cp->size;
  }

  // The head is read after the checkpoint: a checkpoint never covers more than the durable
  // head, so appends and checkpoints running meanwhile cannot make a healthy log look short.
  absl::StatusOr<vault::v1::LogHead> head = store.ReadHead();
  if (!head.ok()) {
    fail(std::nullopt, std::string(head.status().message()));
    return finish();
  }
  const uint64_t limit = head->size();

  // Level 1 is checked here, the levels above by the worker as it grows the tree.
  NodeChecker level_one(store);
  NodeChecker upper_levels(store);
  auto check_node = [&](NodeId id, const Hash& h) {
    if (failure.has_value()) return;
    std::optional<Failure> f = level_one.Check(id, h);
    if (f.has_value()) fail(f->seq, std::move(f->error));
  };

  Frontier tree;
  Hash prev{};
  uint64_t expected = 0;
  // Two batches: the worker checks one while this thread fills the other; then this thread
  // feeds the checked one's leaves to the tree, in order.
  Batch batches[2];
  int filling = 0;
  std::future<void> checking;  // of batches[1 - filling]
  bool have_checked = false;
  // Takes a checked batch's results in order: the stored nodes its leaves completed must match,
  // the root at the checkpoint's size, then the first failing record. False once something failed.
  auto consume = [&](Batch& b) {
    size_t n = 0;
    for (size_t i = 0; i < b.appended; ++i) {
      for (; n < b.nodes.size() && b.nodes[n].record == i; ++n) {
        check_node(b.nodes[n].id, b.nodes[n].hash);
      }
      if (failure.has_value()) return false;
      if (b.node_failure.has_value() && b.node_failure->first == i) {
        return fail(b.node_failure->second.seq, std::move(b.node_failure->second.error));
      }
      if (b.root_mismatch == i) {
        return fail(std::nullopt,
                    absl::StrCat("the first ", report.entries_checked + 1,
                                 " entries do not hash to the signed checkpoint's root (the "
                                 "log was rewritten)"));
      }
      prev = b.leaves[i];
      ++report.entries_checked;
    }
    if (b.failure.has_value()) {
      return fail(b.records[b.failure->first].seq, std::move(b.failure->second));
    }
    return true;
  };
  // Waits for the batch being checked (if any) and consumes it.
  auto drain = [&]() {
    if (!have_checked) return !failure.has_value();
    checking.get();
    have_checked = false;
    return consume(batches[1 - filling]);
  };
  // Waits for the batch being checked, hands the filled one to the worker (its leaves extend the
  // tree the previous one grew), then consumes the previous one meanwhile.
  auto hand_off = [&]() {
    if (have_checked) checking.get();
    Batch& full = batches[filling];
    Batch& previous = batches[1 - filling];
    const bool consume_previous = have_checked;
    checking =
        std::async(std::launch::async, [&full, &tree, &upper_levels, &signed_cp, vault_name] {
          full.Check(vault_name);
          full.Grow(&tree, &upper_levels, signed_cp);
        });
    have_checked = true;
    const bool ok = !consume_previous || consume(previous);
    filling = 1 - filling;
    Batch& next = batches[filling];  // `previous`, consumed
    next.Clear();
    // The next batch's first record follows `full`'s last one.
    next.prev_leaf = std::string(full.leaf(full.records.back()));
    return ok;
  };
  batches[0].prev_leaf = std::string(AsBytes(Hash{}));
  bool gap = false;
  absl::Status scan = store.ScanEntries(
      0,
      [&](uint64_t seq, absl::string_view stored_leaf, absl::string_view bytes) {
        if (expected >= limit) return false;
        if (seq != expected) {
          gap = true;
          return false;
        }
        Batch& b = batches[filling];
        b.records.push_back({seq, b.data.size(), stored_leaf.size(), bytes.size()});
        b.data.append(stored_leaf.data(), stored_leaf.size());
        b.data.append(bytes.data(), bytes.size());
        ++expected;
        if (b.records.size() < Batch::kRecords) return true;
        return hand_off();
      },
      /*verify_checksums=*/false);  // every byte is hashed here
  // The rest, in order: the batch being checked, then the partial one.
  if (drain() && !batches[filling].records.empty()) {
    batches[filling].Check(vault_name);
    batches[filling].Grow(&tree, &upper_levels, signed_cp);
    consume(batches[filling]);
  }
  if (gap && !failure.has_value()) {
    fail(expected, absl::StrCat("entry ", expected, " is missing"));
  }
  expected = report.entries_checked;
  if (failure.has_value()) return finish();
  if (!scan.ok()) {
    fail(expected, std::string(scan.message()));
    return finish();
  }
  if (expected < limit) {
    fail(expected, absl::StrCat("entry ", expected, " is missing (the log holds ", limit, ")"));
    return finish();
  }
  if (signed_cp.has_value() && signed_cp->size > limit && is_mirror) {
    report.catching_up = true;  // its entries are fetched after the checkpoint; not an error
  } else if (signed_cp.has_value() && signed_cp->size > limit) {
    fail(limit, absl::StrCat("the checkpoint signs ", signed_cp->size, " entries but only ", limit,
                             " are held"));
    return finish();
  }
  if (signed_cp.has_value() && signed_cp->size == 0 && signed_cp->root != EmptyRoot()) {
    fail(std::nullopt, "the checkpoint of the empty log has a wrong root");
    return finish();
  }
  if (limit > 0 && head->last_leaf_hash() != AsBytes(prev)) {
    fail(limit - 1, "the log head does not match the last entry");
    return finish();
  }
  return finish();
}

}  // namespace vault::audit
