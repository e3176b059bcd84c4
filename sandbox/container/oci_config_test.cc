#include "sandbox/container/oci_config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace vault::sandbox {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

ContainerSpec Spec() {
  ContainerSpec c;
  c.rootfs = "/var/lib/vault/rootfs/abc";
  c.init_path = "/usr/lib/vault/vault-container-init";
  c.args = {"/bin/agent", "--serve"};
  c.env = {"GREETING=hi"};
  c.host_id = 200123;
  c.cgroups_path = "vault-sandbox/container-a1";
  c.limits.memory_bytes = 64 << 20;
  c.limits.max_processes = 10;
  c.limits.cpu_percent = 50;
  c.limits.storage_bytes = 16 << 20;
  c.storage_dir = "/var/lib/vault/containers/scratch/c-1";
  return c;
}

Struct Parse(const std::string& json) {
  Struct s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &s).ok()) << json;
  return s;
}

const Value& At(const Struct& s, std::initializer_list<const char*> path) {
  const Struct* cur = &s;
  const Value* v = nullptr;
  for (const char* key : path) {
    auto it = cur->fields().find(key);
    EXPECT_NE(it, cur->fields().end()) << key;
    if (it == cur->fields().end()) return Value::default_instance();
    v = &it->second;
    cur = &v->struct_value();
  }
  return *v;
}

TEST(OciConfig, EveryFenceWhateverTheImage) {
  absl::StatusOr<std::string> json = OciConfigJson(Spec());
  ASSERT_TRUE(json.ok()) << json.status();
  Struct c = Parse(*json);
  EXPECT_TRUE(At(c, {"root", "readonly"}).bool_value());
  EXPECT_EQ(At(c, {"root", "path"}).string_value(), "/var/lib/vault/rootfs/abc");
  EXPECT_TRUE(At(c, {"process", "noNewPrivileges"}).bool_value());
  EXPECT_FALSE(At(c, {"process", "terminal"}).bool_value());
  for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"}) {
    EXPECT_EQ(At(c, {"process", "capabilities", set}).list_value().values_size(), 0) << set;
  }
  EXPECT_EQ(At(c, {"process", "user", "uid"}).number_value(), 0);
  // The shim first, then the agent's program.
  const Value& args = At(c, {"process", "args"});
  ASSERT_EQ(args.list_value().values_size(), 3);
  EXPECT_EQ(args.list_value().values(0).string_value(), "/.vault/init");
  EXPECT_EQ(args.list_value().values(1).string_value(), "/bin/agent");
  EXPECT_EQ(c.fields().at("linux").struct_value().fields().count("seccomp"), 0u);
  const Value& uid_map = At(c, {"linux", "uidMappings"});
  ASSERT_EQ(uid_map.list_value().values_size(), 1);
  const Struct& m = uid_map.list_value().values(0).struct_value();
  EXPECT_EQ(m.fields().at("hostID").number_value(), 200123);
  EXPECT_EQ(m.fields().at("size").number_value(), 1);
  EXPECT_EQ(At(c, {"linux", "resources", "memory", "limit"}).number_value(), 64 << 20);
  EXPECT_EQ(At(c, {"linux", "resources", "memory", "swap"}).number_value(), 64 << 20);
  EXPECT_EQ(At(c, {"linux", "resources", "pids", "limit"}).number_value(), 10);
  EXPECT_EQ(At(c, {"linux", "resources", "cpu", "quota"}).number_value(), 50000);
  EXPECT_EQ(At(c, {"linux", "cgroupsPath"}).string_value(), "vault-sandbox/container-a1");
  std::vector<std::string> namespaces;
  for (const Value& n : At(c, {"linux", "namespaces"}).list_value().values()) {
    namespaces.push_back(n.struct_value().fields().at("type").string_value());
  }
  EXPECT_THAT(namespaces,
              ::testing::UnorderedElementsAre("pid", "network", "ipc", "uts", "mount", "user"));
  bool work = false;
  for (const Value& mount : At(c, {"mounts"}).list_value().values()) {
    const auto& f = mount.struct_value().fields();
    if (f.at("destination").string_value() != "/work") continue;
    work = true;
    EXPECT_EQ(f.at("type").string_value(), "bind");
    EXPECT_EQ(f.at("source").string_value(), "/var/lib/vault/containers/scratch/c-1/work");
    std::vector<std::string> options;
    for (const Value& o : f.at("options").list_value().values())
      options.push_back(o.string_value());
    EXPECT_THAT(options, ::testing::IsSupersetOf({"nosuid", "nodev", "noexec"}));
  }
  EXPECT_TRUE(work);
  EXPECT_EQ(c.fields().count("hooks"), 0u);  // nothing runs on the host on the image's behalf
  std::vector<std::string> env;
  for (const Value& e : At(c, {"process", "env"}).list_value().values()) {
    env.push_back(e.string_value());
  }
  EXPECT_THAT(env, ::testing::Contains("GREETING=hi"));
  EXPECT_THAT(env, ::testing::Contains("HOME=/work"));
}

TEST(OciConfig, EscapesWhatTheImageAndSpecSay) {
  ContainerSpec c = Spec();
  c.args = {"/bin/agent", "a\"b\\c\n"};
  absl::StatusOr<std::string> json = OciConfigJson(c);
  ASSERT_TRUE(json.ok());
  Struct s = Parse(*json);
  EXPECT_EQ(At(s, {"process", "args"}).list_value().values(2).string_value(), "a\"b\\c\n");
}

TEST(OciConfig, RefusesWhatCannotRunSafely) {
  auto code = [](ContainerSpec c) { return OciConfigJson(c).status().code(); };
  ContainerSpec c = Spec();
  c.host_id = 0;
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  c = Spec();
  c.init_path.clear();  // never without the seccomp filters
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  c = Spec();
  c.args = {"bin/agent"};  // relative: neither a path inside nor a name on PATH
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  c = Spec();
  c.args = {"agent"};  // found on the image's PATH by vault-container-init
  EXPECT_TRUE(OciConfigJson(c).ok());
  c = Spec();
  c.storage_dir.clear();
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  // An image's WorkingDir: CVE-2024-21626's /proc/self/fd/N, and anything not clean.
  for (const char* cwd : {"/proc/self/fd/7", "/proc", "/sys/fs", "/dev", "/work/../proc",
                          "/work/./x", "//work", "work", ""}) {
    c = Spec();
    c.cwd = cwd;
    EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument) << cwd;
  }
  for (const char* cwd : {"/", "/work", "/app/src", "/procedures"}) {
    c = Spec();
    c.cwd = cwd;
    EXPECT_TRUE(OciConfigJson(c).ok()) << cwd;
  }
  c = Spec();
  c.args.clear();
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  c = Spec();
  c.cgroups_path = "/vault-sandbox/x";
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  c = Spec();
  c.cgroups_path = "vault-sandbox/../../x";
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  c = Spec();
  c.env = {"NOEQUALS"};
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
  c = Spec();
  c.limits.memory_bytes = 0;
  EXPECT_EQ(code(c), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vault::sandbox
