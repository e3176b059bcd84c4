// vaultctl agent logs, send and query: an agent's log, and messages and questions to it.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <memory>
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

// FILE's bytes; "-" is stdin.
absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path != "-") return common::ReadFile(path);
  std::string data(std::istreambuf_iterator<char>(std::cin), {});
  if (std::cin.bad()) return absl::DataLossError("could not read stdin");
  return data;
}

}  // namespace

// --- agent logs ---------------------------------------------------------------------------

int LogsCommand(const GlobalOptions& g, const AgentFlags& f) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::LogsRequest req;
  req.set_id(f.id);
  req.set_follow(f.follow);
  req.set_from_seq(f.from_seq);
  std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
  if (f.follow) ctx->set_deadline(absl::ToChronoTime(absl::Now() + kFollowDeadline));
  std::unique_ptr<grpc::ClientReader<vault::v1::AgentLogLine>> reader =
      conn->agents()->Logs(ctx.get(), req);
  vault::v1::AgentLogLine line;
  uint64_t next_seq = f.from_seq;  // where a new follow would continue
  bool cancelled = false;
  while (reader->Read(&line)) {
    next_seq = line.seq() + 1;
    if (g.json()) {
      std::cout << Json::Object()
                       .Add("seq", line.seq())
                       .Add("unix_ms", line.unix_ms())
                       .Add("level", line.level())
                       .Add("incarnation", line.incarnation())
                       .Add("message", line.message())
                       .ToString()
                << "\n";
    } else {
      // A message's own line breaks are kept, its continuation lines indented.
      std::cout << TimeText(line.unix_ms()) << " "
                << absl::StrFormat("%-5s", TerminalSafe(line.level())) << " [" << line.incarnation()
                << "] " << absl::StrReplaceAll(TerminalSafe(line.message()), {{"\n", "\n    "}})
                << "\n";
    }
    if (f.follow) std::cout.flush();
    if (!std::cout) {  // stdout is gone (a closed pipe): stop reading
      ctx->TryCancel();
      cancelled = true;
      break;
    }
  }
  absl::Status s = FromAgentsGrpc(reader->Finish());
  if (cancelled) return kExitFailure;
  if (f.follow && absl::IsDeadlineExceeded(s)) {
    std::cerr << "vaultctl: stopped following after " << absl::FormatDuration(kFollowDeadline)
              << "; continue with --from " << next_seq << "\n";
    return kExitOk;
  }
  if (!s.ok()) return ReportError(s, g.json());
  return kExitOk;
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
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::SendMessageResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Send(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout
        << Json::Object().Add("agent_id", f.id).Add("message_id", resp.message_id()).ToString()
        << "\n";
  } else {
    std::cout << resp.message_id() << "\n";
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
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  std::unique_ptr<grpc::ClientContext> ctx = conn->Context();
  // The call must outlast the agent's time to answer, with room for the vault to say it timed out.
  const absl::Duration needed = wait + absl::Seconds(5);
  if (conn->timeout() < needed) ctx->set_deadline(absl::ToChronoTime(absl::Now() + needed));
  vault::v1::QueryResponse resp;
  absl::Status s = FromAgentsGrpc(conn->agents()->Query(ctx.get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
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
