// The host calls, one row each (agent/internal/host_call.h says what a row holds). The grant a
// call needs is worked out by its Authorize function (a path, a hash, a host, an agent); a row
// without one needs no grant (the agent's own state, its log, its heartbeat).
#include <array>

#include "absl/strings/escaping.h"
#include "agent/internal/host_call.h"
#include "capability/decision.h"
#include "cas/digest.h"

namespace vault::agent {

using vault::v1::HostRequest;
namespace hc = host_calls;

namespace {

// clang-format off
constexpr HostCallRow kRows[] = {
    // call                            op                   fast   durable audited authorize               handler
    {HostRequest::kLog,                "log",               true,  false,  true,   &hc::AuthorizeLog,        &hc::Log},
    {HostRequest::kHeartbeat,          "heartbeat",         true,  false,  false,  nullptr,                  &hc::Heartbeat},
    {HostRequest::kGetState,           "get_state",         false, false,  true,   nullptr,                  &hc::GetState},
    {HostRequest::kCheckpoint,         "checkpoint",        false, true,   true,   &hc::AuthorizeCheckpoint, &hc::Checkpoint},
    {HostRequest::kCasGet,             "cas_get",           false, false,  true,   &hc::AuthorizeCasGet,     &hc::CasGet},
    {HostRequest::kCasPut,             "cas_put",           false, true,   true,   &hc::AuthorizeCasWrite,   &hc::CasPut},
    {HostRequest::kCasUploadStart,     "cas_upload_start",  false, false,  true,   &hc::AuthorizeCasWrite,   &hc::CasUploadStart},
    {HostRequest::kCasUploadAppend,    "cas_upload_append", false, false,  true,   &hc::AuthorizeCasWrite,   &hc::CasUploadAppend},
    // durable unless it aborts (AuthorizeCasWrite): it stores an object
    {HostRequest::kCasUploadFinish,    "cas_upload_finish", false, false,  true,   &hc::AuthorizeCasWrite,   &hc::CasUploadFinish},
    {HostRequest::kReadFile,           "read_file",         false, false,  true,   &hc::AuthorizeReadPath,   &hc::ReadFile},
    {HostRequest::kWriteFile,          "write_file",        false, true,   true,   &hc::AuthorizeWritePath,  &hc::WriteFile},
    {HostRequest::kList,               "list",              false, false,  true,   &hc::AuthorizeReadPath,   &hc::List},
    {HostRequest::kNetConnect,         "net_connect",       false, true,   true,   &hc::AuthorizeNetConnect, &hc::NetConnect},
    {HostRequest::kHttpGet,            "http_get",          false, true,   true,   &hc::AuthorizeHttpGet,    &hc::HttpGet},
    // not on the reactor: it writes durably, and may reach another member
    {HostRequest::kSend,               "send",              false, false,  true,   &hc::AuthorizeSend,       &hc::Send},
    {HostRequest::kReceive,            "receive",           true,  false,  true,   nullptr,                  &hc::Receive},
    {HostRequest::kShare,              "share",             false, true,   true,   &hc::AuthorizeShare,      &hc::Share},
    {HostRequest::kSelfInspect,        "self_inspect",      true,  false,  true,   nullptr,                  &hc::SelfInspect},
    {HostRequest::kSpawnChild,         "spawn_child",       false, true,   true,   &hc::AuthorizeSpawnChild, &hc::SpawnChild},
    {HostRequest::kMigrate,            "migrate",           false, true,   true,   &hc::AuthorizeMigrate,    &hc::Migrate},
    {HostRequest::kExit,               "exit",              false, true,   true,   &hc::AuthorizeExit,       &hc::Exit},
    // counted, not audited: the time and random bytes are in the agent's effect log
    {HostRequest::kClock,              "clock",             true,  false,  false,  nullptr,                  &hc::Clock},
    {HostRequest::kRandom,             "random",            true,  false,  false,  nullptr,                  &hc::Random},
};
// clang-format on

// The rows by call case, built once.
struct Index {
  std::array<const HostCallRow*, 256> by_case{};
  Index() {
    for (const HostCallRow& row : kRows) by_case[static_cast<size_t>(row.call)] = &row;
  }
};

}  // namespace

const HostCallRow* FindHostCall(HostRequest::CallCase call) {
  static const Index* const index = new Index();
  const size_t i = static_cast<size_t>(call);
  return i < index->by_case.size() ? index->by_case[i] : nullptr;
}

vault::v1::Grant MakeGrant(vault::v1::Grant::Kind kind) {
  vault::v1::Grant g;
  g.set_kind(kind);
  return g;
}

std::string Sha256Hex(absl::string_view bytes) {
  return absl::BytesToHexString(cas::Sha256::Hash(bytes));
}

bool MayReadLocked(const LiveAgent& live, const std::string& sha256) {
  const vault::v1::AgentRecord& r = live.record;
  if (live.shared.contains(sha256) || (r.has_state() && r.state_digest().sha256() == sha256) ||
      r.spec().code_digest().sha256() == sha256) {
    return true;
  }
  vault::v1::Grant read = MakeGrant(vault::v1::Grant::READ);
  read.set_hash(sha256);
  return live.authority != nullptr && live.authority->Allows(read);
}

}  // namespace vault::agent
