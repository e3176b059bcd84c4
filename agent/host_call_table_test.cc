// The host-call table: every call of the protocol has exactly one row, and the rows say what the
// proxy relies on (which calls are durable, audited, answered on the fast path).
#include <set>
#include <string>

#include "agent/internal/host_call.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"

namespace vault::agent {
namespace {

using vault::v1::HostRequest;

TEST(HostCallTable, EveryCallOfTheProtocolHasOneRowWithAHandler) {
  const google::protobuf::OneofDescriptor* calls =
      HostRequest::descriptor()->FindOneofByName("call");
  ASSERT_NE(calls, nullptr);
  std::set<std::string> ops;
  for (int i = 0; i < calls->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = calls->field(i);
    const HostCallRow* row = FindHostCall(static_cast<HostRequest::CallCase>(field->number()));
    ASSERT_NE(row, nullptr) << field->name() << " has no row in host_calls/table.cc";
    EXPECT_EQ(row->op, field->name());
    EXPECT_NE(row->handle, nullptr) << field->name();
    EXPECT_TRUE(ops.insert(row->op).second) << field->name();
  }
  EXPECT_EQ(FindHostCall(HostRequest::CALL_NOT_SET), nullptr);
}

TEST(HostCallTable, EffectsOutsideTheAgentAreDurableAndOnlyCheapCallsTakeTheFastPath) {
  for (HostRequest::CallCase c :
       {HostRequest::kCheckpoint, HostRequest::kCasPut, HostRequest::kWriteFile,
        HostRequest::kNetConnect, HostRequest::kShare, HostRequest::kSpawnChild,
        HostRequest::kMigrate, HostRequest::kExit}) {
    ASSERT_NE(FindHostCall(c), nullptr);
    EXPECT_TRUE(FindHostCall(c)->durable) << FindHostCall(c)->op;
    EXPECT_FALSE(FindHostCall(c)->fast_path) << FindHostCall(c)->op;
  }
  std::set<std::string> fast;
  const google::protobuf::OneofDescriptor* calls =
      HostRequest::descriptor()->FindOneofByName("call");
  for (int i = 0; i < calls->field_count(); ++i) {
    const HostCallRow* row =
        FindHostCall(static_cast<HostRequest::CallCase>(calls->field(i)->number()));
    if (row != nullptr && row->fast_path) fast.insert(row->op);
  }
  // (send is not: it writes durably, and may reach another member.)
  EXPECT_EQ(fast, (std::set<std::string>{"clock", "heartbeat", "log", "random", "receive",
                                         "self_inspect"}));
  EXPECT_FALSE(FindHostCall(HostRequest::kHeartbeat)->audited);
}

}  // namespace
}  // namespace vault::agent
