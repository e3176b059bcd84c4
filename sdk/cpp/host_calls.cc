// The host calls: one Agent method per call of the protocol (proto/vault/v1/hostcall.proto), each
// a request through Agent::Call (vault_agent.cc); the large ones in pieces.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sdk/cpp/internal/protocol_error.h"
#include "sdk/cpp/vault_agent.h"

namespace vault::sdk {
namespace {

using vault::v1::HostRequest;
using vault::v1::HostResponse;

uint32_t ToMillis(absl::Duration d) {
  if (d <= absl::ZeroDuration()) return 0;
  int64_t ms = absl::ToInt64Milliseconds(absl::Ceil(d, absl::Milliseconds(1)));
  if (ms > int64_t{std::numeric_limits<uint32_t>::max()}) {
    return std::numeric_limits<uint32_t>::max();
  }
  return static_cast<uint32_t>(ms);
}

}  // namespace

absl::Status Agent::Log(LogLevel level, absl::string_view message) {
  HostRequest request;
  request.mutable_log()->set_level(level);
  request.mutable_log()->set_message(std::string(message));
  return Call(request, HostResponse::RESULT_NOT_SET).status();
}

absl::StatusOr<bool> Agent::Heartbeat() {
  HostRequest request;
  request.mutable_heartbeat();
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kHeartbeat);
  if (!response.ok()) return response.status();
  return response->heartbeat().checkpoint_requested();
}

size_t Agent::max_piece_bytes() const {
  return max_frame_bytes_ > 2 * kFrameOverheadBytes ? max_frame_bytes_ - kFrameOverheadBytes
                                                    : max_frame_bytes_ / 2;
}

absl::StatusOr<vault::v1::StateResult> Agent::GetStateRange(uint64_t offset, uint64_t limit,
                                                            bool snapshot) {
  HostRequest request;
  request.mutable_get_state()->set_offset(offset);
  request.mutable_get_state()->set_limit(limit);
  if (snapshot) request.mutable_get_state()->set_snapshot(true);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kGetState);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_get_state());
}

absl::StatusOr<std::optional<std::string>> Agent::GetState() { return ReadState(false); }

absl::StatusOr<std::optional<std::string>> Agent::GetSnapshot() { return ReadState(true); }

absl::StatusOr<vault::v1::ClockResult> Agent::Clock() {
  HostRequest request;
  request.mutable_clock();
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kClock);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_clock());
}

absl::StatusOr<std::string> Agent::Random(uint32_t bytes) {
  HostRequest request;
  request.mutable_random()->set_bytes(bytes);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kRandom);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_random()->mutable_data());
}

absl::StatusOr<std::optional<std::string>> Agent::ReadState(bool snapshot) {
  const size_t piece = max_piece_bytes();
  // The first piece says the whole size (a vault of before ranges answers all of it, without a
  // size); a state that changes meanwhile (another thread checkpoints) is read again.
  for (int attempt = 0;; ++attempt) {
    absl::StatusOr<vault::v1::StateResult> first = GetStateRange(0, piece, snapshot);
    if (!first.ok()) return first.status();
    if (!first->present()) return std::optional<std::string>();
    std::string state = std::move(*first->mutable_state());
    const uint64_t size = std::max<uint64_t>(first->size(), state.size());
    if (size > state.max_size()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("vault-agent: a state of ", size, " bytes does not fit in memory"));
    }
    state.reserve(size);
    bool changed = false;
    while (state.size() < size) {
      absl::StatusOr<vault::v1::StateResult> next = GetStateRange(state.size(), piece, snapshot);
      if (!next.ok()) return next.status();
      if (!next->present() || next->size() != size ||
          next->digest().sha256() != first->digest().sha256()) {
        changed = true;
        break;
      }
      if (next->state().empty()) {
        return absl::DataLossError(absl::StrCat("vault-agent: the state ended after ", state.size(),
                                                " of ", size, " bytes"));
      }
      state += next->state();
    }
    if (!changed) return std::optional<std::string>(std::move(state));
    if (attempt >= 3) {
      return absl::AbortedError("vault-agent: the state kept changing while it was read");
    }
  }
}

