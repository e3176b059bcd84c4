// vaultctl audit ...: tail, show, checkpoint, verify, proof, verifier-key, mirrors.
#include <iostream>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "audit/merkle.h"
#include "audit/note.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "vault/v1/audit.pb.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using node::FromGrpc;
using vault::v1::AuditEntry;

std::string B64(absl::string_view bytes) { return absl::Base64Escape(bytes); }

std::string TimeText(int64_t unix_micros) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMicros(unix_micros),
                          absl::UTCTimeZone());
}

std::string ShortActor(const std::string& actor) {
  if (absl::StartsWith(actor, "ed25519:") && actor.size() > 16) return actor.substr(8, 8);
  return actor;
}

Json EntryJson(uint64_t seq, const std::string& bytes) {
  Json j = Json::Object();
  AuditEntry e;
  j.Add("sequence", seq);
  if (!e.ParseFromString(bytes)) {
    return j.Add("error", "entry does not parse").Add("bytes", B64(bytes));
  }
  Json details = Json::Object();
  for (const AuditEntry::Detail& d : e.details()) details.Add(d.key(), d.value());
  return j.Add("time", TimeText(e.time_unix_micros()))
      .Add("vault", e.vault())
      .Add("actor", e.actor())
      .Add("action", e.action())
      .Add("subject", e.subject())
      .Add("decision", AuditEntry::Decision_Name(e.decision()))
      .Add("motivation", e.motivation())
      .Add("priority", AuditEntry::Priority_Name(e.priority()))
      .Add("details", details)
      .Add("prev_hash", B64(e.prev_hash()))
      .Add("leaf_hash", audit::HashToBase64(audit::LeafHash(bytes)));
}

std::string EntryLine(uint64_t seq, const std::string& bytes) {
  AuditEntry e;
  if (!e.ParseFromString(bytes)) return absl::StrCat(seq, "  (entry does not parse)");
  std::string line = absl::StrCat(seq, "  ", TimeText(e.time_unix_micros()), "  ",
                                  e.priority() == AuditEntry::HIGH ? "HIGH " : "", e.action(), "  ",
                                  e.decision() == AuditEntry::DENIED ? "denied" : "allowed", "  ",
                                  ShortActor(e.actor()), "  ", e.subject());
  if (!e.motivation().empty()) absl::StrAppend(&line, "  (", e.motivation(), ")");
  return line;
}

absl::StatusOr<vault::v1::GetCheckpointResponse> FetchCheckpoint(const Connection& conn,
                                                                 const std::string& log,
                                                                 bool issue) {
  vault::v1::GetCheckpointRequest req;
  req.set_log(log);
  req.set_issue(issue);
  vault::v1::GetCheckpointResponse resp;
  VAULT_RETURN_IF_ERROR(FromGrpc(conn.audit()->GetCheckpoint(conn.Context().get(), req, &resp)));
  return resp;
}

// Streams entries [from, to) (to = 0: up to the log's size) to `fn(seq, bytes)`.
absl::Status FetchEntries(const Connection& conn, const std::string& log, uint64_t from,
                          uint64_t to,
                          const std::function<void(uint64_t, const std::string&)>& fn) {
  vault::v1::GetEntriesRequest req;
  req.set_log(log);
  req.set_from(from);
  req.set_to(to);
  std::unique_ptr<grpc::ClientContext> ctx = conn.StreamContext(64 << 20);
  auto reader = conn.audit()->GetEntries(ctx.get(), req);
  vault::v1::GetEntriesResponse page;
  while (reader->Read(&page)) {
    for (int i = 0; i < page.entries_size(); ++i) fn(page.first() + i, page.entries(i));
  }
  return FromGrpc(reader->Finish());
}

