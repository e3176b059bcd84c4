// vaultctl agent logs, send and query: an agent's log, and messages and questions to it. With
// --as each reaches the agent on whichever member hosts it (agent_remote.cc), and logs -f
// follows it from vault to vault.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "vault/v1/agent.pb.h"
#include "vaultctl/commands.h"
#include "vaultctl/internal/agent_commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

// A follow stream (logs -f) ends after this: no call goes without a deadline.
constexpr absl::Duration kFollowDeadline = absl::Hours(24);
// What the vault waits for an answer when a query gives no --timeout (QueryRequest.timeout_ms 0).
constexpr absl::Duration kDefaultQueryTimeout = absl::Seconds(30);

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated
    for (size_t k = 1; k <= n; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// --as's key, when given.
absl::StatusOr<std::optional<capability::PrivateKey>> LoadAs(const AgentFlags& f) {
  if (f.as.empty()) return std::nullopt;
  return capability::PrivateKey::LoadFile(f.as);
}

// FILE's bytes; "-" is stdin.
absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path != "-") return common::ReadFile(path);
  std::string data(std::istreambuf_iterator<char>(std::cin), {});
  if (std::cin.bad()) return absl::DataLossError("could not read stdin");
  return data;
}

}  // namespace

// --- agent logs ---------------------------------------------------------------------------

namespace {

// A follow stream (logs -f) at one vault; each poll of a remote vault waits this long for a line.
constexpr uint32_t kRemoteWaitMs = 5000;

bool Over(vault::v1::AgentState s) {
  return s == vault::v1::TERMINATED || s == vault::v1::COMPLETED || s == vault::v1::FAILED;
}

// Prints one line; `vault` names the member it came from when it is not the connected one.
// False once stdout is gone (a closed pipe).
bool PrintLogLine(const GlobalOptions& g, const vault::v1::AgentLogLine& line,
                  const std::string& vault, bool flush) {
  if (g.json()) {
    Json o = Json::Object()
                 .Add("seq", line.seq())
                 .Add("unix_ms", line.unix_ms())
                 .Add("level", line.level())
                 .Add("incarnation", line.incarnation())
                 .Add("message", line.message());
    if (!vault.empty()) o.Add("vault", vault);
    std::cout << o.ToString() << "\n";
  } else {
    // A message's own line breaks are kept, its continuation lines indented.
    std::cout << TimeText(line.unix_ms()) << " "
              << absl::StrFormat("%-5s", TerminalSafe(line.level())) << " [" << line.incarnation()
              << (vault.empty() ? "" : "@") << TerminalSafe(vault) << "] "
              << absl::StrReplaceAll(TerminalSafe(line.message()), {{"\n", "\n    "}}) << "\n";
  }
  if (flush) std::cout.flush();
  return static_cast<bool>(std::cout);
}

// What a follower says when the agent leaves a vault or ends; true when it ended.
bool SayWhatHappened(const std::string& id, const vault::v1::AgentRecord& r,
                     const std::string& vault) {
  const std::string at = vault.empty() ? "" : absl::StrCat(" on ", vault);
  if (r.state() == vault::v1::DEPARTED) {
    std::cerr << "vaultctl: agent " << id << " departed" << at << " to "
              << TerminalSafe(r.migration().to_vault()) << " (hop " << r.hop() << ")\n";
    return false;
  }
  std::cerr << "vaultctl: agent " << id << " ended" << at << " (" << StateName(r.state());
  if (r.state() != vault::v1::TERMINATED) std::cerr << ", exit code " << r.exit_code();
  std::cerr << ")\n";
  return true;
}

// The log at the connected vault, streamed; with follow, until the agent ends or leaves here.
// *next is where the next read starts.
absl::Status StreamLocal(const GlobalOptions& g, const Connection& conn, const AgentFlags& f,
                         uint64_t* next, bool* stdout_gone) {
  vault::v1::LogsRequest req;
  req.set_id(f.id);
  req.set_follow(f.follow);
  req.set_from_seq(*next);
  std::unique_ptr<grpc::ClientContext> ctx = conn.Context();
  if (f.follow) ctx->set_deadline(absl::ToChronoTime(absl::Now() + kFollowDeadline));
  std::unique_ptr<grpc::ClientReader<vault::v1::AgentLogLine>> reader =
      conn.agents()->Logs(ctx.get(), req);
  vault::v1::AgentLogLine line;
  while (reader->Read(&line)) {
    *next = line.seq() + 1;
    if (!PrintLogLine(g, line, "", f.follow)) {
      ctx->TryCancel();
      *stdout_gone = true;
      break;
    }
  }
  absl::Status s = FromAgentsGrpc(reader->Finish());
  return *stdout_gone ? absl::OkStatus() : s;
}

}  // namespace