absl::StatusOr<vault::v1::Digest> Agent::Checkpoint(absl::string_view state, bool requested) {
  if (state.size() > max_piece_bytes()) {
    // Larger than a frame: put in pieces, then named by its digest.
    absl::StatusOr<vault::v1::Digest> put = UploadObject(state, /*state=*/true);
    if (!put.ok()) return put.status();
    return CheckpointDigest(*put, requested);
  }
  HostRequest request;
  request.mutable_checkpoint()->set_state(std::string(state));
  if (requested) request.mutable_checkpoint()->set_requested(true);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCheckpoint);
  if (!response.ok()) return response.status();
  return response->checkpoint().digest();
}

absl::StatusOr<vault::v1::Digest> Agent::CheckpointDigest(const vault::v1::Digest& state,
                                                          bool requested) {
  HostRequest request;
  *request.mutable_checkpoint()->mutable_state_digest() = state;
  if (requested) request.mutable_checkpoint()->set_requested(true);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCheckpoint);
  if (!response.ok()) return response.status();
  return response->checkpoint().digest();
}

absl::StatusOr<vault::v1::CasUploadStartResult> Agent::CasUploadStart(
    const vault::v1::Digest& digest, bool state) {
  HostRequest request;
  *request.mutable_cas_upload_start()->mutable_digest() = digest;
  if (state) request.mutable_cas_upload_start()->set_state(true);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasUploadStart);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_cas_upload_start());
}

absl::StatusOr<uint64_t> Agent::CasUploadAppend(uint64_t upload_id, uint64_t offset,
                                                absl::string_view data) {
  HostRequest request;
  vault::v1::CasUploadAppendRequest* append = request.mutable_cas_upload_append();
  append->set_upload_id(upload_id);
  append->set_offset(offset);
  append->set_data(std::string(data));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasUploadAppend);
  if (!response.ok()) return response.status();
  return response->cas_upload_append().received();
}

absl::StatusOr<vault::v1::CasUploadFinishResult> Agent::CasUploadFinish(uint64_t upload_id,
                                                                        bool abort) {
  HostRequest request;
  request.mutable_cas_upload_finish()->set_upload_id(upload_id);
  request.mutable_cas_upload_finish()->set_abort(abort);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasUploadFinish);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_cas_upload_finish());
}

absl::StatusOr<vault::v1::Digest> Agent::UploadObject(absl::string_view data, bool state) {
  const vault::v1::Digest digest = DigestOf(data);
  absl::StatusOr<vault::v1::CasUploadStartResult> started = CasUploadStart(digest, state);
  if (!started.ok()) return started.status();
  size_t piece = max_piece_bytes();
  if (started->max_piece_bytes() != 0 && started->max_piece_bytes() < piece) {
    piece = started->max_piece_bytes();
  }
  for (size_t at = 0; at < data.size(); at += piece) {
    absl::StatusOr<uint64_t> appended =
        CasUploadAppend(started->upload_id(), at, data.substr(at, piece));
    if (!appended.ok()) {
      (void)CasUploadFinish(started->upload_id(), /*abort=*/true);  // its quota back
      return appended.status();
    }
  }
  absl::StatusOr<vault::v1::CasUploadFinishResult> finished = CasUploadFinish(started->upload_id());
  if (!finished.ok()) return finished.status();
  return finished->digest();
}

absl::StatusOr<std::string> Agent::CasGet(const vault::v1::Digest& digest, uint64_t offset,
                                          uint64_t limit) {
  HostRequest request;
  vault::v1::CasGetRequest* get = request.mutable_cas_get();
  *get->mutable_digest() = digest;
  get->set_offset(offset);
  get->set_limit(limit);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasGet);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_cas_get()->mutable_data());
}