// The signed checkpoint of `log`, its signature checked with the log's verifier key.
absl::StatusOr<audit::Checkpoint> SignedCheckpoint(const Connection& conn, const std::string& log) {
  VAULT_ASSIGN_OR_RETURN(vault::v1::GetCheckpointResponse cp, FetchCheckpoint(conn, log, false));
  vault::v1::GetVerifierKeyRequest req;
  req.set_log(log);
  vault::v1::GetVerifierKeyResponse key;
  VAULT_RETURN_IF_ERROR(FromGrpc(conn.audit()->GetVerifierKey(conn.Context().get(), req, &key)));
  VAULT_ASSIGN_OR_RETURN(audit::NoteVerifier verifier,
                         audit::NoteVerifier::Parse(key.verifier_key()));
  VAULT_ASSIGN_OR_RETURN(std::string body, audit::OpenNote(cp.note(), verifier));
  return audit::ParseCheckpoint(body);
}

template <typename Fn>
int Run(GlobalOptions& g, Fn fn) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  absl::StatusOr<int> rc = fn(*conn);
  if (!rc.ok()) {
    absl::Status s = rc.status();
    if (absl::IsUnimplemented(s)) {
      s = absl::FailedPreconditionError(
          "this audit command is served only on the vault's admin socket, not over TCP");
    }
    return ReportError(s, g.json());
  }
  return *rc;
}

struct AuditFlags {
  std::string log;  // --vault-log
  uint64_t lines = 20;
  bool follow = false;
  uint64_t seq = 0;
  uint64_t size = 0;
  uint64_t old_size = 0;
  uint64_t new_size = 0;
  bool issue = false;
  std::string peer;
  bool all = false;
};

void AddTail(CLI::App* audit, GlobalOptions& g, AuditFlags& f, Command& command) {
  auto* tail =
      audit->add_subcommand("tail", "Show the latest entries of a log (-f: keep following)");
  tail->add_option("-n,--lines", f.lines, "How many entries to show first")->capture_default_str();
  tail->add_flag("-f,--follow", f.follow, "Keep printing new entries as they are appended");
  tail->add_option("--vault-log", f.log,
                   "Show this vault's mirror of member NAME's log instead of its own");
  tail->callback([&] {
    command = [&g, &f] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        VAULT_ASSIGN_OR_RETURN(vault::v1::GetCheckpointResponse cp,
                               FetchCheckpoint(conn, f.log, false));
        uint64_t next = cp.log_size() > f.lines ? cp.log_size() - f.lines : 0;
        auto print = [&](uint64_t seq, const std::string& bytes) {
          std::cout << (g.json() ? EntryJson(seq, bytes).ToString() : EntryLine(seq, bytes))
                    << "\n";
          next = seq + 1;
        };
        VAULT_RETURN_IF_ERROR(FetchEntries(conn, f.log, next, cp.log_size(), print));
        std::cout.flush();
        while (f.follow) {
          absl::SleepFor(absl::Milliseconds(500));
          VAULT_ASSIGN_OR_RETURN(cp, FetchCheckpoint(conn, f.log, false));
          if (cp.log_size() > next) {
            VAULT_RETURN_IF_ERROR(FetchEntries(conn, f.log, next, cp.log_size(), print));
            std::cout.flush();
          }
        }
        return kExitOk;
      });
    };
  });
}

