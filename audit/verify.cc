#include "audit/verify.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "audit/log.h"
#include "vault/v1/audit.pb.h"

namespace vault::audit {
namespace {

struct Failure {
  std::optional<uint64_t> seq;
  std::string error;
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

  // One cursor per tree level, walked in step with the rebuilt tree.
  std::vector<std::unique_ptr<LogStore::NodeCursor>> cursors(64);
  auto check_node = [&](NodeId id, const Hash& h) {
    if (id.level == 0 || failure.has_value()) return;
    auto& c = cursors[id.level];
    if (c == nullptr) c = std::make_unique<LogStore::NodeCursor>(store.Nodes(id.level));
    const uint64_t first = id.index << id.level;
    const uint64_t last = first + (uint64_t{1} << id.level) - 1;
    if (!c->Valid() || c->index() != id.index) {
      if (!c->status().ok()) {
        fail(first, std::string(c->status().message()));
      } else {
        fail(first, absl::StrCat("tree node over entries ", first, "..", last, " is missing"));
      }
      return;
    }
    if (c->hash() != AsBytes(h)) {
      fail(first, absl::StrCat("tree node over entries ", first, "..", last,
                               " does not match the entries"));
      return;
    }
    c->Next();
  };

  Frontier tree;
  Hash prev{};
  uint64_t expected = 0;
  vault::v1::AuditEntry entry;
  absl::Status scan = store.ScanEntries(0, [&](uint64_t seq, absl::string_view stored_leaf,
                                               absl::string_view bytes) {
    if (expected >= limit) return false;
    if (seq != expected) {
      return fail(expected, absl::StrCat("entry ", expected, " is missing"));
    }
    if (stored_leaf.empty()) {
      return fail(seq, absl::StrCat("entry ", seq, ": record is truncated"));
    }
    if (!entry.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      return fail(seq, absl::StrCat("entry ", seq, " does not parse"));
    }
    if (entry.sequence() != seq) {
      return fail(seq, absl::StrCat("entry ", seq, " holds sequence number ", entry.sequence(),
                                    " (moved or reordered)"));
    }
    if (entry.vault() != vault_name) {
      return fail(seq, absl::StrCat("entry ", seq, " names vault \"", entry.vault(), "\", not \"",
                                    vault_name, "\""));
    }
    if (entry.prev_hash() != AsBytes(prev)) {
      return fail(seq, absl::StrCat("entry ", seq,
                                    ": prev_hash is not the hash of the entry before it "
                                    "(hash chain broken)"));
    }
    const Hash leaf = LeafHash(bytes);
    if (stored_leaf != AsBytes(leaf)) {
      return fail(seq, absl::StrCat("entry ", seq, ": its bytes do not match its stored hash"));
    }
    tree.Append(leaf, check_node);
    if (failure.has_value()) return false;
    if (signed_cp.has_value() && tree.size() == signed_cp->size && tree.Root() != signed_cp->root) {
      return fail(std::nullopt,
                  absl::StrCat("the first ", tree.size(),
                               " entries do not hash to the signed checkpoint's root (the "
                               "log was rewritten)"));
    }
    prev = leaf;
    ++expected;
    report.entries_checked = expected;
    return true;
  });
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
