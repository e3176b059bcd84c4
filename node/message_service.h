// node: the Messages service (design §11, docs/messages.md), served on the federation listener
// only (mutual TLS): a member hands over a message for an agent here, or for one that went on
// from here (then it is forwarded along the trail). The calling member's name comes from its
// verified certificate; the message itself is checked against the vault that signed it,
// whichever member hands it over.
//
// Thread-safety: gRPC calls it from many threads; the runtime serializes each mailbox.
#ifndef VAULT_NODE_MESSAGE_SERVICE_H_
#define VAULT_NODE_MESSAGE_SERVICE_H_

#include "agent/runtime.h"
#include "common/executor.h"
#include "vault/v1/message.grpc.pb.h"

namespace vault::node {

class MessageService final : public vault::v1::Messages::CallbackService {
 public:
  MessageService(agent::AgentRuntime* runtime, common::Executor* executor)
      : runtime_(runtime), executor_(executor) {}

  grpc::ServerUnaryReactor* Deliver(grpc::CallbackServerContext* ctx,
                                    const vault::v1::DeliverRequest* req,
                                    vault::v1::DeliverResponse* resp) override;

 private:
  agent::AgentRuntime* const runtime_;
  common::Executor* const executor_;
};

}  // namespace vault::node

#endif  // VAULT_NODE_MESSAGE_SERVICE_H_