void AddShow(CLI::App* audit, GlobalOptions& g, AuditFlags& f, Command& command) {
  auto* show = audit->add_subcommand("show", "Show one entry in full");
  show->add_option("SEQ", f.seq, "Sequence number")->required();
  show->add_option("--vault-log", f.log, "A member's name: its log as mirrored here");
  show->callback([&] {
    command = [&g, &f] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        VAULT_ASSIGN_OR_RETURN(vault::v1::GetCheckpointResponse cp,
                               FetchCheckpoint(conn, f.log, false));
        if (f.seq >= cp.log_size()) {
          return absl::NotFoundError(
              absl::StrCat("no entry ", f.seq, ": the log has ", cp.log_size(), " entries"));
        }
        bool found = false;
        VAULT_RETURN_IF_ERROR(
            FetchEntries(conn, f.log, f.seq, f.seq + 1, [&](uint64_t seq, const std::string& b) {
              found = true;
              Json j = EntryJson(seq, b);
              if (g.json()) {
                std::cout << j.ToString() << "\n";
                return;
              }
              AuditEntry e;
              e.ParseFromString(b);
              std::cout << "sequence:   " << seq
                        << "\ntime:       " << TimeText(e.time_unix_micros())
                        << "\nvault:      " << e.vault() << "\nactor:      " << e.actor()
                        << "\naction:     " << e.action() << "\nsubject:    " << e.subject()
                        << "\ndecision:   " << AuditEntry::Decision_Name(e.decision())
                        << "\npriority:   " << AuditEntry::Priority_Name(e.priority())
                        << "\nmotivation: " << e.motivation() << "\n";
              for (const AuditEntry::Detail& d : e.details()) {
                std::cout << "  " << d.key() << " = " << d.value() << "\n";
              }
              std::cout << "prev_hash:  " << B64(e.prev_hash())
                        << "\nleaf_hash:  " << audit::HashToBase64(audit::LeafHash(b)) << "\n";
            }));
        if (!found) return absl::NotFoundError(absl::StrCat("no entry ", f.seq));
        return kExitOk;
      });
    };
  });
}

void AddCheckpoint(CLI::App* audit, GlobalOptions& g, AuditFlags& f, Command& command) {
  auto* cp = audit->add_subcommand(
      "checkpoint", "Print the latest signed checkpoint exactly as signed (a C2SP signed note)");
  cp->add_option("--vault-log", f.log, "A member's name: the latest checkpoint mirrored here");
  cp->add_flag("--issue", f.issue, "Sign a checkpoint of the current log first (admin socket)");
  cp->callback([&] {
    command = [&g, &f] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        VAULT_ASSIGN_OR_RETURN(vault::v1::GetCheckpointResponse cp,
                               FetchCheckpoint(conn, f.log, f.issue));
        if (g.json()) {
          std::cout << Json::Object()
                           .Add("origin", cp.origin())
                           .Add("size", cp.size())
                           .Add("root", B64(cp.root()))
                           .Add("log_size", cp.log_size())
                           .Add("note", cp.note())
                           .ToString()
                    << "\n";
        } else {
          std::cout << cp.note();
        }
        return kExitOk;
      });
    };
  });
}

void AddVerifierKey(CLI::App* audit, GlobalOptions& g, AuditFlags& f, Command& command) {
  auto* vk = audit->add_subcommand(
      "verifier-key", "Print the log's note verifier key: <name>+<key id>+<base64 key>");
  vk->add_option("--vault-log", f.log, "A member's name: that member's key");
  vk->callback([&] {
    command = [&g, &f] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        vault::v1::GetVerifierKeyRequest req;
        req.set_log(f.log);
        vault::v1::GetVerifierKeyResponse resp;
        VAULT_RETURN_IF_ERROR(
            FromGrpc(conn.audit()->GetVerifierKey(conn.Context().get(), req, &resp)));
        if (g.json()) {
          std::cout << Json::Object()
                           .Add("verifier_key", resp.verifier_key())
                           .Add("public_key", resp.public_key())
                           .Add("origin", resp.origin())
                           .ToString()
                    << "\n";
        } else {
          std::cout << resp.verifier_key() << "\n";
        }
        return kExitOk;
      });
    };
  });
}

