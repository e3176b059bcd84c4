#include "sandbox/registry.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::sandbox {
namespace {

using ::testing::ElementsAre;

// A sandbox type that is only a name: the registry never spawns anything.
class NamedType : public Sandbox {
 public:
  explicit NamedType(const char* name) : name_(name) {}
  const char* type() const override { return name_; }
  absl::Status SetProgram(const CodeObject&, SandboxSpec*) const override {
    return absl::UnimplementedError("a name only");
  }
  absl::StatusOr<std::unique_ptr<SandboxHandle>> Spawn(const SandboxSpec&) override {
    return absl::UnimplementedError("a name only");
  }

 private:
  const char* name_;
};

TEST(CanonicalSandboxType, EmptyAndTheRfcsNameArePosix) {
  EXPECT_EQ(*CanonicalSandboxType(""), "posix");
  EXPECT_EQ(*CanonicalSandboxType("posix"), "posix");
  EXPECT_EQ(*CanonicalSandboxType("posix-sandbox"), "posix");
  EXPECT_EQ(*CanonicalSandboxType("wasm"), "wasm");
  EXPECT_EQ(*CanonicalSandboxType("scheme"), "scheme");
  EXPECT_EQ(*CanonicalSandboxType("container"), "container");
}

TEST(CanonicalSandboxType, RefusesWhatIsNoTypeNamingTheKnownOnes) {
  absl::StatusOr<std::string> t = CanonicalSandboxType("Posix");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.status().message(),
            "\"Posix\" is not a sandbox type (known: posix, scheme, wasm, container; "
            "posix-sandbox is posix)");
  EXPECT_EQ(CanonicalSandboxType(std::string("posix\0", 6)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SandboxRegistry, FindsARegisteredTypeByAnyOfItsNames) {
  NamedType posix("posix");
  SandboxRegistry types;
  types.Add(&posix);
  EXPECT_EQ(*types.Find(""), &posix);
  EXPECT_EQ(*types.Find("posix"), &posix);
  EXPECT_EQ(*types.Find("posix-sandbox"), &posix);
  EXPECT_THAT(types.Available(), ElementsAre("posix"));
}

TEST(SandboxRegistry, RefusesAKnownTypeItCannotRunSayingWhy) {
  NamedType posix("posix");
  SandboxRegistry types;
  types.Add(&posix);
  types.AddUnavailable("container", "no OCI runtime works here (runc: not installed)");
  absl::StatusOr<Sandbox*> c = types.Find("container");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(),
            "sandbox type \"container\" is not available here: no OCI runtime works here (runc: "
            "not installed) (this vault has: posix)");
  absl::StatusOr<Sandbox*> w = types.Find("wasm");
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.status().message(),
            "sandbox type \"wasm\" is not available here: not built into this vaultd (this vault "
            "has: posix)");
  EXPECT_EQ(types.Find("lisp").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(types.Describe(),
              ElementsAre("posix: available", "scheme: unavailable (not built into this vaultd)",
                          "wasm: unavailable (not built into this vaultd)",
                          "container: unavailable (no OCI runtime works here (runc: not "
                          "installed))"));
}

TEST(SandboxRegistry, AnEmptyRegistryRunsNothing) {
  SandboxRegistry types;
  EXPECT_TRUE(types.empty());
  absl::StatusOr<Sandbox*> p = types.Find("posix");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(p.status().message(),
            "sandbox type \"posix\" is not available here: not built into this vaultd (this vault "
            "has: no sandbox type)");
}

}  // namespace
}  // namespace vault::sandbox
