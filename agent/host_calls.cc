// The capability proxy: every host call an agent makes, from its frame to its answer.
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/runtime_impl.h"
#include "capability/grant.h"
#include "cas/digest.h"
#include "common/status_macros.h"
#include "openssl/rand.h"
#include "spdlog/spdlog.h"

namespace vault::agent {
namespace {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

constexpr uint32_t kProtocolVersion = 1;
constexpr uint32_t kMaxInFlight = 32;
// The asynchronous audit entries of agents' calls are appended in batches at most this often.
constexpr absl::Duration kAuditBatchInterval = absl::Milliseconds(2);
constexpr size_t kFrameOverhead = 1024;  // room for the response's other fields
// Streaming CAS puts (cas_upload_*) an agent may have open at once.
constexpr size_t kMaxOpenUploads = 4;
// PutObject feeds a streaming upload in pieces of this size.
constexpr size_t kPutPieceBytes = 1 << 20;

// One host call on its way through the proxy.
struct Call {
  std::string op;                      // "cas_put"
  std::string subject;                 // path, digest, agent, host:port
  std::optional<Grant> grant;          // the authority it needs (none: every agent may)
  bool allowed_without_grant = false;  // e.g. reading its own state or a shared object
  bool durable = false;                // audited durably before the answer
  bool audited = true;
  bool deferred = false;  // answered later (a waiting receive)
  absl::Status status;
  HostResponse response;
  common::UniqueFd pass_fd;
  uint64_t bytes = 0;
  std::string output_bytes;  // what the SHA-256 "out" of the audit entry covers
};

Grant MakeGrant(Grant::Kind kind) {
  Grant g;
  g.set_kind(kind);
  return g;
}

std::string Sha256Hex(absl::string_view bytes) {
  return absl::BytesToHexString(cas::Sha256::Hash(bytes));
}

// Does some grant of `kind` name exactly `agent` (not "*")? Whatever its message types: this
// decides whether another principal's agent is visible at all, not what may be sent to it.
bool NamesExactly(const std::vector<Grant>& grants, Grant::Kind kind, const std::string& agent) {
  for (const Grant& g : grants) {
    if (g.kind() == kind && g.agent() == agent) return true;
  }
  return false;
}

absl::StatusOr<common::UniqueFd> ConnectTcp(const std::string& host, uint32_t port,
                                            absl::Duration timeout, std::string* address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), absl::StrCat(port).c_str(), &hints, &result);
  if (rc != 0) {
    return absl::NotFoundError(absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", host));
  absl::Time deadline = absl::Now() + timeout;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    common::UniqueFd fd(socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) continue;
    char text[NI_MAXHOST] = "";
    getnameinfo(ai->ai_addr, ai->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST);
    if (connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last =
          absl::UnavailableError(absl::StrCat("connect ", text, ":", port, ": ", strerror(errno)));
      continue;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    int wait_ms =
        static_cast<int>(std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
    if (poll(&p, 1, wait_ms) != 1) {
      last = absl::DeadlineExceededError(absl::StrCat("connect ", text, ":", port, ": timed out"));
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      last = absl::UnavailableError(absl::StrCat("connect ", text, ":", port, ": ", strerror(err)));
      continue;
    }
    int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
    *address =
        absl::StrCat(ai->ai_family == AF_INET6 ? absl::StrCat("[", text, "]") : text, ":", port);
    freeaddrinfo(result);
    return fd;
  }
  freeaddrinfo(result);
  return last;
}

}  // namespace

// One streaming CAS put of an agent (cas_upload_start/append/finish). The storage it reserved
// (`charged`) is given back by whoever removes it from LiveAgent::uploads, once.
struct HostUpload {
  explicit HostUpload(cas::Digest d) : digest(std::move(d)) {}
  const cas::Digest digest;
  uint64_t charged = 0;  // set before it is published in LiveAgent::uploads, then constant

  absl::Mutex mu;  // one append or finish at a time
  // The CAS's upload (which verifies the content at Finish); null when the CAS held the object
  // when the upload started: then `hash` checks that the agent sent its bytes all the same.
  std::unique_ptr<cas::Upload> upload ABSL_GUARDED_BY(mu);
  cas::Sha256 hash ABSL_GUARDED_BY(mu);
  uint64_t received ABSL_GUARDED_BY(mu) = 0;
};

absl::StatusOr<cas::PutOutcome> PutObject(cas::Store& store, const cas::Digest& digest,
                                          absl::string_view data) {
  if (digest.size() < store.options().chunking_threshold) return store.Put(digest, data);
  if (data.size() != digest.size()) {
    return absl::InvalidArgumentError(absl::StrCat("size mismatch: ", digest.ToString(), " claims ",
                                                   digest.size(), " bytes, got ", data.size()));
  }
  VAULT_ASSIGN_OR_RETURN(std::unique_ptr<cas::Upload> upload, store.StartUpload(digest, 0));
  for (size_t at = 0; at < data.size(); at += kPutPieceBytes) {
    VAULT_RETURN_IF_ERROR(upload->Append(data.substr(at, kPutPieceBytes)));
  }
  return upload->Finish();
}

bool AgentRuntime::Impl::MayReadLocked(const LiveAgent& live, const std::string& sha256) {
  const vault::v1::AgentRecord& r = live.record;
  if (live.shared.contains(sha256) || (r.has_state() && r.state_digest().sha256() == sha256) ||
      r.spec().code_digest().sha256() == sha256) {
    return true;
  }
  Grant read = MakeGrant(Grant::READ);
  read.set_hash(sha256);
  return live.authority != nullptr && live.authority->Allows(read);
}

void AgentRuntime::Impl::DropUploads(LiveAgent& live) {
  for (auto& [id, upload] : live.uploads) RefundStorage(live.principal, upload->charged);
  live.uploads.clear();
}

namespace {

// The agent's open upload `id`, or NOT_FOUND.
absl::StatusOr<std::shared_ptr<HostUpload>> OpenUpload(LiveAgent& live, uint64_t id) {
  absl::MutexLock lock(&live.mu);
  auto it = live.uploads.find(id);
  if (it == live.uploads.end()) {
    return absl::NotFoundError(
        absl::StrCat("no open upload ", id, " (never started, finished or dropped)"));
  }
  return it->second;
}

}  // namespace

void AgentRuntime::Impl::Audit(vault::v1::AuditEntry entry, bool durable) {
  if (durable) {
    absl::Status s = deps_.log->Append(std::move(entry)).status();
    if (!s.ok()) spdlog::error("audit append failed: {}", s.ToString());
    return;
  }
  absl::MutexLock lock(&audit_mu_);
  audit_queue_.push_back(std::move(entry));
}

void AgentRuntime::Impl::AuditLoop() {
  for (;;) {
    std::vector<vault::v1::AuditEntry> batch;
    {
      absl::MutexLock lock(&audit_mu_);
      audit_mu_.Await(absl::Condition(
          +[](Impl* impl) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return impl->audit_stop_ || !impl->audit_queue_.empty();
          },
          this));
      if (audit_queue_.empty()) return;  // stopped and drained
      batch.swap(audit_queue_);
    }
    // Entries are batched: the thread that queues one does not wake this one for each (a
    // wake-up in the middle of every host call, and a third thread contending for the CPUs
    // with the agent and the reactor). A batch is taken at most every kAuditBatchInterval.
    const absl::Time taken = absl::Now();
    for (size_t i = 0; i < batch.size(); i += 1000) {
      size_t n = std::min<size_t>(1000, batch.size() - i);
      absl::Status s = deps_.log->AppendMany(absl::MakeSpan(batch.data() + i, n)).status();
      if (!s.ok()) spdlog::error("audit append of {} agent entries failed: {}", n, s.ToString());
    }
    absl::MutexLock lock(&audit_mu_);
    audit_mu_.AwaitWithDeadline(
        absl::Condition(
            +[](Impl* impl) ABSL_NO_THREAD_SAFETY_ANALYSIS { return impl->audit_stop_; }, this),
        taken + kAuditBatchInterval);
  }
}

void AgentRuntime::Impl::HandleFrame(const std::shared_ptr<LiveAgent>& live, std::string frame) {
  vault::v1::GuestFrame g;
  if (!g.ParseFromString(frame)) {
    End(live, EndCause::kProtocol, "protocol: a frame that does not parse");
    return;
  }
  if (!live->welcomed) {
    if (!g.has_hello()) {
      End(live, EndCause::kProtocol, "protocol: the first frame must be a hello");
      return;
    }
    vault::v1::HostFrame reply;
    if (g.hello().version() != kProtocolVersion) {
      std::string why =
          absl::StrCat("host-call protocol version ", g.hello().version(),
                       " is not supported; this vault speaks version ", kProtocolVersion);
      reply.set_refused(why);
      SendFrame(live, reply);
      End(live, EndCause::kProtocol, why);
      return;
    }
    live->welcomed = true;
    vault::v1::Welcome* w = reply.mutable_welcome();
    w->set_version(kProtocolVersion);
    w->set_agent_id(live->id);
    w->set_vault(options_.vault_name);
    w->set_max_frame_bytes(options_.config.max_frame_bytes());
    {
      absl::MutexLock lock(&live->mu);
      w->set_incarnation(live->record.incarnation());
    }
    SendFrame(live, reply);
    return;
  }
  if (!g.has_request()) {
    End(live, EndCause::kProtocol,
        g.has_hello() ? "protocol: a second hello" : "protocol: an empty frame");
    return;
  }
  {
    // Once the agent is being ended nothing more it asks is served.
    absl::MutexLock lock(&live->mu);
    if (live->end_cause != EndCause::kNone) return;
  }
  HostRequest request = std::move(*g.mutable_request());
  const uint64_t call_id = request.call_id();
  auto refuse = [&](absl::Status s) {
    vault::v1::HostFrame reply;
    reply.mutable_response()->set_call_id(call_id);
    reply.mutable_response()->set_code(static_cast<int32_t>(s.code()));
    reply.mutable_response()->set_message(std::string(s.message()));
    SendFrame(live, reply);
  };
  if (request.call_case() == HostRequest::CALL_NOT_SET) {
    refuse(absl::UnimplementedError("unknown host call (this vault speaks protocol version 1)"));
    return;
  }
  {
    absl::MutexLock lock(&live->mu);
    live->record.mutable_counters()->set_host_calls(live->record.counters().host_calls() + 1);
  }
  // Heartbeats and exits are never limited (nor do they need the principal's quota looked up).
  if (request.call_case() != HostRequest::kHeartbeat && request.call_case() != HostRequest::kExit) {
    std::optional<vault::v1::TrustEntry> trust;
    if (absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(live->principal);
        k.ok()) {
      trust = policy_->Lookup(*k);
    }
    const uint32_t rate = trust.has_value() && trust->quota().max_calls_per_second() != 0
                              ? trust->quota().max_calls_per_second()
                              : options_.config.default_max_calls_per_second();
    if (!limiter_.Admit(live->principal, rate, absl::Now())) {
      refuse(absl::ResourceExhaustedError(
          absl::StrCat("host-call rate limit: ", rate, " per second for this principal's agents")));
      return;
    }
  }
  if (live->in_flight.load() >= kMaxInFlight) {
    refuse(absl::ResourceExhaustedError(
        absl::StrCat("too many host calls in flight (at most ", kMaxInFlight, ")")));
    return;
  }
  absl::Time received = absl::Now();
  switch (request.call_case()) {
    case HostRequest::kHeartbeat:
    case HostRequest::kLog:
    case HostRequest::kSelfInspect:
    case HostRequest::kSend:
    case HostRequest::kReceive:
      // Cheap and never blocking: answered here (counted in flight like the others, so that a
      // migration's drain waits for it).
      live->in_flight.fetch_add(1);
      RunCall(live, std::move(request), std::move(frame), received);
      live->in_flight.fetch_sub(1);
      return;
    default:
      break;
  }
  live->in_flight.fetch_add(1);
  bool queued = workers_->Schedule(live->principal, [this, live, request = std::move(request),
                                                     frame = std::move(frame), received]() mutable {
    RunCall(live, std::move(request), std::move(frame), received);
    live->in_flight.fetch_sub(1);
  });
  if (!queued) {
    live->in_flight.fetch_sub(1);
    refuse(absl::UnavailableError("the vault is stopping"));
  }
}

void AgentRuntime::Impl::RunCall(const std::shared_ptr<LiveAgent>& live, HostRequest request,
                                 std::string request_bytes, absl::Time received) {
  Call c;
  const vault::v1::AgentsConfig& cfg = options_.config;
  const size_t max_payload = cfg.max_frame_bytes() - kFrameOverhead;
  // 1. The operation and the authority it needs.
  switch (request.call_case()) {
    case HostRequest::kLog:
      c.op = "log";
      c.subject = vault::v1::LogRequest::Level_Name(request.log().level());
      break;
    case HostRequest::kHeartbeat:
      c.op = "heartbeat";
      c.audited = false;  // a liveness signal, not an effect: counted, not audited
      break;
    case HostRequest::kGetState:
      c.op = "get_state";
      break;
    case HostRequest::kCheckpoint:
      c.op = "checkpoint";
      c.durable = true;
      if (request.checkpoint().has_state_digest()) {
        // A state already in the CAS: the agent must be able to read it (as cas_get).
        const vault::v1::Digest& d = request.checkpoint().state_digest();
        c.subject = DigestText(d);
        if (!request.checkpoint().state().empty()) {
          c.status =
              absl::InvalidArgumentError("a checkpoint carries its state or names it, not both");
          break;
        }
        Grant g = MakeGrant(Grant::READ);
        g.set_hash(d.sha256());
        c.grant = g;
        absl::MutexLock lock(&live->mu);
        c.allowed_without_grant = MayReadLocked(*live, d.sha256());
      }
      break;
    case HostRequest::kCasGet: {
      c.op = "cas_get";
      c.subject = DigestText(request.cas_get().digest());
      Grant g = MakeGrant(Grant::READ);
      g.set_hash(request.cas_get().digest().sha256());
      c.grant = g;
      absl::MutexLock lock(&live->mu);
      const vault::v1::AgentRecord& r = live->record;
      const std::string& h = request.cas_get().digest().sha256();
      c.allowed_without_grant = live->shared.contains(h) ||
                                (r.has_state() && r.state_digest().sha256() == h) ||
                                r.spec().code_digest().sha256() == h;
      break;
    }
    case HostRequest::kCasPut:
      c.op = "cas_put";
      c.grant = MakeGrant(Grant::CAS_WRITE);
      c.durable = true;
      break;
    case HostRequest::kCasUploadStart:
      c.op = "cas_upload_start";
      c.subject = DigestText(request.cas_upload_start().digest());
      c.grant = MakeGrant(Grant::CAS_WRITE);
      break;
    case HostRequest::kCasUploadAppend:
      c.op = "cas_upload_append";
      c.subject = absl::StrCat("upload ", request.cas_upload_append().upload_id());
      c.grant = MakeGrant(Grant::CAS_WRITE);
      break;
    case HostRequest::kCasUploadFinish:
      c.op = "cas_upload_finish";
      c.subject = absl::StrCat("upload ", request.cas_upload_finish().upload_id());
      c.grant = MakeGrant(Grant::CAS_WRITE);
      c.durable = !request.cas_upload_finish().abort();  // it stores an object
      break;
    case HostRequest::kReadFile:
      c.op = "read_file";
      c.subject = request.read_file().path();
      c.grant = MakeGrant(Grant::READ);
      c.grant->set_path(request.read_file().path());
      break;
    case HostRequest::kWriteFile:
      c.op = "write_file";
      c.subject = request.write_file().path();
      c.grant = MakeGrant(Grant::WRITE);
      c.grant->set_path(request.write_file().path());
      c.durable = true;
      break;
    case HostRequest::kList:
      c.op = "list";
      c.subject = request.list().path();
      c.grant = MakeGrant(Grant::READ);
      c.grant->set_path(request.list().path());
      break;
    case HostRequest::kNetConnect:
      c.op = "net_connect";
      c.subject = absl::StrCat(absl::AsciiStrToLower(request.net_connect().host()), ":",
                               request.net_connect().port());
      c.grant = MakeGrant(Grant::NETWORK);
      c.grant->set_host(absl::AsciiStrToLower(request.net_connect().host()));
      c.grant->set_port(request.net_connect().port());
      c.durable = true;
      break;
    case HostRequest::kSend:
      c.op = "send";
      c.subject = request.send().to();
      if (request.send().to() != "operator") {
        // The sender needs SEND {to, [type]}; the receiver's RECEIVE {from, [type]} is checked
        // by the handler. A malformed type ([a-z0-9._-]{1,64}; "vault.*" is the vault's own,
        // except "vault.answer") is a bad call, not a denial.
        c.status = capability::ValidateMessageType(request.send().type());
        if (c.status.ok()) {
          c.grant = MakeGrant(Grant::SEND);
          c.grant->set_agent(request.send().to());
          c.grant->add_message_types(request.send().type());
        }
      }
      break;
    case HostRequest::kReceive:
      c.op = "receive";
      break;
    case HostRequest::kShare:
      c.op = "share";
      c.subject = DigestText(request.share().digest());
      c.durable = true;
      break;
    case HostRequest::kSelfInspect:
      c.op = "self_inspect";
      break;
    case HostRequest::kSpawnChild:
      c.op = "spawn_child";
      c.grant = MakeGrant(Grant::SPAWN);
      c.durable = true;
      break;
    case HostRequest::kMigrate:
      c.op = "migrate";
      c.subject = request.migrate().vault();
      c.grant = MakeGrant(Grant::MIGRATE);
      c.grant->add_vaults(request.migrate().vault());
      c.durable = true;
      if (request.migrate().has_state_digest() && !request.migrate().state().empty()) {
        c.status = absl::InvalidArgumentError("a migrate carries its state or names it, not both");
      }
      break;
    case HostRequest::kExit:
      c.op = "exit";
      c.subject = absl::StrCat(request.exit().code());
      c.durable = true;
      break;
    default:
      c.op = "unknown";
      c.status = absl::UnimplementedError("unknown host call");
      break;
  }
  // Paths name the vault's tree: anything else is a malformed call, not a denial.
  if (c.grant.has_value() && !c.grant->path().empty() && c.grant->path() != "/vault" &&
      !absl::StartsWith(c.grant->path(), "/vault/")) {
    c.status = absl::InvalidArgumentError(
        absl::StrCat("path \"", c.grant->path(), "\" is not in the vault's tree (/vault/...)"));
  }
  // 2. The decision: a lookup in the agent's cached authority.
  bool allowed = true;
  if (c.status.ok() && c.grant.has_value() && !c.allowed_without_grant) {
    if (absl::Status valid = capability::ValidateGrant(*c.grant); !valid.ok()) {
      c.status = absl::InvalidArgumentError(valid.message());
    } else {
      absl::MutexLock lock(&live->mu);
      allowed = live->authority != nullptr && live->authority->Allows(*c.grant);
    }
    if (c.status.ok() && !allowed) {
      c.status = absl::PermissionDeniedError(absl::StrCat(
          "denied: ", c.op, " needs the grant \"", capability::GrantToString(*c.grant), "\""));
    }
  }
  // 3. The handler; none runs once the agent is being handed over (its effects would be lost
  // or duplicated).
  if (c.status.ok()) {
    absl::MutexLock lock(&live->mu);
    if (live->migrating_out) {
      c.status = absl::UnavailableError("the agent is migrating: no host call runs during a hop");
    }
  }
  if (c.status.ok()) {
    HostResponse& resp = c.response;
    switch (request.call_case()) {
      case HostRequest::kLog: {
        uint64_t incarnation;
        {
          absl::MutexLock lock(&live->mu);
          incarnation = live->record.incarnation();
          live->record.mutable_counters()->set_log_lines(live->record.counters().log_lines() + 1);
        }
        std::string level = absl::AsciiStrToLower(c.subject);
        c.bytes = request.log().message().size();
        AppendLog(live->id, level, request.log().message(), incarnation);
        break;
      }
      case HostRequest::kHeartbeat: {
        absl::MutexLock lock(&live->mu);
        live->last_heartbeat = absl::Now();
        resp.mutable_heartbeat()->set_checkpoint_requested(live->checkpoint_requested);
        break;
      }
      case HostRequest::kGetState: {
        vault::v1::Digest d;
        bool has;
        {
          absl::MutexLock lock(&live->mu);
          has = live->record.has_state();
          d = live->record.state_digest();
        }
        resp.mutable_get_state()->set_present(has);
        if (!has) break;
        c.subject = DigestText(d);
        absl::StatusOr<cas::Digest> digest = ToDigest(d);
        if (!digest.ok()) {
          c.status = digest.status();
          break;
        }
        // A range of it (all of it by default), which must fit in a frame.
        const uint64_t size = digest->size();
        const uint64_t offset = request.get_state().offset();
        const uint64_t limit = request.get_state().limit();
        if (offset > size) {
          c.status = absl::OutOfRangeError(
              absl::StrCat("offset ", offset, " is past the end of the state (", size, " bytes)"));
          break;
        }
        const uint64_t want = limit == 0 ? size - offset : std::min(limit, size - offset);
        if (want > max_payload) {
          c.status = absl::ResourceExhaustedError(
              absl::StrCat("the range is ", want, " bytes of a state of ", size, "; read at most ",
                           max_payload, " per call (get_state offset/limit)"));
          break;
        }
        std::string data;
        data.reserve(want);
        if (want > 0) {
          c.status = deps_.cas->Read(*digest, offset, want, 1 << 20,
                                     [&](uint64_t, absl::string_view piece) {
                                       data.append(piece.data(), piece.size());
                                       return absl::OkStatus();
                                     });
          if (!c.status.ok()) break;
        }
        c.bytes = data.size();
        vault::v1::StateResult* out = resp.mutable_get_state();
        *out->mutable_digest() = d;
        out->set_size(size);
        out->set_state(std::move(data));
        break;
      }
      case HostRequest::kCheckpoint: {
        cas::Digest d;
        if (request.checkpoint().has_state_digest()) {
          // Named by digest (the agent may read it: checked above): it must be stored here.
          absl::StatusOr<cas::Digest> named = ToDigest(request.checkpoint().state_digest());
          absl::StatusOr<bool> present =
              named.ok() ? deps_.cas->Contains(*named) : absl::StatusOr<bool>(named.status());
          if (!present.ok() || !*present) {
            c.status =
                present.ok()
                    ? absl::NotFoundError(absl::StrCat("the checkpoint names ", named->ToString(),
                                                       ", which is not in this vault's CAS"))
                    : present.status();
            break;
          }
          d = *named;
        } else {
          const std::string& state = request.checkpoint().state();
          d = cas::Digest::Of(state);
          if (absl::Status s = PutObject(*deps_.cas, d, state).status(); !s.ok()) {
            c.status = s;
            break;
          }
          c.bytes = state.size();
        }
        c.subject = d.ToString();
        absl::MutexLock lock(&live->mu);
        *live->record.mutable_state_digest() = FromDigest(d);
        live->record.set_has_state(true);
        live->record.mutable_counters()->set_checkpoints(live->record.counters().checkpoints() + 1);
        live->checkpoint_requested = false;
        c.status = PersistLocked(*live);
        *resp.mutable_checkpoint()->mutable_digest() = FromDigest(d);
        break;
      }
      case HostRequest::kCasGet: {
        absl::StatusOr<cas::Digest> digest = ToDigest(request.cas_get().digest());
        if (!digest.ok()) {
          c.status = digest.status();
          break;
        }
        uint64_t offset = request.cas_get().offset();
        uint64_t limit = request.cas_get().limit();
        if (offset > digest->size()) {
          c.status = absl::OutOfRangeError("offset past the end of the object");
          break;
        }
        uint64_t want =
            limit == 0 ? digest->size() - offset : std::min(limit, digest->size() - offset);
        if (want > max_payload) {
          c.status = absl::ResourceExhaustedError(absl::StrCat("the range is ", want,
                                                               " bytes; read at most ", max_payload,
                                                               " per call (offset/limit)"));
          break;
        }
        std::string data;
        c.status =
            deps_.cas->Read(*digest, offset, want, 1 << 20, [&](uint64_t, absl::string_view piece) {
              data.append(piece.data(), piece.size());
              return absl::OkStatus();
            });
        if (!c.status.ok()) break;
        c.bytes = data.size();
        resp.mutable_cas_get()->set_size(digest->size());
        resp.mutable_cas_get()->set_data(std::move(data));
        break;
      }
      case HostRequest::kCasPut: {
        const std::string& data = request.cas_put().data();
        cas::Digest d = cas::Digest::Of(data);
        c.subject = d.ToString();
        c.bytes = data.size();
        // An object already stored costs nothing more.
        absl::StatusOr<bool> present = deps_.cas->Contains(d);
        const bool charged = !present.ok() || !*present;
        if (charged) {
          if (c.status = ChargeStorage(live->principal, data.size()); !c.status.ok()) break;
        }
        absl::StatusOr<cas::PutOutcome> out = PutObject(*deps_.cas, d, data);
        if (charged && (!out.ok() || out->already_present)) {
          RefundStorage(live->principal, data.size());
        }
        if (!out.ok()) {
          c.status = out.status();
          break;
        }
        {
          absl::MutexLock lock(&live->mu);
          if (!out->already_present) {
            live->record.mutable_counters()->set_bytes_written(
                live->record.counters().bytes_written() + data.size());
          }
          live->shared.insert(d.sha256());  // it may read back what it wrote
        }
        *resp.mutable_cas_put()->mutable_digest() = FromDigest(d);
        resp.mutable_cas_put()->set_already_present(out->already_present);
        break;
      }
      case HostRequest::kCasUploadStart: {
        absl::StatusOr<cas::Digest> d = ToDigest(request.cas_upload_start().digest());
        if (!d.ok()) {
          c.status = d.status();
          break;
        }
        c.subject = d->ToString();
        auto too_many = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(live->mu) -> absl::Status {
          if (live->uploads.size() < kMaxOpenUploads) return absl::OkStatus();
          return absl::ResourceExhaustedError(
              absl::StrCat("this agent has ", live->uploads.size(), " uploads open (at most ",
                           kMaxOpenUploads, "): finish or abort one first"));
        };
        {
          absl::MutexLock lock(&live->mu);
          if (c.status = too_many(); !c.status.ok()) break;
        }
        // As cas_put: an object already stored costs nothing more (but its bytes must still be
        // sent, and hash to it, before the agent may name it); else its size is reserved now.
        absl::StatusOr<bool> present = deps_.cas->Contains(*d);
        if (!present.ok()) {
          c.status = present.status();
          break;
        }
        auto up = std::make_shared<HostUpload>(*d);
        if (!*present) {
          if (c.status = ChargeStorage(live->principal, d->size()); !c.status.ok()) break;
          absl::StatusOr<std::unique_ptr<cas::Upload>> started = deps_.cas->StartUpload(*d, 0);
          if (!started.ok()) {
            RefundStorage(live->principal, d->size());
            c.status = started.status();
            break;
          }
          up->charged = d->size();
          absl::MutexLock upload_lock(&up->mu);
          up->upload = *std::move(started);
        }
        uint64_t id = 0;
        {
          absl::MutexLock lock(&live->mu);
          // Checked again: calls of one agent run on several workers; and an agent that ended
          // meanwhile had its uploads dropped already.
          c.status =
              live->running ? too_many() : absl::FailedPreconditionError("the agent is ending");
          if (c.status.ok()) {
            id = live->next_upload_id++;
            live->uploads.emplace(id, up);
          }
        }
        if (!c.status.ok()) {
          RefundStorage(live->principal, up->charged);
          break;
        }
        resp.mutable_cas_upload_start()->set_upload_id(id);
        resp.mutable_cas_upload_start()->set_max_piece_bytes(max_payload);
        break;
      }
      case HostRequest::kCasUploadAppend: {
        const auto& append = request.cas_upload_append();
        c.bytes = append.data().size();
        absl::StatusOr<std::shared_ptr<HostUpload>> open = OpenUpload(*live, append.upload_id());
        if (!open.ok()) {
          c.status = open.status();
          break;
        }
        std::shared_ptr<HostUpload> up = *std::move(open);
        absl::MutexLock upload_lock(&up->mu);
        if (append.offset() != up->received) {
          c.status = absl::FailedPreconditionError(
              absl::StrCat("upload ", append.upload_id(), " has received ", up->received,
                           " bytes; an append at offset ", append.offset(), " is out of order"));
          break;
        }
        if (append.data().size() > up->digest.size() - up->received) {
          c.status = absl::InvalidArgumentError(
              absl::StrCat("upload ", append.upload_id(), " would receive more than the ",
                           up->digest.size(), " bytes of ", up->digest.ToString()));
          break;
        }
        if (up->upload != nullptr) {
          c.status = up->upload->Append(append.data());
        } else {
          up->hash.Update(append.data());
        }
        if (!c.status.ok()) {
          // The CAS's upload is in an unknown state (or another one took the object over): the
          // agent starts again.
          std::shared_ptr<HostUpload> dropped;
          {
            absl::MutexLock lock(&live->mu);
            auto it = live->uploads.find(append.upload_id());
            if (it != live->uploads.end() && it->second == up) {
              dropped = std::move(it->second);
              live->uploads.erase(it);
            }
          }
          if (dropped != nullptr) RefundStorage(live->principal, dropped->charged);
          c.status = absl::Status(c.status.code(), absl::StrCat(c.status.message(), " (upload ",
                                                                append.upload_id(), " dropped)"));
          break;
        }
        up->received += append.data().size();
        resp.mutable_cas_upload_append()->set_received(up->received);
        break;
      }
      case HostRequest::kCasUploadFinish: {
        const auto& finish = request.cas_upload_finish();
        absl::StatusOr<std::shared_ptr<HostUpload>> open = OpenUpload(*live, finish.upload_id());
        if (!open.ok()) {
          c.status = open.status();
          break;
        }
        std::shared_ptr<HostUpload> up = *std::move(open);
        c.subject = up->digest.ToString();
        absl::MutexLock upload_lock(&up->mu);
        if (!finish.abort() && up->received != up->digest.size()) {
          // Stays open: the agent may send the rest.
          c.status = absl::FailedPreconditionError(
              absl::StrCat("upload ", finish.upload_id(), " has received ", up->received,
                           " of the ", up->digest.size(), " bytes of ", up->digest.ToString()));
          break;
        }
        // The upload ends here, whatever the outcome.
        bool taken = false;
        {
          absl::MutexLock lock(&live->mu);
          auto it = live->uploads.find(finish.upload_id());
          if (it != live->uploads.end() && it->second == up) {
            live->uploads.erase(it);
            taken = true;
          }
        }
        if (!taken) {
          c.status = absl::NotFoundError(
              absl::StrCat("upload ", finish.upload_id(), " was dropped meanwhile"));
          break;
        }
        if (finish.abort()) {
          RefundStorage(live->principal, up->charged);
          resp.mutable_cas_upload_finish();
          break;
        }
        absl::StatusOr<cas::PutOutcome> out;
        if (up->upload != nullptr) {
          out = up->upload->Finish();
        } else if (up->hash.Finish() != up->digest.sha256()) {
          out = absl::InvalidArgumentError(
              absl::StrCat("digest mismatch: the bytes sent do not hash to ", up->digest.ToString(),
                           "; nothing stored"));
        } else {
          out = cas::PutOutcome{.seq = 0, .already_present = true};
        }
        up->upload.reset();
        if (!out.ok() || out->already_present) RefundStorage(live->principal, up->charged);
        if (!out.ok()) {
          c.status = out.status();
          break;
        }
        c.bytes = up->digest.size();
        {
          absl::MutexLock lock(&live->mu);
          if (!out->already_present) {
            live->record.mutable_counters()->set_bytes_written(
                live->record.counters().bytes_written() + up->digest.size());
          }
          live->shared.insert(up->digest.sha256());  // it may read back (and name) what it put
        }
        *resp.mutable_cas_upload_finish()->mutable_digest() = FromDigest(up->digest);
        resp.mutable_cas_upload_finish()->set_already_present(out->already_present);
        break;
      }
      case HostRequest::kReadFile: {
        uint64_t limit = request.read_file().limit();
        absl::StatusOr<FileRead> read = files_->Read(
            request.read_file().path(), request.read_file().offset(), limit, max_payload);
        if (!read.ok()) {
          c.status = read.status();
          break;
        }
        c.bytes = read->data.size();
        resp.mutable_read_file()->set_size(read->size);
        resp.mutable_read_file()->set_data(std::move(read->data));
        break;
      }
      case HostRequest::kWriteFile: {
        c.bytes = request.write_file().data().size();
        if (c.status = ChargeStorage(live->principal, c.bytes); !c.status.ok()) break;
        absl::StatusOr<uint64_t> size =
            files_->Write(request.write_file().path(), request.write_file().data(),
                          request.write_file().append());
        if (!size.ok()) {
          RefundStorage(live->principal, c.bytes);
          c.status = size.status();
          break;
        }
        {
          absl::MutexLock lock(&live->mu);
          live->record.mutable_counters()->set_bytes_written(
              live->record.counters().bytes_written() + c.bytes);
        }
        resp.mutable_write_file()->set_size(*size);
        break;
      }
      case HostRequest::kList: {
        absl::StatusOr<std::vector<FileEntry>> entries = files_->List(request.list().path(), 10000);
        if (!entries.ok()) {
          c.status = entries.status();
          break;
        }
        for (FileEntry& e : *entries) {
          vault::v1::ListResult::Entry* out = resp.mutable_list()->add_entries();
          out->set_name(std::move(e.name));
          out->set_directory(e.directory);
          out->set_size(e.size);
        }
        break;
      }
      case HostRequest::kNetConnect: {
        const auto& nc = request.net_connect();
        if (nc.port() == 0 || nc.port() > 65535) {
          c.status = absl::InvalidArgumentError("port must be 1-65535");
          break;
        }
        absl::Duration timeout = absl::Milliseconds(nc.timeout_ms() == 0 ? 5000 : nc.timeout_ms());
        timeout = std::min(timeout, absl::Milliseconds(cfg.call_deadline_ms()));
        std::string address;
        absl::StatusOr<common::UniqueFd> fd =
            ConnectTcp(absl::AsciiStrToLower(nc.host()), nc.port(), timeout, &address);
        if (!fd.ok()) {
          c.status = fd.status();
          break;
        }
        c.pass_fd = *std::move(fd);
        resp.mutable_net_connect()->set_address(address);
        c.output_bytes = address;
        break;
      }
      case HostRequest::kSend: {
        const auto& send = request.send();
        c.bytes = send.data().size();
        if (send.to() == "operator") {
          // Only as the answer to an operator's query addressed to this agent.
          absl::MutexLock lock(&mu_);
          auto it = queries_.find(send.reply_to());
          if (send.reply_to() == 0 || it == queries_.end() || it->second->agent != live->id) {
            c.status = absl::NotFoundError("no query from the operator is waiting for this reply");
            break;
          }
          it->second->answered = true;
          it->second->response.set_type(send.type());
          it->second->response.set_answer(send.data());
          queries_cv_.SignalAll();
          resp.mutable_send()->set_message_id(send.reply_to());
          break;
        }
        // Isolation (RFC-0006 §9): another principal's agent is addressable only through grants
        // naming it exactly, on both sides; otherwise it is as if it did not exist.
        std::shared_ptr<LiveAgent> to = Find(send.to());
        absl::Status hidden = absl::NotFoundError(
            absl::StrCat("no agent ", send.to(), " that this agent may send to"));
        // An agent that departed from here, to a sender that may address it (its principal's
        // agents, or grants naming it): refused with where it went.
        auto to_departed_visible = [&](const std::string& id) {
          absl::StatusOr<vault::v1::AgentRecord> r = store_->Get(id);
          if (!r.ok() || r->state() != vault::v1::DEPARTED) return false;
          if (r->principal() == live->principal) return true;
          absl::MutexLock lock(&live->mu);
          std::vector<Grant> grants(live->record.grants().begin(), live->record.grants().end());
          return NamesExactly(grants, Grant::SEND, id);
        };
        if (to == nullptr && to_departed_visible(send.to())) {
          c.status = absl::FailedPreconditionError(DepartedNote(send.to()));
          break;
        }
        if (to == nullptr || to.get() == live.get()) {
          c.status = hidden;
          break;
        }
        std::vector<Grant> sender_grants, receiver_grants;
        {
          absl::MutexLock lock(&live->mu);
          sender_grants.assign(live->record.grants().begin(), live->record.grants().end());
        }
        bool receiver_accepts;
        {
          absl::MutexLock lock(&to->mu);
          receiver_grants.assign(to->record.grants().begin(), to->record.grants().end());
          Grant from = MakeGrant(Grant::RECEIVE);
          from.set_agent(live->id);
          from.add_message_types(send.type());
          receiver_accepts = to->authority != nullptr && to->authority->Allows(from);
        }
        if (to->principal != live->principal &&
            (!NamesExactly(sender_grants, Grant::SEND, to->id) ||
             !NamesExactly(receiver_grants, Grant::RECEIVE, live->id))) {
          c.status = hidden;
          break;
        }
        if (!receiver_accepts) {
          c.status = absl::PermissionDeniedError(
              absl::StrCat("denied: agent ", to->id, " does not accept \"", send.type(),
                           "\" messages from ", live->id, " (it has no receive grant for it)"));
          break;
        }
        vault::v1::Message m;
        m.set_from(live->id);
        m.set_type(send.type());
        m.set_data(send.data());
        m.set_reply_to(send.reply_to());
        absl::StatusOr<uint64_t> id = Deliver(to, std::move(m));
        if (!id.ok()) {
          c.status = id.status();
          break;
        }
        {
          absl::MutexLock lock(&live->mu);
          live->record.mutable_counters()->set_messages_sent(
              live->record.counters().messages_sent() + 1);
        }
        resp.mutable_send()->set_message_id(*id);
        break;
      }
      case HostRequest::kReceive: {
        absl::MutexLock lock(&live->mu);
        if (live->pending_receive.has_value()) {
          c.status = absl::FailedPreconditionError("a receive is already waiting");
          break;
        }
        if (!live->mailbox.empty()) {
          *resp.mutable_receive()->mutable_message() = std::move(live->mailbox.front());
          live->mailbox.pop_front();
          c.subject = resp.receive().message().from();
          c.bytes = resp.receive().message().data().size();
        } else if (request.receive().timeout_ms() == 0) {
          resp.mutable_receive()->set_timed_out(true);
        } else {
          absl::Time now = absl::Now();
          live->pending_receive = LiveAgent::PendingReceive{
              request.call_id(), now + absl::Milliseconds(request.receive().timeout_ms()), now,
              std::move(request_bytes)};
          c.deferred = true;
        }
        break;
      }
      case HostRequest::kShare: {
        const auto& share = request.share();
        // The sharer must be able to read it, and address every agent it shares with.
        Grant read = MakeGrant(Grant::READ);
        read.set_hash(share.digest().sha256());
        bool can_read;
        std::vector<Grant> grants;
        {
          absl::MutexLock lock(&live->mu);
          can_read = live->shared.contains(share.digest().sha256()) ||
                     (live->authority != nullptr && live->authority->Allows(read));
          grants.assign(live->record.grants().begin(), live->record.grants().end());
        }
        if (!can_read) {
          c.status = absl::PermissionDeniedError(
              "denied: an agent can share only an object it may read itself");
          break;
        }
        absl::StatusOr<bool> present = [&]() -> absl::StatusOr<bool> {
          VAULT_ASSIGN_OR_RETURN(cas::Digest d, ToDigest(share.digest()));
          return deps_.cas->Contains(d);
        }();
        if (!present.ok() || !*present) {
          c.status = present.ok() ? absl::NotFoundError("no such object in this vault's CAS")
                                  : present.status();
          break;
        }
        std::vector<std::shared_ptr<LiveAgent>> targets;
        for (const std::string& id : share.agents()) {
          std::shared_ptr<LiveAgent> to = Find(id);
          if (to == nullptr ||
              (to->principal != live->principal && !NamesExactly(grants, Grant::SEND, id))) {
            c.status = absl::NotFoundError(
                absl::StrCat("no agent ", id, " that this agent may share with"));
            break;
          }
          targets.push_back(std::move(to));
        }
        if (!c.status.ok()) break;
        for (const auto& to : targets) {
          absl::MutexLock lock(&to->mu);
          to->shared.insert(share.digest().sha256());
        }
        c.subject =
            absl::StrCat(DigestText(share.digest()), " -> ", absl::StrJoin(share.agents(), ","));
        resp.mutable_share();
        break;
      }
      case HostRequest::kSelfInspect: {
        absl::MutexLock lock(&live->mu);
        const vault::v1::AgentRecord& r = live->record;
        vault::v1::SelfInspectResult* out = resp.mutable_self_inspect();
        out->set_agent_id(live->id);
        out->set_vault(options_.vault_name);
        out->set_principal(live->principal);
        out->set_parent(r.parent());
        *out->mutable_grants() = r.grants();
        *out->mutable_constraints() = r.constraints();
        out->set_hop(r.hop());
        out->set_home_vault(r.home_vault().empty() ? options_.vault_name : r.home_vault());
        out->set_incarnation(r.incarnation());
        out->set_purpose(r.spec().purpose());
        sandbox::Limits limits;
        limits.memory_bytes = r.constraints().has_max_memory_bytes()
                                  ? r.constraints().max_memory_bytes()
                                  : cfg.default_memory_bytes();
        uint64_t runtime_ms = r.constraints().has_max_runtime_ms()
                                  ? r.constraints().max_runtime_ms()
                                  : cfg.default_runtime_ms();
        uint64_t cpu_ms =
            r.constraints().has_max_cpu_ms() ? r.constraints().max_cpu_ms() : cfg.default_cpu_ms();
        uint64_t storage = r.constraints().has_max_storage_bytes()
                               ? r.constraints().max_storage_bytes()
                               : cfg.default_storage_bytes();
        int64_t up_ms = absl::ToInt64Milliseconds(absl::Now() - live->started);
        out->set_runtime_remaining_ms(
            std::max<int64_t>(0, static_cast<int64_t>(runtime_ms) - up_ms));
        if (live->handle != nullptr) {
          absl::StatusOr<sandbox::Usage> u = live->handle->GetUsage();
          if (u.ok()) {
            out->set_memory_bytes(u->memory_current_bytes);
            out->set_memory_remaining_bytes(limits.memory_bytes > u->memory_current_bytes
                                                ? limits.memory_bytes - u->memory_current_bytes
                                                : 0);
            int64_t used = absl::ToInt64Milliseconds(u->cpu_time);
            out->set_cpu_remaining_ms(std::max<int64_t>(0, static_cast<int64_t>(cpu_ms) - used));
            out->set_storage_remaining_bytes(storage > u->work_bytes ? storage - u->work_bytes : 0);
          }
        }
        break;
      }
      case HostRequest::kSpawnChild: {
        const auto& sc = request.spawn_child();
        vault::v1::AgentSpec spec = sc.spec();
        if (!spec.has_code_digest() || spec.purpose().empty()) {
          c.status = absl::InvalidArgumentError("a child's spec needs a purpose and a code digest");
          break;
        }
        if (absl::Status v = capability::ValidateGrants(spec.grants()); !v.ok()) {
          c.status = v;
          break;
        }
        vault::v1::AgentRecord child;
        bool narrowed;
        {
          absl::MutexLock lock(&live->mu);
          const vault::v1::AgentRecord& r = live->record;
          Grant read = MakeGrant(Grant::READ);
          read.set_hash(spec.code_digest().sha256());
          if (spec.code_digest().sha256() != r.spec().code_digest().sha256() &&
              !live->shared.contains(spec.code_digest().sha256()) &&
              !live->authority->Allows(read)) {
            c.status = absl::PermissionDeniedError(
                "denied: a child's code must be the parent's own or an object it may read");
            break;
          }
          narrowed = !capability::IsSubset(spec.grants(), r.grants()).ok();
          for (Grant& g : capability::Intersect(spec.grants(), r.grants()))
            *child.add_grants() = std::move(g);
          *child.mutable_constraints() =
              capability::IntersectConstraints(spec.constraints(), r.constraints());
        }
        std::string raw(8, '\0');
        RAND_bytes(reinterpret_cast<unsigned char*>(raw.data()), 8);
        child.set_id(absl::StrCat("a-", absl::BytesToHexString(raw)));
        child.set_principal(live->principal);
        child.set_parent(live->id);
        *spec.mutable_grants() = child.grants();
        *child.mutable_spec() = spec;
        std::optional<vault::v1::TrustEntry> trust;
        if (absl::StatusOr<capability::PublicKey> k =
                capability::PublicKey::FromText(live->principal);
            k.ok()) {
          trust = policy_->Lookup(*k);
        }
        uint32_t max_agents = trust.has_value() && trust->quota().max_agents() != 0
                                  ? trust->quota().max_agents()
                                  : cfg.default_max_agents();
        if (CountLive(live->principal) >= max_agents) {
          c.status = absl::ResourceExhaustedError(
              absl::StrCat("this principal already runs ", max_agents, " agents here (its quota)"));
          break;
        }
        absl::StatusOr<std::shared_ptr<LiveAgent>> spawned =
            CreateAndLaunch(child, sc.has_state() ? &sc.state() : nullptr);
        if (!spawned.ok()) {
          c.status = spawned.status();
          break;
        }
        c.subject = child.id();
        if (narrowed) {
          vault::v1::AuditEntry warn = audit::MakeEntry(
              live->id, "agent.spawn.narrowed", child.id(), vault::v1::AuditEntry::ALLOWED,
              "the child asked for more than its parent holds; its grants were narrowed",
              {{"asked", absl::StrCat(sc.spec().grants_size(), " grants")},
               {"granted", absl::StrCat(child.grants_size(), " grants")}});
          warn.set_priority(vault::v1::AuditEntry::HIGH);
          Audit(std::move(warn), /*durable=*/true);
        }
        vault::v1::SpawnChildResult* out = resp.mutable_spawn_child();
        out->set_agent_id(child.id());
        *out->mutable_grants() = child.grants();
        out->set_narrowed(narrowed);
        break;
      }
      case HostRequest::kMigrate: {
        // The hop runs on the migration pool, not on this worker (a transfer takes as long as
        // its objects). It answers the call only with a failure; on success the process ends
        // (the agent continues at the destination).
        const uint64_t call_id = request.call_id();
        // A state named by digest: one the agent may read (as a checkpoint's), stored here.
        std::optional<cas::Digest> named;
        if (request.migrate().has_state_digest()) {
          absl::StatusOr<cas::Digest> d = ToDigest(request.migrate().state_digest());
          if (!d.ok()) {
            c.status = d.status();
            break;
          }
          bool may;
          {
            absl::MutexLock lock(&live->mu);
            may = MayReadLocked(*live, d->sha256());
          }
          if (!may) {
            c.status = absl::PermissionDeniedError(absl::StrCat(
                "denied: migrate names the state ", d->ToString(),
                ", which this agent may not read (it did not put it, and no grant covers it)"));
            break;
          }
          absl::StatusOr<bool> present = deps_.cas->Contains(*d);
          if (!present.ok() || !*present) {
            c.status = present.ok()
                           ? absl::NotFoundError(absl::StrCat("the migrate names ", d->ToString(),
                                                              ", which is not in this vault's CAS"))
                           : present.status();
            break;
          }
          named = *d;
        }
        {
          absl::MutexLock lock(&live->mu);
          live->migrate_call_id = call_id;
        }
        c.deferred = true;
        Audit(audit::MakeEntry(live->id, "host.migrate", request.migrate().vault(),
                               vault::v1::AuditEntry::ALLOWED, "",
                               {{"call_id", absl::StrCat(call_id)},
                                {"state", named.has_value() ? named->ToString()
                                                            : Sha256Hex(request.migrate().state())},
                                {"grant", capability::GrantToString(*c.grant)}}),
              /*durable=*/true);
        bool queued = migrations_->Schedule(
            [this, live, call_id, to = request.migrate().vault(), state = request.migrate().state(),
             named] { MigrateForAgent(live, call_id, to, state, named); });
        if (!queued) {
          absl::MutexLock lock(&live->mu);
          live->migrate_call_id = 0;
          c.deferred = false;
          c.status = absl::UnavailableError("the vault is stopping");
        }
        break;
      }
      case HostRequest::kExit: {
        if (request.exit().has_result()) {
          absl::StatusOr<cas::Digest> d = ToDigest(request.exit().result());
          absl::StatusOr<bool> present = d.ok() ? deps_.cas->Contains(*d) : d.status();
          if (!present.ok() || !*present) {
            c.status =
                present.ok()
                    ? absl::NotFoundError("the result names an object that is not in the CAS")
                    : present.status();
            break;
          }
          c.subject = d->ToString();
        }
        absl::MutexLock lock(&live->mu);
        live->exit_requested = true;
        live->exit_code = request.exit().code();
        live->end_cause = EndCause::kExitCall;
        live->end_reason = request.exit().message().empty()
                               ? absl::StrCat("exit(", request.exit().code(), ")")
                               : request.exit().message();
        if (request.exit().has_result()) *live->record.mutable_result() = request.exit().result();
        // The process gets a moment to leave by itself, then it is ended.
        live->exit_deadline = absl::Now() + absl::Seconds(1);
        break;
      }
      default:
        break;
    }
  }
  if (c.deferred) return;  // answered by Deliver or ExpireReceive
  // 4. The answer, and the audit entry for it.
  HostResponse& resp = c.response;
  resp.set_call_id(request.call_id());
  if (!c.status.ok()) {
    resp.clear_result();
    resp.set_code(static_cast<int32_t>(c.status.code()));
    resp.set_message(std::string(c.status.message()));
  }
  bool denied = c.status.code() == absl::StatusCode::kPermissionDenied;
  // Calls of one agent may run on several workers at once: the denial is counted, and the
  // decision to end the agent taken, under its lock before anything is answered, and a call
  // that finds the agent being ended is dropped unanswered.
  uint64_t denials = 0;
  bool newly_flagged = false, end_now = false;
  std::string end_reason;
  {
    absl::MutexLock lock(&live->mu);
    if (live->end_cause != EndCause::kNone && live->end_cause != EndCause::kExitCall) return;
    if (denied) {
      denials = live->record.counters().denials() + 1;
      live->record.mutable_counters()->set_denials(denials);
      if (denials >= options_.config.flag_after_denials() && !live->flagged) {
        live->flagged = true;
        newly_flagged = true;
      }
      if (denials >= options_.config.terminate_after_denials()) {
        end_now = true;
        end_reason = absl::StrCat("denial limit: ", denials, " denied host calls");
        live->end_cause = EndCause::kWatchdog;
        live->end_reason = end_reason;
      }
    }
  }
  // The audit entry: durable ones are written before the answer; asynchronous ones (most calls,
  // denials included) after it, so that hashing and queueing them do not delay the answer.
  std::string out_bytes;
  if (c.audited) {
    out_bytes = c.output_bytes;
    if (out_bytes.empty() && resp.result_case() != HostResponse::RESULT_NOT_SET) {
      resp.SerializeToString(&out_bytes);
    }
  }
  const absl::Duration duration = absl::Now() - received;
  auto audit = [&](bool durable) {
    std::vector<std::pair<std::string, std::string>> details = {
        {"call_id", absl::StrCat(request.call_id())},
        {"duration_us", absl::StrCat(absl::ToInt64Microseconds(duration))},
        {"in", Sha256Hex(request_bytes)},
        {"out", Sha256Hex(out_bytes)},
        {"bytes", absl::StrCat(c.bytes)},
    };
    if (c.grant.has_value()) details.emplace_back("grant", capability::GrantToString(*c.grant));
    if (!c.status.ok() && !denied) details.emplace_back("error", std::string(c.status.message()));
    Audit(audit::MakeEntry(live->id, absl::StrCat("host.", c.op), c.subject,
                           denied ? vault::v1::AuditEntry::DENIED : vault::v1::AuditEntry::ALLOWED,
                           denied ? std::string(c.status.message()) : std::string(),
                           std::move(details)),
          durable);
  };
  const bool durable = c.durable && !denied;
  if (c.audited && durable) audit(/*durable=*/true);
  vault::v1::HostFrame frame;
  *frame.mutable_response() = std::move(resp);
  SendFrame(live, frame, std::move(c.pass_fd));
  if (c.audited && !durable) audit(/*durable=*/false);
  if (newly_flagged) {
    vault::v1::AuditEntry e =
        audit::MakeEntry(deps_.vault_key->public_key().ToText(), "agent.flagged", live->id,
                         vault::v1::AuditEntry::ALLOWED, "repeated denied host calls",
                         {{"denials", absl::StrCat(denials)}});
    e.set_priority(vault::v1::AuditEntry::HIGH);
    Audit(std::move(e), /*durable=*/true);
  }
  if (end_now) End(live, EndCause::kWatchdog, end_reason);
}

absl::StatusOr<uint64_t> AgentRuntime::Impl::Deliver(const std::shared_ptr<LiveAgent>& to,
                                                     vault::v1::Message message) {
  if (message.id() == 0) message.set_id(next_message_id_.fetch_add(1));
  message.set_sent_unix_ms(absl::ToUnixMillis(absl::Now()));
  const uint64_t id = message.id();
  std::optional<LiveAgent::PendingReceive> waiting;
  {
    absl::MutexLock lock(&to->mu);
    if (!to->running) {
      return absl::FailedPreconditionError(absl::StrCat("agent ", to->id, " is not running"));
    }
    to->record.mutable_counters()->set_messages_received(to->record.counters().messages_received() +
                                                         1);
    if (to->pending_receive.has_value()) {
      waiting = std::move(to->pending_receive);
      to->pending_receive.reset();
    } else {
      if (to->mailbox.size() >= options_.config.mailbox_capacity()) {
        to->record.mutable_counters()->set_messages_received(
            to->record.counters().messages_received() - 1);
        return absl::ResourceExhaustedError(
            absl::StrCat("the mailbox of agent ", to->id, " is full (",
                         options_.config.mailbox_capacity(), " messages)"));
      }
      to->mailbox.push_back(std::move(message));
      return id;
    }
  }
  // Its receive was waiting: answer it now.
  vault::v1::HostFrame frame;
  HostResponse* resp = frame.mutable_response();
  resp->set_call_id(waiting->call_id);
  const std::string from = message.from();
  const size_t bytes = message.data().size();
  *resp->mutable_receive()->mutable_message() = std::move(message);
  std::string out;
  resp->SerializeToString(&out);
  const absl::Duration waited = absl::Now() - waiting->started;
  // The receiver first (it waits for this message); its asynchronous audit entry after.
  SendFrame(to, frame);
  Audit(audit::MakeEntry(to->id, "host.receive", from, vault::v1::AuditEntry::ALLOWED, "",
                         {{"call_id", absl::StrCat(waiting->call_id)},
                          {"duration_us", absl::StrCat(absl::ToInt64Microseconds(waited))},
                          {"in", Sha256Hex(waiting->request_bytes)},
                          {"out", Sha256Hex(out)},
                          {"bytes", absl::StrCat(bytes)}}),
        /*durable=*/false);
  return id;
}

void AgentRuntime::Impl::ExpireReceive(const std::shared_ptr<LiveAgent>& live) {
  std::optional<LiveAgent::PendingReceive> waiting;
  {
    absl::MutexLock lock(&live->mu);
    if (!live->pending_receive.has_value() || absl::Now() < live->pending_receive->deadline) return;
    waiting = std::move(live->pending_receive);
    live->pending_receive.reset();
  }
  vault::v1::HostFrame frame;
  frame.mutable_response()->set_call_id(waiting->call_id);
  frame.mutable_response()->mutable_receive()->set_timed_out(true);
  Audit(audit::MakeEntry(live->id, "host.receive", "", vault::v1::AuditEntry::ALLOWED, "timed out",
                         {{"call_id", absl::StrCat(waiting->call_id)},
                          {"duration_us",
                           absl::StrCat(absl::ToInt64Microseconds(absl::Now() - waiting->started))},
                          {"in", Sha256Hex(waiting->request_bytes)}}),
        /*durable=*/false);
  SendFrame(live, frame);
}

}  // namespace vault::agent