int PrintVerify(const vault::v1::VerifyLogResponse& r, bool json) {
  if (json) {
    Json j = Json::Object()
                 .Add("log", r.log())
                 .Add("ok", r.ok())
                 .Add("entries_checked", r.entries_checked())
                 .Add("checkpoint_size", r.checkpoint_size())
                 .Add("forked", r.forked())
                 .Add("elapsed_us", r.elapsed_us());
    if (r.has_first_bad()) j.Add("first_bad_sequence", r.first_bad_sequence());
    if (!r.error().empty()) j.Add("error", r.error());
    std::cout << j.ToString() << "\n";
  } else if (r.ok()) {
    std::cout << r.log() << ": ok: " << r.entries_checked() << " entries, chain and tree intact; "
              << "checkpoint of size " << r.checkpoint_size() << " signature and root verified ("
              << absl::FormatDuration(absl::Microseconds(r.elapsed_us())) << ")\n";
  } else {
    std::cout << r.log() << ": FAILED" << (r.forked() ? " (FORKED)" : "")
              << (r.has_first_bad() ? absl::StrCat(" at sequence ", r.first_bad_sequence()) : "")
              << ": " << r.error() << "\n";
  }
  return r.ok() ? kExitOk : kExitFailure;
}

void AddVerify(CLI::App* audit, GlobalOptions& g, AuditFlags& f, Command& command) {
  auto* verify = audit->add_subcommand(
      "verify",
      "Re-verify a whole stored log: hash chain, Merkle tree, signed checkpoint (exit 1 on "
      "failure, naming the first bad sequence number)");
  auto* peer = verify->add_option("--peer", f.peer, "Verify this vault's mirror of member NAME");
  verify->add_flag("--all", f.all, "Verify the own log and every mirror")->excludes(peer);
  verify->callback([&] {
    command = [&g, &f] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        std::vector<std::string> logs = {f.peer};
        if (f.all) {
          vault::v1::ListMirrorsResponse mirrors;
          VAULT_RETURN_IF_ERROR(
              FromGrpc(conn.audit_admin()->ListMirrors(conn.Context().get(), {}, &mirrors)));
          for (const auto& m : mirrors.mirrors()) logs.push_back(m.peer());
        }
        int rc = kExitOk;
        for (const std::string& log : logs) {
          vault::v1::VerifyLogRequest req;
          req.set_log(log);
          vault::v1::VerifyLogResponse resp;
          std::unique_ptr<grpc::ClientContext> ctx = conn.StreamContext(1ull << 30);
          VAULT_RETURN_IF_ERROR(FromGrpc(conn.audit_admin()->VerifyLog(ctx.get(), req, &resp)));
          if (PrintVerify(resp, g.json()) != kExitOk) rc = kExitFailure;
        }
        return rc;
      });
    };
  });
}

std::string HashesJsonList(const google::protobuf::RepeatedPtrField<std::string>& hashes,
                           Json* arr) {
  std::string text;
  for (const std::string& h : hashes) {
    arr->Push(B64(h));
    absl::StrAppend(&text, "  ", B64(h), "\n");
  }
  return text;
}

absl::StatusOr<std::vector<audit::Hash>> ToHashes(
    const google::protobuf::RepeatedPtrField<std::string>& hashes) {
  std::vector<audit::Hash> out;
  for (const std::string& h : hashes) {
    VAULT_ASSIGN_OR_RETURN(audit::Hash x, audit::HashFromBytes(h));
    out.push_back(x);
  }
  return out;
}

// How a proof's root was checked: against the signed checkpoint when the size is its size.
absl::StatusOr<std::string> CheckRoot(const Connection& conn, const std::string& log, uint64_t size,
                                      absl::string_view root) {
  VAULT_ASSIGN_OR_RETURN(audit::Checkpoint cp, SignedCheckpoint(conn, log));
  if (cp.size != size) return std::string("root (not a checkpointed size; unsigned)");
  if (audit::AsBytes(cp.root) != root) {
    return absl::DataLossError(
        absl::StrCat("the proof's root differs from the signed checkpoint of size ", size));
  }
  return std::string("signed checkpoint");
}

