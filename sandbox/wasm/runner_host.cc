#include "sandbox/wasm/runner_host.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace vault::sandbox::wasm {
namespace {

// The length of the valid UTF-8 sequence at bytes[i], or 0.
size_t Utf8At(absl::string_view bytes, size_t i) {
  const unsigned char c = static_cast<unsigned char>(bytes[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  bool ok = n > 0 && i + n <= bytes.size();
  for (size_t k = 1; ok && k < n; ++k) {
    ok = (static_cast<unsigned char>(bytes[i + k]) & 0xc0) == 0x80;
  }
  if (ok && n > 1) {
    // No overlong forms, surrogates or code points past U+10FFFF.
    uint32_t cp = c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(bytes[i + k]) & 0x3f);
    ok = (n == 2 && cp >= 0x80) || (n == 3 && cp >= 0x800 && (cp < 0xd800 || cp > 0xdfff)) ||
         (n == 4 && cp >= 0x10000 && cp <= 0x10ffff);
  }
  return ok ? n : 0;
}

}  // namespace

bool IsUtf8(absl::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8At(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string Utf8Line(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = Utf8At(bytes, i);
    if (n > 0) {
      out.append(bytes.data() + i, n);
      i += n;
    } else {
      absl::StrAppend(&out, "\\x",
                      absl::Hex(static_cast<unsigned char>(bytes[i]), absl::kZeroPad2));
      ++i;
    }
  }
  return out;
}

uint32_t CodeOf(const absl::Status& status) { return static_cast<uint32_t>(status.code()); }

RunnerHost::RunnerHost(vault::sdk::Agent* agent, std::vector<std::string> args,
                       std::vector<std::string> env)
    : agent_(agent), args_(std::move(args)), env_(std::move(env)) {}

ImportResolver RunnerHost::Resolver() {
  return [this](absl::string_view module, absl::string_view name) -> absl::StatusOr<HostFunction> {
    if (module == "library") return LibraryImport(*this, name);
    if (module == "wasi_snapshot_preview1") return WasiImport(*this, name);
    return absl::NotFoundError(absl::StrCat(
        "no module \"", module, "\" (a vault offers library and wasi_snapshot_preview1)"));
  };
}

absl::Status RunnerHost::LoadState(absl::string_view host_state) {
  if (!state_.ParseFromArray(host_state.data(), static_cast<int>(host_state.size()))) {
    return absl::InvalidArgumentError("snapshot: the runner's state does not parse");
  }
  return absl::OkStatus();
}

absl::Status RunnerHost::Output(int fd, absl::string_view bytes) {
  std::string* partial =
      fd == 1 ? state_.mutable_stdout_partial() : state_.mutable_stderr_partial();
  partial->append(bytes.data(), bytes.size());
  // Each whole line is a log line; a line longer than the log keeps is sent in pieces.
  constexpr size_t kLine = 4096;
  size_t start = 0;
  while (true) {
    size_t nl = partial->find('\n', start);
    if (nl == std::string::npos) {
      if (partial->size() - start < kLine) break;
      nl = start + kLine;
    }
    absl::string_view line(partial->data() + start, nl - start);
    VAULT_RETURN_IF_ERROR(agent_->Log(
        fd == 1 ? vault::v1::LogRequest::INFO : vault::v1::LogRequest::WARN, Utf8Line(line)));
    start = nl < partial->size() && (*partial)[nl] == '\n' ? nl + 1 : nl;
  }
  partial->erase(0, start);
  return absl::OkStatus();
}

void RunnerHost::FlushOutput() {
  for (int fd : {1, 2}) {
    std::string* partial =
        fd == 1 ? state_.mutable_stdout_partial() : state_.mutable_stderr_partial();
    if (partial->empty()) continue;
    (void)agent_->Log(fd == 1 ? vault::v1::LogRequest::INFO : vault::v1::LogRequest::WARN,
                      Utf8Line(*partial));
    partial->clear();
  }
}

absl::StatusOr<std::string> RunnerHost::CaptureHere(Engine& engine) {
  engine.host_state() = state_.SerializeAsString();
  VAULT_ASSIGN_OR_RETURN(vault::v1::WasmSnapshot snap, engine.Capture());
  std::string bytes;
  if (!snap.SerializeToString(&bytes)) return absl::InternalError("snapshot: does not serialize");
  return bytes;
}

absl::Status RunnerHost::CheckpointWith(const std::string& snapshot, bool resumed, bool requested) {
  // The call the vault logged is the last one made: a resumed call makes only that one again.
  if (resumed && snapshot.size() > agent_->max_piece_bytes()) {
    return agent_->CheckpointDigest(vault::sdk::DigestOf(snapshot), requested).status();
  }
  return agent_->Checkpoint(snapshot, requested).status();
}

absl::Status RunnerHost::MigrateWith(absl::string_view vault, const std::string& snapshot,
                                     bool resumed) {
  if (resumed && snapshot.size() > agent_->max_piece_bytes()) {
    return agent_->MigrateDigest(vault, vault::sdk::DigestOf(snapshot));
  }
  return agent_->Migrate(vault, snapshot);
}

}  // namespace vault::sandbox::wasm