absl::StatusOr<vault::v1::Digest> Agent::CasPut(absl::string_view data) {
  if (data.size() > max_piece_bytes()) return UploadObject(data);  // larger than a frame
  HostRequest request;
  request.mutable_cas_put()->set_data(std::string(data));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kCasPut);
  if (!response.ok()) return response.status();
  return response->cas_put().digest();
}

absl::StatusOr<std::string> Agent::ReadFile(absl::string_view path, uint64_t offset,
                                            uint64_t limit) {
  absl::StatusOr<vault::v1::ReadFileResult> r = ReadFileRange(path, offset, limit);
  if (!r.ok()) return r.status();
  return std::move(*r->mutable_data());
}

absl::StatusOr<vault::v1::ReadFileResult> Agent::ReadFileRange(absl::string_view path,
                                                               uint64_t offset, uint64_t limit) {
  HostRequest request;
  vault::v1::ReadFileRequest* read = request.mutable_read_file();
  read->set_path(std::string(path));
  read->set_offset(offset);
  read->set_limit(limit);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kReadFile);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_read_file());
}

absl::StatusOr<uint64_t> Agent::WriteFile(absl::string_view path, absl::string_view data,
                                          bool append) {
  HostRequest request;
  vault::v1::WriteFileRequest* write = request.mutable_write_file();
  write->set_path(std::string(path));
  write->set_data(std::string(data));
  write->set_append(append);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kWriteFile);
  if (!response.ok()) return response.status();
  return response->write_file().size();
}

absl::StatusOr<std::vector<vault::v1::ListResult::Entry>> Agent::List(absl::string_view path) {
  HostRequest request;
  request.mutable_list()->set_path(std::string(path));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kList);
  if (!response.ok()) return response.status();
  auto* entries = response->mutable_list()->mutable_entries();
  return std::vector<vault::v1::ListResult::Entry>(std::make_move_iterator(entries->begin()),
                                                   std::make_move_iterator(entries->end()));
}

absl::StatusOr<UniqueFd> Agent::NetConnect(absl::string_view host, uint16_t port,
                                           absl::Duration timeout) {
  HostRequest request;
  vault::v1::NetConnectRequest* connect = request.mutable_net_connect();
  connect->set_host(std::string(host));
  connect->set_port(port);
  connect->set_timeout_ms(ToMillis(timeout));
  UniqueFd socket;
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kNetConnect, &socket);
  if (!response.ok()) return response.status();
  return socket;
}

absl::StatusOr<vault::v1::HttpGetResult> Agent::HttpGet(absl::string_view url,
                                                        const HttpOptions& options) {
  HostRequest request;
  vault::v1::HttpGetRequest* get = request.mutable_http_get();
  get->set_url(std::string(url));
  if (options.method != "GET") get->set_method(options.method);
  get->set_body(options.body);
  get->set_content_type(options.content_type);
  get->set_timeout_ms(ToMillis(options.timeout));
  get->set_max_bytes(options.max_bytes);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kHttpGet);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_http_get());
}

absl::StatusOr<uint64_t> Agent::Send(absl::string_view to, absl::string_view type,
                                     absl::string_view data, uint64_t reply_to) {
  HostRequest request;
  vault::v1::SendRequest* send = request.mutable_send();
  send->set_to(std::string(to));
  send->set_type(std::string(type));
  send->set_data(std::string(data));
  send->set_reply_to(reply_to);
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kSend);
  if (!response.ok()) return response.status();
  return response->send().message_id();
}

absl::StatusOr<std::optional<vault::v1::Message>> Agent::Receive(absl::Duration timeout) {
  HostRequest request;
  request.mutable_receive()->set_timeout_ms(ToMillis(timeout));
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kReceive);
  if (!response.ok()) return response.status();
  vault::v1::ReceiveResult* result = response->mutable_receive();
  if (result->timed_out() || !result->has_message()) {
    return std::optional<vault::v1::Message>();
  }
  return std::optional<vault::v1::Message>(std::move(*result->mutable_message()));
}