void AddProof(CLI::App* audit, GlobalOptions& g, AuditFlags& f, Command& command) {
  auto* proof = audit->add_subcommand("proof", "Inclusion and consistency proofs (RFC 9162)");
  proof->require_subcommand(1);
  auto* inc = proof->add_subcommand(
      "inclusion", "Prove entry SEQ is in the tree of --size entries (default: latest checkpoint)");
  inc->add_option("SEQ", f.seq, "Sequence number")->required();
  inc->add_option("--size", f.size, "Tree size (default: the latest checkpoint's)");
  inc->add_option("--vault-log", f.log, "A member's name: its log as mirrored here");
  inc->callback([&] {
    command = [&g, &f] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        vault::v1::GetInclusionProofRequest req;
        req.set_log(f.log);
        req.set_index(f.seq);
        req.set_size(f.size);
        vault::v1::GetInclusionProofResponse resp;
        VAULT_RETURN_IF_ERROR(
            FromGrpc(conn.audit()->GetInclusionProof(conn.Context().get(), req, &resp)));
        // Check it here: the leaf is the hash of the entry's bytes as fetched.
        std::string entry;
        VAULT_RETURN_IF_ERROR(FetchEntries(conn, f.log, f.seq, f.seq + 1,
                                           [&](uint64_t, const std::string& b) { entry = b; }));
        audit::Hash leaf = audit::LeafHash(entry);
        if (audit::AsBytes(leaf) != resp.leaf_hash()) {
          return absl::DataLossError("the served leaf hash is not the hash of the entry");
        }
        VAULT_ASSIGN_OR_RETURN(std::vector<audit::Hash> hashes, ToHashes(resp.hashes()));
        VAULT_ASSIGN_OR_RETURN(audit::Hash root, audit::HashFromBytes(resp.root()));
        VAULT_RETURN_IF_ERROR(
            audit::VerifyInclusion(resp.index(), resp.size(), leaf, hashes, root));
        VAULT_ASSIGN_OR_RETURN(std::string against,
                               CheckRoot(conn, f.log, resp.size(), resp.root()));
        Json arr = Json::Array();
        std::string text = HashesJsonList(resp.hashes(), &arr);
        if (g.json()) {
          std::cout << Json::Object()
                           .Add("index", resp.index())
                           .Add("size", resp.size())
                           .Add("leaf_hash", B64(resp.leaf_hash()))
                           .Add("hashes", arr)
                           .Add("root", B64(resp.root()))
                           .Add("verified_against", against)
                           .ToString()
                    << "\n";
        } else {
          std::cout << "inclusion of entry " << resp.index() << " in tree of size " << resp.size()
                    << ": verified against " << against << "\nleaf: " << B64(resp.leaf_hash())
                    << "\nroot: " << B64(resp.root()) << "\nproof (" << resp.hashes_size()
                    << " hashes):\n"
                    << text;
        }
        return kExitOk;
      });
    };
  });
  auto* con = proof->add_subcommand("consistency",
                                    "Prove the tree of OLD entries is a prefix of the tree of NEW");
  con->add_option("OLD", f.old_size, "Older tree size")->required();
  con->add_option("NEW", f.new_size, "Newer tree size (0: the latest checkpoint's)")->required();
  con->add_option("--vault-log", f.log, "A member's name: its log as mirrored here");
  con->callback([&] {
    command = [&g, &f] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        vault::v1::GetConsistencyProofRequest req;
        req.set_log(f.log);
        req.set_size1(f.old_size);
        req.set_size2(f.new_size);
        vault::v1::GetConsistencyProofResponse resp;
        VAULT_RETURN_IF_ERROR(
            FromGrpc(conn.audit()->GetConsistencyProof(conn.Context().get(), req, &resp)));
        VAULT_ASSIGN_OR_RETURN(std::vector<audit::Hash> hashes, ToHashes(resp.hashes()));
        VAULT_ASSIGN_OR_RETURN(audit::Hash root1, audit::HashFromBytes(resp.root1()));
        VAULT_ASSIGN_OR_RETURN(audit::Hash root2, audit::HashFromBytes(resp.root2()));
        VAULT_RETURN_IF_ERROR(
            audit::VerifyConsistency(resp.size1(), resp.size2(), hashes, root1, root2));
        VAULT_ASSIGN_OR_RETURN(std::string against,
                               CheckRoot(conn, f.log, resp.size2(), resp.root2()));
        Json arr = Json::Array();
        std::string text = HashesJsonList(resp.hashes(), &arr);
        if (g.json()) {
          std::cout << Json::Object()
                           .Add("size1", resp.size1())
                           .Add("size2", resp.size2())
                           .Add("root1", B64(resp.root1()))
                           .Add("root2", B64(resp.root2()))
                           .Add("hashes", arr)
                           .Add("verified_against", against)
                           .ToString()
                    << "\n";
        } else {
          std::cout << "consistency of size " << resp.size1() << " with size " << resp.size2()
                    << ": verified (new root against " << against
                    << ")\nroot1: " << B64(resp.root1()) << "\nroot2: " << B64(resp.root2())
                    << "\nproof (" << resp.hashes_size() << " hashes):\n"
                    << text;
        }
        return kExitOk;
      });
    };
  });
}