int LogsCommand(const GlobalOptions& g, const AgentFlags& f) {
  absl::StatusOr<std::optional<capability::PrivateKey>> as = LoadAs(f);
  if (!as.ok()) return ReportInputError(as.status(), g.json());
  const std::optional<capability::PrivateKey>& key = *as;
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  // Where each vault's log continues: line numbers are per vault.
  std::map<std::string, uint64_t> next;  // vault name ("" for the connected one) -> seq
  next[""] = f.from_seq;
  const absl::Time give_up = absl::Now() + kFollowDeadline;
  // Without --as: this vault's log. With it: where the agent runs now (with -f: this vault's
  // log first when it has one, then the agent's, vault after vault).
  Host at;  // at.vault "": the connected vault
  if (key.has_value() && !f.follow) {
    absl::StatusOr<Host> found = FindHost(*conn, f.id);
    if (!found.ok()) return ReportError(found.status(), g.json());
    at = *found;
    next[at.vault] = f.from_seq;  // (--from: of the first vault read)
  }
  std::string departed_to;
  for (bool first = true;; first = false) {
    if (at.vault.empty()) {
      bool stdout_gone = false;
      absl::Status s = StreamLocal(g, *conn, f, &next[""], &stdout_gone);
      if (stdout_gone) return kExitFailure;
      if (f.follow && absl::IsDeadlineExceeded(s)) {
        std::cerr << "vaultctl: stopped following after " << absl::FormatDuration(kFollowDeadline)
                  << "; continue with --from " << next[""] << "\n";
        return kExitOk;
      }
      const bool never_here = first && absl::IsNotFound(s) && key.has_value();
      if (!s.ok() && !never_here) return ReportError(s, g.json());
      if (!f.follow) return kExitOk;
      if (never_here) {
        absl::StatusOr<Host> found = FindHost(*conn, f.id);
        if (!found.ok()) return ReportError(found.status(), g.json());
        if (found->vault.empty()) return ReportError(s, g.json());
        at = *found;
        next[at.vault] = f.from_seq;
        continue;
      }
      {
        // The stream ended: the agent ended here, or left.
        absl::StatusOr<vault::v1::AgentStatus> st = GetAgent(*conn, f.id);
        if (!st.ok()) return ReportError(st.status(), g.json());
        if (SayWhatHappened(f.id, st->record(), "")) return kExitOk;
        departed_to = st->record().migration().to_vault();
        if (!key.has_value()) {
          std::cerr << "vaultctl: follow it there with --as KEY (its spawning principal or an "
                       "administrator of the vault that hosts it)\n";
          return kExitOk;
        }
      }
    } else {
      // Signed polls at the member that hosts it, through the connected vault.
      for (;;) {
        if (absl::Now() > give_up) {
          std::cerr << "vaultctl: stopped following after " << absl::FormatDuration(kFollowDeadline)
                    << " (at " << TerminalSafe(at.vault) << ", line " << next[at.vault] << ")\n";
          return kExitOk;
        }
        const absl::Time asked = absl::Now();
        vault::v1::ControlPayload p;
        p.set_agent_id(f.id);
        p.set_action(vault::v1::ControlPayload::LOGS);
        p.set_from_seq(next[at.vault]);
        p.set_wait_ms(f.follow ? kRemoteWaitMs : 0);
        absl::StatusOr<vault::v1::ControlResponse> resp =
            SignedControlAt(*conn, *key, at, p, absl::Milliseconds(p.wait_ms()));
        if (!resp.ok()) return ReportError(resp.status(), g.json());
        for (const vault::v1::AgentLogLine& line : resp->lines()) {
          next[at.vault] = line.seq() + 1;
          if (!PrintLogLine(g, line, at.vault, f.follow)) return kExitFailure;
        }
        if (!resp->lines().empty()) continue;  // more may wait
        if (!f.follow) return kExitOk;
        if (!resp->final_lines()) {
          // (An answer at once without a line: the agent is arriving or leaving there.)
          if (absl::Now() - asked < absl::Milliseconds(200)) {
            absl::SleepFor(absl::Milliseconds(200));
          }
          continue;
        }
        const vault::v1::AgentRecord& r = resp->status().record();
        if (Over(r.state())) {
          SayWhatHappened(f.id, r, at.vault);
          return kExitOk;
        }
        if (r.state() == vault::v1::DEPARTED) {
          SayWhatHappened(f.id, r, at.vault);
          departed_to = r.migration().to_vault();
          break;
        }
        absl::SleepFor(absl::Seconds(1));  // (recorded there, not running: agents are off)
      }
    }
    // It moved on: to the vault it departed to (each vault's part of the log in turn, even when
    // it has moved further since).
    absl::StatusOr<Host> next_host = MemberHost(*conn, departed_to);
    if (!next_host.ok()) return ReportError(next_host.status(), g.json());
    at = *next_host;
  }
}

// --- agent send / query -------------------------------------------------------------------

