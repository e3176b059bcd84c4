#include "node/admin_service.h"

namespace vault::node {

grpc::ServerUnaryReactor* AdminService::Status(grpc::CallbackServerContext* ctx,
                                               const vault::v1::StatusRequest*,
                                               vault::v1::StatusResponse* resp) {
  resp->set_name(config_.name());
  resp->set_public_key(public_key_);
  resp->set_version(kVersion);
  resp->set_listen_address(listen_);
  resp->set_admin_socket(config_.admin_socket());
  resp->set_data_dir(config_.data_dir());
  resp->set_started_unix_ms(started_unix_ms_);
  cas::StoreTotals totals = store_->totals();
  resp->set_object_count(totals.objects);
  resp->set_stored_bytes(totals.bytes);
  resp->set_last_seq(store_->last_seq());
  resp->set_sandbox_fences(sandbox_.fences);
  resp->set_agents_enabled(sandbox_.agents_enabled);
  resp->set_agents_disabled_reason(sandbox_.disabled_reason);
  for (const vault::v1::Member& m : config_.members()) {
    auto* out = resp->add_members();
    out->set_name(m.name());
    out->set_address(m.address());
    out->set_public_key(m.public_key());
  }
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace vault::node
