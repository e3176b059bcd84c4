// vault_agent: the C++ SDK for agent authors. An agent is a program its vault runs in a sandbox;
// it reaches the vault only through the host calls of proto/vault/v1/hostcall.proto, over one
// inherited Unix stream socket (fd 3, named by the environment variable VAULT_CHANNEL_FD). This
// library speaks that protocol: length-prefixed GuestFrame / HostFrame messages, a Hello /
// Welcome handshake, then one request and its response at a time. It needs only Protocol
// Buffers, Abseil and the C library; see docs/sdk-cpp.md.
//
//   absl::StatusOr<std::unique_ptr<vault::sdk::Agent>> agent = vault::sdk::Agent::Connect();
//   if (!agent.ok()) return 1;
//   absl::StatusOr<std::optional<std::string>> state = (*agent)->GetState();
//   absl::StatusOr<vault::v1::Digest> put = (*agent)->CasPut("hello");
//   if (absl::IsPermissionDenied(put.status())) { /* the vault denied it: no cas-write grant */ }
//   absl::Status ended = (*agent)->Exit(0, "done", *put);  // returns only if the exit failed
//
// Errors. A call the vault answers with a non-zero code returns that code as an absl::Status,
// with the vault's message: PERMISSION_DENIED is a denial (the agent lacks the grant; the vault
// counts and audits it), NOT_FOUND, INVALID_ARGUMENT, RESOURCE_EXHAUSTED (a quota) and so on
// keep their canonical meaning; a code outside google.rpc.Code is UNKNOWN. The channel itself
// fails with: UNAVAILABLE (the vault closed it), DATA_LOSS (it closed in the middle of a frame),
// RESOURCE_EXHAUSTED (an incoming frame over Welcome.max_frame_bytes, refused before its body is
// read), INTERNAL (the vault broke the protocol: a frame that does not parse, a response to
// another call or of another kind, or a descriptor attached to anything but a net_connect
// response; such descriptors are closed unused), or an errno status. Any of these closes the
// channel for good: every later call returns FAILED_PRECONDITION. A request larger than
// max_frame_bytes is INVALID_ARGUMENT and is not sent (the vault would end the agent for it).
//
// Latency. A thread that sleeps waiting for an answer takes tens of microseconds to be woken on an
// idle CPU, more than the vault takes to answer a cheap call. So after sending a request the SDK
// polls the channel without sleeping for a short window (default 50 us, or $VAULT_AGENT_POLL_US
// microseconds as the vault passes it; SetPollWindow changes it, zero turns it off) and only then
// sleeps. The window is spent only while a call waits, never while the agent does nothing else:
// at most that much CPU per call, and less for calls whose answers keep taking longer than the
// window (after 8 such waits in a row the SDK polls for one call of that kind in 16, until an
// answer comes within the window again).
//
// Thread safety: an Agent may be shared by threads, but it makes one host call at a time: every
// method holds the Agent's mutex from sending its request until its response has been read. A
// thread waiting in Receive(timeout) therefore holds up the others (a Heartbeat included) for up
// to `timeout`: keep it shorter than the spec's heartbeat_timeout_ms. DigestToText, ParseDigest
// and UniqueFd are plain functions and values.
#ifndef VAULT_SDK_CPP_VAULT_AGENT_H_
#define VAULT_SDK_CPP_VAULT_AGENT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "vault/v1/hostcall.pb.h"

