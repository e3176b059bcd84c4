// The `library` host imports (sdk/wasm/vault_agent.h is their C side). Each returns a google.rpc
// code as an i32 (0: OK) and writes its outputs through pointers into linear memory; a pointer or
// length outside memory is INVALID_ARGUMENT (3), never a trap. checkpoint and migrate capture the
// whole run inside the call (runner_host.h); made again after a restore, they send the same call.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "sandbox/wasm/runner_host.h"

namespace vault::sandbox::wasm {
namespace {

constexpr ValType I = ValType::kI32;
constexpr ValType L = ValType::kI64;

// Memory access for one call: every failure is a status the call returns as its code.
struct Mem {
  Engine& engine;
  absl::StatusOr<std::string> Bytes(uint64_t ptr, uint64_t len) {
    VAULT_ASSIGN_OR_RETURN(absl::string_view b, engine.Read(ptr, len));
    return std::string(b);
  }
  // Text for a host call's string field: INVALID_ARGUMENT unless it is UTF-8.
  absl::StatusOr<std::string> Text(uint64_t ptr, uint64_t len) {
    VAULT_ASSIGN_OR_RETURN(std::string t, Bytes(ptr, len));
    if (!IsUtf8(t)) return absl::InvalidArgumentError("the text is not UTF-8");
    return t;
  }
  absl::Status U32(uint64_t ptr, uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return engine.Write(ptr, absl::string_view(b, 4));
  }
  absl::Status U64(uint64_t ptr, uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    return engine.Write(ptr, absl::string_view(b, 8));
  }
  // Writes `data` into [ptr, ptr + cap) and its length to *len_ptr: RESOURCE_EXHAUSTED (the length
  // still written) when it does not fit.
  absl::Status Out(uint64_t ptr, uint64_t cap, uint64_t len_ptr, absl::string_view data) {
    VAULT_RETURN_IF_ERROR(U32(len_ptr, static_cast<uint32_t>(data.size())));
    if (data.size() > cap) {
      return absl::ResourceExhaustedError(
          absl::StrCat(data.size(), " bytes do not fit in a buffer of ", cap));
    }
    return engine.Write(ptr, data);
  }
};

// A host function returning one i32: the code of what `body` returns.
HostFunction Coded(std::vector<ValType> params, std::function<absl::Status(HostCall&, Mem&)> body) {
  return HostFunction{{std::move(params), {I}}, [body = std::move(body)](HostCall& c) {
                        Mem mem{c.engine};
                        absl::Status s = body(c, mem);
                        // Ending the program (exit) is not a code.
                        if (!s.ok() && s.GetPayload("vault.wasm/exit").has_value()) return s;
                        c.results[0] = CodeOf(s);
                        return absl::OkStatus();
                      }};
}

std::string Json(absl::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      absl::StrAppend(&out, absl::StrFormat("\\u%04x", c));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// The layout of vault_message (sdk/wasm/vault_agent.h).
constexpr uint64_t kMsgId = 0, kMsgReplyTo = 8, kMsgDataLen = 16, kMsgFromLen = 20,
                   kMsgTypeLen = 24, kMsgFrom = 28, kMsgType = 156, kMsgText = 128;

}  // namespace

absl::StatusOr<HostFunction> LibraryImport(RunnerHost& host, absl::string_view name) {
  if (name == "log") {
    // log(level, ptr, len)
    return Coded({I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string text, m.Bytes(c.args[1], c.args[2]));
      const uint64_t level = c.args[0] <= 3 ? c.args[0] : 0;
      return host.agent().Log(static_cast<vault::sdk::LogLevel>(level), Utf8Line(text));
    });
  }
  if (name == "heartbeat") {
    // heartbeat(out_checkpoint_wanted: u32*)
    return Coded({I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(bool wanted, host.agent().Heartbeat());
      return m.U32(c.args[0], wanted ? 1 : 0);
    });
  }
  if (name == "get_state") {
    // get_state(offset: i64, buf, cap, out_len: u32*, out_total: u64*): NOT_FOUND without one
    return Coded({L, I, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      const uint64_t cap = std::min<uint64_t>(c.args[2], host.agent().max_piece_bytes());
      VAULT_ASSIGN_OR_RETURN(vault::v1::StateResult r, host.agent().GetStateRange(c.args[0], cap));
      if (!r.present()) return absl::NotFoundError("the agent has no state");
      VAULT_RETURN_IF_ERROR(m.U64(c.args[4], r.size()));
      return m.Out(c.args[1], c.args[2], c.args[3], r.state());
    });
  }
  if (name == "checkpoint") {
    // checkpoint(): the whole run, captured here
    return Coded({}, [&host](HostCall& c, Mem&) -> absl::Status {
      if (c.resumed) return host.CheckpointWith(host.restored_from(), /*resumed=*/true);
      VAULT_ASSIGN_OR_RETURN(std::string snapshot, host.CaptureHere(c.engine));
      return host.CheckpointWith(snapshot, /*resumed=*/false);
    });
  }
  if (name == "migrate") {
    // migrate(vault, len): returns 0 on the destination, where the run goes on
    return Coded({I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string to, m.Text(c.args[0], c.args[1]));
      if (c.resumed) return host.MigrateWith(to, host.restored_from(), /*resumed=*/true);
      VAULT_ASSIGN_OR_RETURN(std::string snapshot, host.CaptureHere(c.engine));
      return host.MigrateWith(to, snapshot, /*resumed=*/false);
    });
  }
  if (name == "cas_put") {
    // cas_put(data, len, out_digest, cap, out_len: u32*): the digest as text
    return Coded({I, I, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string data, m.Bytes(c.args[0], c.args[1]));
      VAULT_ASSIGN_OR_RETURN(vault::v1::Digest d, host.agent().CasPut(data));
      return m.Out(c.args[2], c.args[3], c.args[4], vault::sdk::DigestToText(d));
    });
  }
  if (name == "cas_get") {
    // cas_get(digest, dlen, offset: i64, buf, cap, out_len: u32*)
    return Coded({I, I, L, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string text, m.Text(c.args[0], c.args[1]));
      VAULT_ASSIGN_OR_RETURN(vault::v1::Digest d, vault::sdk::ParseDigest(text));
      const uint64_t cap = std::min<uint64_t>(c.args[4], host.agent().max_piece_bytes());
      const uint64_t offset = std::min<uint64_t>(c.args[2], d.size());
      const uint64_t want = std::min<uint64_t>(cap, d.size() - offset);
      std::string data;
      if (want > 0) {
        VAULT_ASSIGN_OR_RETURN(data, host.agent().CasGet(d, offset, want));
      }
      return m.Out(c.args[3], c.args[4], c.args[5], data);
    });
  }
  if (name == "send") {
    // send(to, tlen, type, tylen, data, dlen, reply_to: i64, out_id: u64*)
    return Coded({I, I, I, I, I, I, L, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string to, m.Text(c.args[0], c.args[1]));
      VAULT_ASSIGN_OR_RETURN(std::string type, m.Text(c.args[2], c.args[3]));
      VAULT_ASSIGN_OR_RETURN(std::string data, m.Bytes(c.args[4], c.args[5]));
      VAULT_ASSIGN_OR_RETURN(uint64_t id, host.agent().Send(to, type, data, c.args[6]));
      return m.U64(c.args[7], id);
    });
  }
  if (name == "receive") {
    // receive(timeout_ms: i64, msg: vault_message*, data, cap): DEADLINE_EXCEEDED when none
    // came; RESOURCE_EXHAUSTED (data_len set, the message kept for the next receive) when its
    // data does not fit.
    return Coded({L, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      // Where it goes is checked first: a bad pointer must not cost the agent its message.
      VAULT_RETURN_IF_ERROR(c.engine.Read(c.args[1], kMsgType + kMsgText).status());
      VAULT_RETURN_IF_ERROR(c.engine.Read(c.args[2], c.args[3]).status());
      vault::v1::Message msg;
      vault::v1::WasmHostState& st = host.state();
      if (!st.held_message().empty()) {
        msg.ParseFromString(st.held_message());
      } else {
        const int64_t ms = static_cast<int64_t>(c.args[0]);
        VAULT_ASSIGN_OR_RETURN(std::optional<vault::v1::Message> got,
                               host.agent().Receive(absl::Milliseconds(std::max<int64_t>(ms, 0))));
        if (!got.has_value()) return absl::DeadlineExceededError("no message came");
        msg = *std::move(got);
      }
      const uint64_t at = c.args[1];
      VAULT_RETURN_IF_ERROR(m.U64(at + kMsgId, msg.id()));
      VAULT_RETURN_IF_ERROR(m.U64(at + kMsgReplyTo, msg.reply_to()));
      VAULT_RETURN_IF_ERROR(m.U32(at + kMsgDataLen, static_cast<uint32_t>(msg.data().size())));
      const std::string from = msg.from().substr(0, kMsgText);
      const std::string type = msg.type().substr(0, kMsgText);
      VAULT_RETURN_IF_ERROR(m.U32(at + kMsgFromLen, static_cast<uint32_t>(from.size())));
      VAULT_RETURN_IF_ERROR(m.U32(at + kMsgTypeLen, static_cast<uint32_t>(type.size())));
      VAULT_RETURN_IF_ERROR(c.engine.Write(at + kMsgFrom, from));
      VAULT_RETURN_IF_ERROR(c.engine.Write(at + kMsgType, type));
      if (msg.data().size() > c.args[3]) {
        st.set_held_message(msg.SerializeAsString());
        return absl::ResourceExhaustedError("the message's data does not fit: receive again");
      }
      st.clear_held_message();
      return c.engine.Write(c.args[2], msg.data());
    });
  }
  if (name == "self_inspect") {
    // self_inspect(buf, cap, out_len: u32*): JSON
    return Coded({I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(vault::v1::SelfInspectResult r, host.agent().SelfInspect());
      const std::string json =
          absl::StrCat("{\"agent_id\":", Json(r.agent_id()), ",\"vault\":", Json(r.vault()),
                       ",\"principal\":", Json(r.principal()),
                       ",\"home_vault\":", Json(r.home_vault()), ",\"hop\":", r.hop(), "}");
      return m.Out(c.args[0], c.args[1], c.args[2], json);
    });
  }
  if (name == "http_get") {
    // http_get(url, ulen, buf, cap, out_len: u32*, out_status: u32*)
    return Coded({I, I, I, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string url, m.Text(c.args[0], c.args[1]));
      VAULT_ASSIGN_OR_RETURN(vault::v1::HttpGetResult r, host.agent().HttpGet(url));
      VAULT_RETURN_IF_ERROR(m.U32(c.args[5], r.status()));
      return m.Out(c.args[2], c.args[3], c.args[4], r.body());
    });
  }
  if (name == "spawn_child") {
    // spawn_child(spec, slen, state, stlen (-1: none), out_id, cap, out_len: u32*)
    return Coded({I, I, I, I, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string spec, m.Text(c.args[0], c.args[1]));
      std::optional<std::string> state;
      if (static_cast<int32_t>(c.args[3]) >= 0) {
        VAULT_ASSIGN_OR_RETURN(state, m.Bytes(c.args[2], c.args[3]));
      }
      VAULT_ASSIGN_OR_RETURN(vault::v1::SpawnChildResult r,
                             host.agent().SpawnChildFromText(spec, state));
      return m.Out(c.args[4], c.args[5], c.args[6], r.agent_id());
    });
  }
  if (name == "share") {
    // share(digest, dlen, agent, alen)
    return Coded({I, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string text, m.Text(c.args[0], c.args[1]));
      VAULT_ASSIGN_OR_RETURN(std::string to, m.Text(c.args[2], c.args[3]));
      VAULT_ASSIGN_OR_RETURN(vault::v1::Digest d, vault::sdk::ParseDigest(text));
      std::vector<std::string> agents{to};
      return host.agent().Share(d, agents);
    });
  }
  if (name == "exit") {
    // exit(code, msg, mlen, result, rlen (-1: none)): returns only when the exit was refused
    return Coded({I, I, I, I, I}, [&host](HostCall& c, Mem& m) -> absl::Status {
      VAULT_ASSIGN_OR_RETURN(std::string message, m.Text(c.args[1], c.args[2]));
      std::optional<vault::v1::Digest> result;
      if (static_cast<int32_t>(c.args[4]) >= 0) {
        VAULT_ASSIGN_OR_RETURN(std::string bytes, m.Bytes(c.args[3], c.args[4]));
        VAULT_ASSIGN_OR_RETURN(result, host.agent().CasPut(bytes));
      }
      host.FlushOutput();
      // On success the SDK ends the process; it returns only with the vault's refusal.
      return host.agent().Exit(static_cast<int>(static_cast<int32_t>(c.args[0])), message, result);
    });
  }
  return absl::NotFoundError(absl::StrCat("library.", name, " is not a host call"));
}

}  // namespace vault::sandbox::wasm
