#include "vaultctl/health_command.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <memory>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "vault/v1/cas.grpc.pb.h"

namespace vault::vaultctl {
namespace {

// An in-process server with gRPC's default health service, as vaultd runs it.
class HealthCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.RegisterService(&cas_);  // a server needs one service of its own
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_NE(server_->GetHealthCheckService(), nullptr);
    channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  }
  void TearDown() override { server_->Shutdown(); }

  vault::v1::Cas::Service cas_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(HealthCommandTest, ServingServerIsServing) {
  absl::StatusOr<ServingStatus> s = CheckHealth(channel_, "", absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, ServingStatus::kServing);
  EXPECT_EQ(ServingStatusName(*s), "SERVING");
}

TEST_F(HealthCommandTest, DrainingServerIsNotServing) {
  server_->GetHealthCheckService()->SetServingStatus(false);
  absl::StatusOr<ServingStatus> s = CheckHealth(channel_, "", absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, ServingStatus::kNotServing);
  EXPECT_EQ(ServingStatusName(*s), "NOT_SERVING");
}

TEST_F(HealthCommandTest, NamedServiceHasItsOwnStatus) {
  server_->GetHealthCheckService()->SetServingStatus("vault.v1.Cas", false);
  absl::StatusOr<ServingStatus> s = CheckHealth(channel_, "vault.v1.Cas", absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, ServingStatus::kNotServing);
  s = CheckHealth(channel_, "", absl::Seconds(10));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, ServingStatus::kServing);
}

TEST_F(HealthCommandTest, UnknownServiceIsNotFound) {
  absl::StatusOr<ServingStatus> s = CheckHealth(channel_, "no.such.Service", absl::Seconds(10));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kNotFound);
}

TEST(HealthCommand, NobodyListeningIsUnavailable) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      "unix:/nonexistent/vault-health-test.sock", grpc::InsecureChannelCredentials());
  absl::StatusOr<ServingStatus> s = CheckHealth(channel, "", absl::Seconds(10));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable);
}

TEST(HealthCommand, NamesEveryStatus) {
  EXPECT_EQ(ServingStatusName(ServingStatus::kUnknown), "UNKNOWN");
  EXPECT_EQ(ServingStatusName(ServingStatus::kServiceUnknown), "SERVICE_UNKNOWN");
}

}  // namespace
}  // namespace vault::vaultctl