namespace vault::sdk {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr char kSdkName[] = "vault-agent-cpp/0.1";
inline constexpr int kDefaultChannelFd = 3;
inline constexpr char kChannelFdEnv[] = "VAULT_CHANNEL_FD";
// The frame limit until the Welcome names one (and when it names 0).
inline constexpr size_t kDefaultMaxFrameBytes = 1 << 20;
// How long a call polls for its answer before it sleeps, unless $VAULT_AGENT_POLL_US says (a
// number of microseconds, at most kMaxPollWindow) or SetPollWindow.
inline constexpr char kPollWindowEnv[] = "VAULT_AGENT_POLL_US";
inline constexpr absl::Duration kDefaultPollWindow = absl::Microseconds(50);
inline constexpr absl::Duration kMaxPollWindow = absl::Milliseconds(1);

// Room a request keeps for its other fields beside a piece of data (the vault's own margin).
inline constexpr size_t kFrameOverheadBytes = 1024;

// The CAS digest of `data`: its SHA-256 (computed here) and its size.
vault::v1::Digest DigestOf(absl::string_view data);
// A digest as text: "sha256:<64 lowercase hex>/<decimal size>".
std::string DigestToText(const vault::v1::Digest& digest);
// The inverse of DigestToText, strict: the prefix, exactly 64 lowercase hex digits, '/', a
// decimal size without sign or leading zeros. Anything else is INVALID_ARGUMENT.
absl::StatusOr<vault::v1::Digest> ParseDigest(absl::string_view text);

// Owns one file descriptor (a connected socket from NetConnect) and closes it when destroyed.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

using LogLevel = vault::v1::LogRequest::Level;

class Agent {
 public:
  // Takes the channel (`fd`; when negative, the number in $VAULT_CHANNEL_FD, else 3), marks it
  // close-on-exec, sends Hello{version: 1, sdk: kSdkName} and reads the vault's answer. A
  // refusal, or a Welcome of another protocol version, is FAILED_PRECONDITION (with the vault's
  // reason); no open channel on that descriptor is FAILED_PRECONDITION too (the program is not
  // running as an agent). The Agent owns the descriptor from here on: it is closed when Connect
  // fails or the Agent is destroyed.
  static absl::StatusOr<std::unique_ptr<Agent>> Connect(int fd = -1);

  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;
  ~Agent();

  // From the Welcome; constant.
  const std::string& agent_id() const { return agent_id_; }
  const std::string& vault() const { return vault_; }
  uint64_t incarnation() const { return incarnation_; }  // +1 each time the vault restarts it
  size_t max_frame_bytes() const { return max_frame_bytes_; }
  // The most bytes of data one call carries or brings (a state, an object, a piece of one):
  // max_frame_bytes less kFrameOverheadBytes. Larger states and objects go in pieces.
  size_t max_piece_bytes() const;

  // How long each call polls the channel for its answer before it sleeps (see Latency above):
  // clamped to [0, kMaxPollWindow]; zero never polls.
  void SetPollWindow(absl::Duration window);
  absl::Duration poll_window();

  // One method per host call (hostcall.proto says what each does; docs/sdk-cpp.md too).

