#include "node/cas_service_test_fixture.h"

namespace vault::node {
namespace {

// --- Membership over mutual TLS ---

class MemberTlsTest : public CasServiceTest {
 protected:
  void SetUp() override {
    CasServiceTest::SetUp();
    if (HasFatalFailure()) return;
    absl::StatusOr<KeyAndCert> ca = CreateFederationCa("acme", absl::Hours(24));
    ASSERT_TRUE(ca.ok()) << ca.status();
    ca_ = *std::move(ca);
    absl::StatusOr<KeyAndCert> server_cert = IssueMemberCert(ca_, "vault-a", absl::Hours(24));
    ASSERT_TRUE(server_cert.ok()) << server_cert.status();

    grpc::SslServerCredentialsOptions opts(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    opts.pem_root_certs = ca_.cert_pem;
    opts.pem_key_cert_pairs.push_back({server_cert->key_pem, server_cert->cert_pem});
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::SslServerCredentials(opts);
    creds->SetAuthMetadataProcessor(std::make_shared<MemberAuthProcessor>(
        absl::flat_hash_set<std::string>{"vault-a", "vault-b"}));
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", creds, &port);
    tls_service_ =
        std::make_unique<CasService>(store_.get(), executor_.get(), kLimits, auditor_.get());
    builder.RegisterService(tls_service_.get());
    tls_server_ = builder.BuildAndStart();
    ASSERT_NE(tls_server_, nullptr);
    ASSERT_NE(port, 0);
    address_ = absl::StrCat("127.0.0.1:", port);
  }

  void TearDown() override {
    if (tls_server_ != nullptr) {
      tls_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      tls_server_->Wait();
      tls_server_.reset();
    }
    tls_service_.reset();
    CasServiceTest::TearDown();
  }

  // A Stat call over TLS; `client` null means no client certificate.
  grpc::Status StatOverTls(const std::string& roots, const KeyAndCert* client) {
    grpc::SslCredentialsOptions opts;
    opts.pem_root_certs = roots;
    if (client != nullptr) {
      opts.pem_private_key = client->key_pem;
      opts.pem_cert_chain = client->cert_pem;
    }
    grpc::ChannelArguments args;
    args.SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, "vault-a");
    std::unique_ptr<vault::v1::Cas::Stub> stub = vault::v1::Cas::NewStub(
        grpc::CreateCustomChannel(address_, grpc::SslCredentials(opts), args));
    StatRequest req;
    *req.mutable_digest() = DigestOf("anything");
    StatResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, absl::Seconds(10));
    grpc::Status s = stub->Stat(&ctx, req, &resp);
    if (s.ok() && resp.present()) return grpc::Status(grpc::StatusCode::INTERNAL, "present?");
    return s;
  }

  KeyAndCert MustIssue(const KeyAndCert& ca, absl::string_view name) {
    absl::StatusOr<KeyAndCert> cert = IssueMemberCert(ca, name, absl::Hours(24));
    EXPECT_TRUE(cert.ok()) << cert.status();
    return cert.ok() ? *cert : KeyAndCert{};
  }

  KeyAndCert ca_;
  std::string address_;
  std::unique_ptr<CasService> tls_service_;
  std::unique_ptr<grpc::Server> tls_server_;
};

TEST_F(MemberTlsTest, MemberCertificateFromTheFederationCaIsAccepted) {
  KeyAndCert b = MustIssue(ca_, "vault-b");
  grpc::Status s = StatOverTls(ca_.cert_pem, &b);
  EXPECT_TRUE(s.ok()) << s.error_code() << ": " << s.error_message();
}

TEST_F(MemberTlsTest, NonMemberCertificateFromTheFederationCaIsUnauthenticated) {
  KeyAndCert x = MustIssue(ca_, "vault-x");
  grpc::Status s = StatOverTls(ca_.cert_pem, &x);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_NE(s.error_message().find("vault-x"), std::string::npos) << s.error_message();
}

TEST_F(MemberTlsTest, CertificateFromAnotherCaFailsTheHandshake) {
  absl::StatusOr<KeyAndCert> other_ca = CreateFederationCa("other", absl::Hours(24));
  ASSERT_TRUE(other_ca.ok()) << other_ca.status();
  // Named like a member, but issued by a CA the server does not trust.
  KeyAndCert b = MustIssue(*other_ca, "vault-b");
  grpc::Status s = StatOverTls(ca_.cert_pem, &b);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(MemberTlsTest, ClientWithoutACertificateFails) {
  grpc::Status s = StatOverTls(ca_.cert_pem, nullptr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

}  // namespace
}  // namespace vault::node