int SendCommand(const GlobalOptions& g, const AgentFlags& f) {
  vault::v1::SendMessageRequest req;
  req.set_id(f.id);
  req.set_type(f.type);
  if (!f.data.empty()) {
    absl::StatusOr<std::string> data = ReadInput(f.data);
    if (!data.ok()) return ReportInputError(data.status(), g.json());
    req.set_data(*std::move(data));
  }
  absl::StatusOr<std::optional<capability::PrivateKey>> as = LoadAs(f);
  if (!as.ok()) return ReportInputError(as.status(), g.json());
  const std::optional<capability::PrivateKey>& key = *as;
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  std::string at_vault;  // the member that took it, when not this one
  absl::StatusOr<uint64_t> id = [&]() -> absl::StatusOr<uint64_t> {
    if (!key.has_value()) {
      vault::v1::SendMessageResponse resp;
      VAULT_RETURN_IF_ERROR(
          FromAgentsGrpc(conn->agents()->Send(conn->Context().get(), req, &resp)));
      return resp.message_id();
    }
    vault::v1::ControlPayload p;
    p.set_agent_id(f.id);
    p.set_action(vault::v1::ControlPayload::SEND);
    p.set_type(req.type());
    p.set_data(req.data());
    VAULT_ASSIGN_OR_RETURN(vault::v1::ControlResponse resp,
                           SignedControl(*conn, *key, p, absl::ZeroDuration(), &at_vault));
    return resp.message_id();
  }();
  if (!id.ok()) return ReportError(id.status(), g.json());
  if (g.json()) {
    Json o = Json::Object().Add("agent_id", f.id).Add("message_id", *id);
    if (!at_vault.empty()) o.Add("vault", at_vault);
    std::cout << o.ToString() << "\n";
  } else {
    std::cout << *id << "\n";
  }
  return kExitOk;
}

int QueryCommand(const GlobalOptions& g, const AgentFlags& f) {
  vault::v1::QueryRequest req;
  req.set_id(f.id);
  req.set_question(f.question);
  absl::Duration wait = kDefaultQueryTimeout;
  absl::Status input = [&]() -> absl::Status {
    if (f.query_timeout_seconds != 0) {
      const double ms = std::ceil(f.query_timeout_seconds * 1000);
      if (!(ms >= 1 && ms <= static_cast<double>(UINT32_MAX))) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--timeout %g: expected 0.001 to 4294967 seconds (0: the vault's "
                            "default, 30)",
                            f.query_timeout_seconds));
      }
      req.set_timeout_ms(static_cast<uint32_t>(ms));
      wait = absl::Milliseconds(req.timeout_ms());
    }
    if (!f.data.empty()) {
      VAULT_ASSIGN_OR_RETURN(*req.mutable_data(), ReadInput(f.data));
    }
    return absl::OkStatus();
  }();
  if (!input.ok()) return ReportInputError(input, g.json());
  absl::StatusOr<std::optional<capability::PrivateKey>> as = LoadAs(f);
  if (!as.ok()) return ReportInputError(as.status(), g.json());
  const std::optional<capability::PrivateKey>& key = *as;
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  absl::StatusOr<vault::v1::QueryResponse> answer =
      [&]() -> absl::StatusOr<vault::v1::QueryResponse> {
    if (key.has_value()) {
      vault::v1::ControlPayload p;
      p.set_agent_id(f.id);
      p.set_action(vault::v1::ControlPayload::QUERY);
      p.set_question(req.question());
      p.set_data(req.data());
      p.set_timeout_ms(req.timeout_ms());
      std::string at_vault;
      VAULT_ASSIGN_OR_RETURN(vault::v1::ControlResponse resp,
                             SignedControl(*conn, *key, p, wait, &at_vault));
      return resp.answer();
    }
    std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
    // The call must outlast the agent's time to answer, with room for the vault to say it
    // timed out.
    const absl::Duration needed = wait + absl::Seconds(5);
    if (conn->timeout() < needed) ctx->set_deadline(absl::ToChronoTime(absl::Now() + needed));
    vault::v1::QueryResponse resp;
    VAULT_RETURN_IF_ERROR(FromAgentsGrpc(conn->agents()->Query(ctx.get(), req, &resp)));
    return resp;
  }();
  if (!answer.ok()) return ReportError(answer.status(), g.json());
  const vault::v1::QueryResponse& resp = *answer;
  if (g.json()) {
    Json o = Json::Object().Add("type", resp.type());
    if (IsValidUtf8(resp.answer())) {
      o.Add("answer", resp.answer());
    } else {
      o.Add("answer_base64", absl::Base64Escape(resp.answer()));
    }
    std::cout << o.ToString() << "\n";
  } else {
    std::cout.write(resp.answer().data(), static_cast<std::streamsize>(resp.answer().size()));
    std::cout.flush();
    if (!std::cout) return ReportError(absl::DataLossError("could not write the answer"), false);
  }
  return kExitOk;
}

}  // namespace vault::vaultctl