absl::Status Agent::Share(const vault::v1::Digest& digest, absl::Span<const std::string> agents) {
  HostRequest request;
  vault::v1::ShareRequest* share = request.mutable_share();
  *share->mutable_digest() = digest;
  for (const std::string& agent : agents) share->add_agents(agent);
  return Call(request, HostResponse::kShare).status();
}

absl::StatusOr<vault::v1::SelfInspectResult> Agent::SelfInspect() {
  HostRequest request;
  request.mutable_self_inspect();
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kSelfInspect);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_self_inspect());
}

absl::StatusOr<vault::v1::SpawnChildResult> Agent::SpawnChild(
    const vault::v1::AgentSpec& spec, const std::optional<std::string>& initial_state) {
  HostRequest request;
  *request.mutable_spawn_child()->mutable_spec() = spec;
  return SpawnChildCall(request, initial_state);
}

absl::StatusOr<vault::v1::SpawnChildResult> Agent::SpawnChildFromText(
    absl::string_view spec_text, const std::optional<std::string>& initial_state) {
  HostRequest request;
  request.mutable_spawn_child()->set_spec_text(std::string(spec_text));
  return SpawnChildCall(request, initial_state);
}

absl::StatusOr<vault::v1::SpawnChildResult> Agent::SpawnChildCall(
    HostRequest& request, const std::optional<std::string>& initial_state) {
  if (initial_state.has_value()) {
    request.mutable_spawn_child()->set_state(*initial_state);
    request.mutable_spawn_child()->set_has_state(true);
  }
  absl::StatusOr<HostResponse> response = Call(request, HostResponse::kSpawnChild);
  if (!response.ok()) return response.status();
  return std::move(*response->mutable_spawn_child());
}

absl::Status Agent::Migrate(absl::string_view vault, absl::string_view state) {
  if (state.size() > max_piece_bytes()) {
    // Larger than a frame: put in pieces, then named by its digest.
    absl::StatusOr<vault::v1::Digest> put = UploadObject(state, /*state=*/true);
    if (!put.ok()) return put.status();
    return MigrateDigest(vault, *put);
  }
  HostRequest request;
  vault::v1::MigrateRequest* migrate = request.mutable_migrate();
  migrate->set_vault(std::string(vault));
  migrate->set_state(std::string(state));
  return MigrateCall(request);
}

absl::Status Agent::MigrateDigest(absl::string_view vault, const vault::v1::Digest& state) {
  HostRequest request;
  vault::v1::MigrateRequest* migrate = request.mutable_migrate();
  migrate->set_vault(std::string(vault));
  *migrate->mutable_state_digest() = state;
  return MigrateCall(request);
}

absl::Status Agent::MigrateCall(HostRequest& request) {
  absl::MutexLock lock(&mu_);  // held until the process ends, or the hop failed
  absl::StatusOr<HostResponse> response = CallLocked(request, HostResponse::kMigrate, nullptr);
  if (!response.ok()) return response.status();
  // Success is answered only to an agent that replays its effect log (a Scheme agent), at the
  // destination; to any other, an OK answer leaves it unknown where the agent now runs.
  if (response->has_migrate()) return absl::OkStatus();
  return Break(ProtocolError("the vault answered a migrate call with success"));
}

absl::Status Agent::Exit(int code, absl::string_view message,
                         const std::optional<vault::v1::Digest>& result) {
  HostRequest request;
  vault::v1::ExitRequest* exit = request.mutable_exit();
  exit->set_code(code);
  exit->set_message(std::string(message));
  if (result.has_value()) *exit->mutable_result() = *result;
  absl::MutexLock lock(&mu_);  // held to the end: no other call starts after the exit
  absl::StatusOr<HostResponse> response =
      CallLocked(request, HostResponse::RESULT_NOT_SET, nullptr);
  if (!response.ok()) return response.status();
  std::fflush(nullptr);
  _exit(code);
}

}  // namespace vault::sdk
