// Host calls on the vault's file tree, confined to the agent's grants: read_file, write_file,
// list.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "agent/internal/runtime_util.h"
#include "common/status_macros.h"

namespace vault::agent::host_calls {

using vault::v1::Grant;
using vault::v1::HostRequest;
using vault::v1::HostResponse;

namespace {

// A path grant of `kind` for `path`: anything outside the vault's tree is a malformed call.
void AuthorizePath(HostCallContext& ctx, Grant::Kind kind, const std::string& path) {
  HostCall& c = ctx.call;
  c.subject = path;
  c.grant = MakeGrant(kind);
  c.grant->set_path(path);
}

}  // namespace

void AuthorizeReadPath(HostCallContext& ctx) {
  const HostRequest& request = ctx.request;
  AuthorizePath(ctx, Grant::READ,
                request.has_read_file() ? request.read_file().path() : request.list().path());
}

void AuthorizeWritePath(HostCallContext& ctx) {
  AuthorizePath(ctx, Grant::WRITE, ctx.request.write_file().path());
}

void ReadFile(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  uint64_t limit = request.read_file().limit();
  absl::StatusOr<FileRead> read = s.files().Read(
      request.read_file().path(), request.read_file().offset(), limit, ctx.max_payload);
  if (!read.ok()) {
    c.status = read.status();
    return;
  }
  c.bytes = read->data.size();
  resp.mutable_read_file()->set_size(read->size);
  resp.mutable_read_file()->set_data(std::move(read->data));
}

void WriteFile(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const std::shared_ptr<LiveAgent> live = ctx.live;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  c.bytes = request.write_file().data().size();
  if (c.status = s.ChargeStorage(live->principal, c.bytes); !c.status.ok()) return;
  absl::StatusOr<uint64_t> size = s.files().Write(
      request.write_file().path(), request.write_file().data(), request.write_file().append());
  if (!size.ok()) {
    s.RefundStorage(live->principal, c.bytes);
    c.status = size.status();
    return;
  }
  {
    absl::MutexLock lock(&live->mu);
    live->record.mutable_counters()->set_bytes_written(live->record.counters().bytes_written() +
                                                       c.bytes);
  }
  resp.mutable_write_file()->set_size(*size);
}

void List(HostCallContext& ctx) {
  HostCallServices& s = ctx.services;
  const HostRequest& request = ctx.request;
  HostCall& c = ctx.call;
  HostResponse& resp = c.response;
  absl::StatusOr<std::vector<FileEntry>> entries = s.files().List(request.list().path(), 10000);
  if (!entries.ok()) {
    c.status = entries.status();
    return;
  }
  for (FileEntry& e : *entries) {
    vault::v1::ListResult::Entry* out = resp.mutable_list()->add_entries();
    out->set_name(std::move(e.name));
    out->set_directory(e.directory);
    out->set_size(e.size);
  }
}
}  // namespace vault::agent::host_calls