void AddMirrors(CLI::App* audit, GlobalOptions& g, Command& command) {
  auto* mirrors = audit->add_subcommand(
      "mirrors", "This vault's mirrors of its peers' logs: state, lag, fork evidence");
  mirrors->callback([&] {
    command = [&g] {
      return Run(g, [&](const Connection& conn) -> absl::StatusOr<int> {
        vault::v1::ListMirrorsResponse resp;
        VAULT_RETURN_IF_ERROR(
            FromGrpc(conn.audit_admin()->ListMirrors(conn.Context().get(), {}, &resp)));
        bool alarm = false;
        Json arr = Json::Array();
        for (const vault::v1::MirrorStatus& m : resp.mirrors()) {
          const std::string state = vault::v1::MirrorStatus::State_Name(m.state());
          alarm |= m.state() == vault::v1::MirrorStatus::FORKED ||
                   m.state() == vault::v1::MirrorStatus::INVALID;
          Json ev = Json::Array();
          for (const std::string& e : m.evidence()) ev.Push(e);
          arr.Push(Json::Object()
                       .Add("peer", m.peer())
                       .Add("state", state)
                       .Add("entries", m.entries())
                       .Add("checkpoint_size", m.checkpoint_size())
                       .Add("last_success_unix_ms", m.last_success_unix_ms())
                       .Add("last_error", m.last_error())
                       .Add("evidence", ev));
          if (!g.json()) {
            std::cout << m.peer() << "  " << state << "  entries " << m.entries() << "  checkpoint "
                      << m.checkpoint_size();
            if (!m.last_error().empty()) std::cout << "  (" << m.last_error() << ")";
            std::cout << "\n";
            for (int i = 0; i < m.evidence_size(); ++i) {
              std::cout << "  evidence " << i + 1 << ":\n" << m.evidence(i);
            }
          }
        }
        if (g.json()) std::cout << Json::Object().Add("mirrors", arr).ToString() << "\n";
        // A fork is the vault reporting a refusal of trust: scripts see a non-zero exit.
        return alarm ? kExitRefused : kExitOk;
      });
    };
  });
}

}  // namespace

void AddAuditCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  static AuditFlags flags;
  auto* audit = app.add_subcommand("audit", "The tamper-evident audit log and its mirrors");
  audit->require_subcommand(1);
  AddTail(audit, g, flags, command);
  AddShow(audit, g, flags, command);
  AddCheckpoint(audit, g, flags, command);
  AddVerify(audit, g, flags, command);
  AddProof(audit, g, flags, command);
  AddVerifierKey(audit, g, flags, command);
  AddMirrors(audit, g, command);
}

}  // namespace vault::vaultctl