  // A line in the agent's log (at most 4096 bytes are kept).
  absl::Status Log(LogLevel level, absl::string_view message);
  // Proves the agent alive (a spec with heartbeat_timeout_ms requires it that often). True when
  // the vault is stopping and wants a Checkpoint now.
  absl::StatusOr<bool> Heartbeat();
  // The last checkpoint, else the initial state the agent was spawned with; nullopt when none.
  // Any size: a state larger than max_piece_bytes is read in pieces (one call each); one that
  // changes meanwhile (a checkpoint from another thread) is read again.
  absl::StatusOr<std::optional<std::string>> GetState();
  // Bytes [offset, offset + limit) of the state (limit 0: to the end; the answer must fit in a
  // frame, else RESOURCE_EXHAUSTED); `size` is the whole state's, `digest` its CAS digest.
  // OUT_OF_RANGE for an offset past the end. `snapshot`: of the execution state instead
  // (GetSnapshot).
  absl::StatusOr<vault::v1::StateResult> GetStateRange(uint64_t offset, uint64_t limit,
                                                       bool snapshot = false);
  // For an interpreter's runner (wasm): the execution state its agent resumes from, taken by a
  // runner at a checkpoint or hop and kept by the vault in the agent's effect log; nullopt on a
  // fresh start. Read in pieces, as GetState; never logged or replayed.
  absl::StatusOr<std::optional<std::string>> GetSnapshot();
  // The vault's wall clock, and random bytes from it (at most 4096 a call): for programs with no
  // clock or randomness of their own, whose replay must see the same answers.
  absl::StatusOr<vault::v1::ClockResult> Clock();
  absl::StatusOr<std::string> Random(uint32_t bytes);
  // Stores `state` durably: what GetState returns after a restart. Returns its CAS digest.
  // Any size: a state larger than max_piece_bytes is put in pieces (the cas_upload_* calls, as a
  // state upload: they need the cas-write grant, but for a wasm runner's snapshot, and count
  // against the storage quota) and then named by its digest (CheckpointDigest); a smaller one
  // travels in one frame, as always.
  // `requested`: made because the vault asked (CheckpointRequest.requested), not at a point of
  // the program's own (a runner's capture for an operator's hop).
  absl::StatusOr<vault::v1::Digest> Checkpoint(absl::string_view state, bool requested = false);
  // Makes the CAS object `state` the agent's state. The agent must be able to read it: it put
  // it, it was shared with it, or a read grant covers its hash (else PERMISSION_DENIED, a
  // denial); NOT_FOUND when the vault does not hold it.
  absl::StatusOr<vault::v1::Digest> CheckpointDigest(const vault::v1::Digest& state,
                                                     bool requested = false);
  // Bytes [offset, offset + limit) of a CAS object; limit 0: to the end (the answer must fit in
  // a frame, so read large objects in pieces).
  absl::StatusOr<std::string> CasGet(const vault::v1::Digest& digest, uint64_t offset = 0,
                                     uint64_t limit = 0);
  // Stores an object of any size: larger than max_piece_bytes, in pieces (cas_upload_*).
  absl::StatusOr<vault::v1::Digest> CasPut(absl::string_view data);
  // The streaming put CasPut uses for large objects, one call each: Start names the whole
  // object's digest (DigestOf) and reserves its size in the storage quota (RESOURCE_EXHAUSTED
  // past it, or with 4 uploads open already); Append sends the next bytes (`offset`: the bytes
  // sent so far; each piece at most max_piece_bytes) and returns the bytes received; Finish
  // stores the object once every byte came and they hash to the digest (INVALID_ARGUMENT
  // otherwise: nothing is stored), or drops the upload with `abort`. Open uploads end with the
  // agent.
  absl::StatusOr<vault::v1::CasUploadStartResult> CasUploadStart(const vault::v1::Digest& digest,
                                                                 bool state = false);
  absl::StatusOr<uint64_t> CasUploadAppend(uint64_t upload_id, uint64_t offset,
                                           absl::string_view data);
  absl::StatusOr<vault::v1::CasUploadFinishResult> CasUploadFinish(uint64_t upload_id,
                                                                   bool abort = false);
  // A file of the vault's tree ("/vault/pub/prices.csv"), as CasGet.
  absl::StatusOr<std::string> ReadFile(absl::string_view path, uint64_t offset = 0,
                                       uint64_t limit = 0);
  // The same with the whole file's size.
  absl::StatusOr<vault::v1::ReadFileResult> ReadFileRange(absl::string_view path, uint64_t offset,
                                                          uint64_t limit);
  // Replaces the file atomically, or appends to it. Returns the file's size after the write.
  absl::StatusOr<uint64_t> WriteFile(absl::string_view path, absl::string_view data,
                                     bool append = false);
  absl::StatusOr<std::vector<vault::v1::ListResult::Entry>> List(absl::string_view path);
  // A TCP connection the vault opens on the agent's behalf (the sandbox has no network of its
  // own) to a host and port its network grant covers; the connected socket comes with the
  // response (SCM_RIGHTS) and is the caller's. A timeout of zero is the vault's default (5 s).
  absl::StatusOr<UniqueFd> NetConnect(absl::string_view host, uint16_t port,
                                      absl::Duration timeout = absl::Seconds(5));
  // The vault fetches `url` for the agent under a url grant (read or network for GET, write or
  // network for POST with `body`), following only redirects those grants cover. Returns the last
  // response (status, content type, body, final URL). A timeout of zero is the vault's default
  // (10 s); max_bytes zero the vault's most.
  struct HttpOptions {
    std::string method = "GET";  // or "POST"
    std::string body;
    std::string content_type;
    absl::Duration timeout = absl::ZeroDuration();
    uint64_t max_bytes = 0;
  };
  absl::StatusOr<vault::v1::HttpGetResult> HttpGet(absl::string_view url,
                                                   const HttpOptions& options);
  absl::StatusOr<vault::v1::HttpGetResult> HttpGet(absl::string_view url) {
    return HttpGet(url, HttpOptions());
  }
  // Sends a message to an agent id (or "operator", answering a query). Returns its id.
  absl::StatusOr<uint64_t> Send(absl::string_view to, absl::string_view type,
                                absl::string_view data, uint64_t reply_to = 0);
  // The next message in the agent's mailbox, waiting up to `timeout` (zero: do not wait);
  // nullopt when none came. Holds the Agent's mutex meanwhile (see Thread safety).
  absl::StatusOr<std::optional<vault::v1::Message>> Receive(absl::Duration timeout);
  // Lets these agents cas-get the object.
  absl::Status Share(const vault::v1::Digest& digest, absl::Span<const std::string> agents);
  absl::StatusOr<vault::v1::SelfInspectResult> SelfInspect();
  // Spawns a child with (at most) the authority asked for; the spec names its code by
  // code_digest. `initial_state` is what the child's GetState first returns.
  absl::StatusOr<vault::v1::SpawnChildResult> SpawnChild(
      const vault::v1::AgentSpec& spec,
      const std::optional<std::string>& initial_state = std::nullopt);
  // The same with the spec as text (docs/spec.md), parsed by the vault; its code may be inline
  // Scheme, (code '(lambda () ...)), which the vault stores as the child's code.
  absl::StatusOr<vault::v1::SpawnChildResult> SpawnChildFromText(
      absl::string_view spec_text, const std::optional<std::string>& initial_state = std::nullopt);
  // Moves the agent to the member vault named `vault` (weak mobility): the vault checks the
  // migrate grant naming it and max-migrations, freezes this process and hands `state` over; the
  // destination starts the same code, whose GetState returns `state` (SelfInspect there reports
  // its vault and the hop count). On success the call never returns: the vault ends this process
  // once the destination has taken the agent over, so finish any other work first. It returns
  // only when the agent stays here: PERMISSION_DENIED when the grants or max-migrations do not
  // allow the hop, ABORTED when the destination refused or could not be reached, or a channel
  // error. An OK answer breaks the protocol (the vault answers a migrate only when it failed):
  // INTERNAL, and the channel is closed. (The one exception: an agent that replays its effect
  // log, a Scheme agent, is answered OK with a MigrateResult at the destination, where its
  // replay reaches the call that moved it: docs/replay.md.) A state larger than max_piece_bytes is
  // put in pieces first (as Checkpoint does; an error of that put is returned) and handed over by
  // digest.
  absl::Status Migrate(absl::string_view vault, absl::string_view state);
  // Migrate with a state already in the CAS that the agent may read (as CheckpointDigest).
  absl::Status MigrateDigest(absl::string_view vault, const vault::v1::Digest& state);
  // Ends the agent: sends ExitRequest{code, message, result} and waits for the vault's answer.
  // When the vault has recorded the exit, flushes stdio and calls _exit(code): it does not
  // return, destructors and atexit handlers do not run. It returns only when the exit was not
  // recorded (the vault refused it, e.g. NOT_FOUND for a result digest not in the CAS, or the
  // channel failed); the caller may then fix the request or just return from main.
  absl::Status Exit(int code, absl::string_view message = "",
                    const std::optional<vault::v1::Digest>& result = std::nullopt);

 private:
  Agent(UniqueFd fd, const vault::v1::Welcome& welcome);

  // Sends `request` (its call id set here; the request is consumed) and reads the response. A
  // non-zero code becomes the returned status; an OK response must carry `expected` (or no result
  // at all). `passed_fd` is non-null only for net_connect: the descriptor that came with the
  // response.
  absl::StatusOr<vault::v1::HostResponse> Call(vault::v1::HostRequest& request,
                                               vault::v1::HostResponse::ResultCase expected,
                                               UniqueFd* passed_fd = nullptr);
  absl::StatusOr<vault::v1::HostResponse> CallLocked(vault::v1::HostRequest& request,
                                                     vault::v1::HostResponse::ResultCase expected,
                                                     UniqueFd* passed_fd)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // CasUploadStart, the pieces, CasUploadFinish: the object's digest.
  absl::StatusOr<vault::v1::Digest> UploadObject(absl::string_view data, bool state = false);
  absl::Status MigrateCall(vault::v1::HostRequest& request);
  absl::StatusOr<std::optional<std::string>> ReadState(bool snapshot);
  absl::StatusOr<vault::v1::SpawnChildResult> SpawnChildCall(
      vault::v1::HostRequest& request, const std::optional<std::string>& initial_state);
  // Closes the channel after a protocol or I/O error and returns `why`.
  absl::Status Break(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Polls the channel for the answer to a call of kind `kind` for up to the poll window (unless
  // that kind is backing off), without reading it.
  void PollForAnswer(int kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string agent_id_;
  const std::string vault_;
  const uint64_t incarnation_;
  const size_t max_frame_bytes_;

  // State below is protected by mu_.
  absl::Mutex mu_;
  UniqueFd fd_ ABSL_GUARDED_BY(mu_);
  uint64_t next_call_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // why the channel was closed (OK while open)
  int64_t poll_window_ns_ ABSL_GUARDED_BY(mu_);
  // Per call kind (HostRequest's field number, capped): waits in a row whose answer did not come
  // within the window, and calls since the last poll while backing off.
  struct PollStats {
    uint32_t misses = 0;
    uint32_t skipped = 0;
  };
  std::array<PollStats, 64> poll_stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace vault::sdk

#endif  // VAULT_SDK_CPP_VAULT_AGENT_H_
