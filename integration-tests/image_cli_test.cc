// vaultctl image import/ls/inspect/rm against a running vaultd: an OCI image layout (a directory
// and its tar) and a `docker save` archive, all made here with GNU tar from files the test
// writes; a tampered archive refused with nothing stored; the audit entries; a restart keeps the
// images.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "integration-tests/harness.h"

namespace vault::integration {
namespace {

constexpr int kExitRefused = 4;  // vaultctl/output.h
constexpr int kExitNotFound = 3;

constexpr absl::string_view kConfig =
    R"({"architecture":"amd64","os":"linux","config":{"Entrypoint":["/bin/hello"],)"
    R"("Cmd":["world"],"Env":["GREETING=hi"]},"rootfs":{"type":"layers","diff_ids":[]}})";

std::string HexOf(absl::string_view bytes) { return Hex(Sha256(bytes)); }

std::string Descriptor(absl::string_view type, absl::string_view bytes) {
  return absl::StrCat(R"({"mediaType":")", type, R"(","digest":"sha256:)", HexOf(bytes),
                      R"(","size":)", bytes.size(), "}");
}

class ImageCliTest : public VaultTest {
 protected:
  void SetUp() override {
    VaultTest::SetUp();
    absl::StatusOr<Vaultd*> d = StartStandaloneVault("a");
    ASSERT_TRUE(d.ok()) << d.status();
    vaultd_ = *d;
    // One layer: a file, a directory, a symlink, made into a tar by GNU tar.
    const std::string tree = root() + "/tree";
    ASSERT_EQ(mkdir(tree.c_str(), 0755), 0);
    ASSERT_EQ(mkdir((tree + "/bin").c_str(), 0755), 0);
    ASSERT_EQ(WriteFile(tree + "/bin/hello", "#!/bin/sh\necho hello\n"), absl::OkStatus());
    ASSERT_EQ(chmod((tree + "/bin/hello").c_str(), 0755), 0);
    ASSERT_EQ(symlink("bin/hello", (tree + "/greet").c_str()), 0);
    RunResult tar = RunProgram({"/bin/tar", "--format=pax", "--owner=0", "--group=0", "--mtime=@0",
                                "-C", tree, "-cf", root() + "/layer.tar", "."},
                               absl::Seconds(30));
    ASSERT_EQ(tar.exit_code, 0) << tar;
    layer_ = *ReadFile(root() + "/layer.tar");
    config_ = std::string(kConfig);
    manifest_ = absl::StrCat(
        R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":)",
        Descriptor("application/vnd.oci.image.config.v1+json", config_), R"(,"layers":[)",
        Descriptor("application/vnd.oci.image.layer.v1.tar", layer_), "]}");
  }

  // An OCI image layout directory holding the image; `layer` replaces the layer's bytes.
  std::string Layout(const std::string& name, const std::string& layer) {
    const std::string dir = root() + "/" + name;
    EXPECT_EQ(mkdir(dir.c_str(), 0755), 0);
    EXPECT_EQ(mkdir((dir + "/blobs").c_str(), 0755), 0);
    EXPECT_EQ(mkdir((dir + "/blobs/sha256").c_str(), 0755), 0);
    EXPECT_EQ(WriteFile(dir + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})"),
              absl::OkStatus());
    std::string index =
        absl::StrCat(R"({"schemaVersion":2,"manifests":[)",
                     Descriptor("application/vnd.oci.image.manifest.v1+json", manifest_));
    index.pop_back();
    absl::StrAppend(&index,
                    R"(,"annotations":{"org.opencontainers.image.ref.name":"hello:oci"}}]})");
    EXPECT_EQ(WriteFile(dir + "/index.json", index), absl::OkStatus());
    for (const std::string* blob : {&manifest_, &config_}) {
      EXPECT_EQ(WriteFile(dir + "/blobs/sha256/" + HexOf(*blob), *blob), absl::OkStatus());
    }
    EXPECT_EQ(WriteFile(dir + "/blobs/sha256/" + HexOf(layer_), layer), absl::OkStatus());
    return dir;
  }

  RunResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--vault", vaultd_->socket()});
    return Vaultctl(args);
  }
  std::string Id() const { return "sha256:" + HexOf(manifest_); }

  Vaultd* vaultd_ = nullptr;
  std::string layer_, config_, manifest_;
};

TEST_F(ImageCliTest, ImportsALayoutDirectoryAndItsTarAndShowsTheImage) {
  const std::string dir = Layout("layout", layer_);
  RunResult import = Ctl({"image", "import", dir});
  ASSERT_EQ(import.exit_code, kExitOk) << import;
  EXPECT_EQ(import.out, absl::StrCat("imported ", Id(),
                                     " as hello:oci: 1 layers, 2 files (21 B), 3 new blobs in "
                                     "the CAS\n"));
  // The root the container will run from, unpacked under the data directory, in folders a
  // container's own host id can pass through.
  const std::string rootfs = vaultd_->vault().data_dir + "/rootfs/" + HexOf(manifest_);
  struct stat st;
  ASSERT_EQ(stat((vaultd_->vault().data_dir + "/rootfs").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0711, 0711u);
  for (const std::string& d :
       {rootfs, rootfs + "/bin", rootfs + "/.vault", rootfs + "/.vault/init"}) {
    ASSERT_EQ(stat(d.c_str(), &st), 0) << d;
    EXPECT_EQ(st.st_mode & 0755, 0755u) << d;
  }
  EXPECT_EQ(*ReadFile(rootfs + "/bin/hello"), "#!/bin/sh\necho hello\n");
  EXPECT_EQ(*ReadFile(rootfs + "/greet"), "#!/bin/sh\necho hello\n");
  // Every blob is a CAS object under its OCI digest.
  for (const std::string* blob : {&manifest_, &config_, &layer_}) {
    RunResult stat = Ctl({"cas", "stat", DigestText(*blob)});
    EXPECT_EQ(stat.exit_code, kExitOk) << stat;
  }

  RunResult inspect = Ctl({"-o", "json", "image", "inspect", "hello:oci"});
  ASSERT_EQ(inspect.exit_code, kExitOk) << inspect;
  EXPECT_EQ(JsonField(inspect.out, "id"), Id());
  EXPECT_TRUE(absl::StrContains(inspect.out, R"("entrypoint":["/bin/hello"])")) << inspect.out;
  EXPECT_TRUE(absl::StrContains(inspect.out, R"("env":["GREETING=hi"])")) << inspect.out;
  RunResult by_prefix = Ctl({"image", "inspect", HexOf(manifest_).substr(0, 12)});
  ASSERT_EQ(by_prefix.exit_code, kExitOk) << by_prefix;
  EXPECT_TRUE(absl::StrContains(by_prefix.out, "entrypoint:   /bin/hello")) << by_prefix.out;

  // The same image as a tar of the layout, under another name: nothing new is stored.
  RunResult tar =
      RunProgram({"/bin/tar", "-C", dir, "-cf", root() + "/layout.tar", "."}, absl::Seconds(30));
  ASSERT_EQ(tar.exit_code, 0) << tar;
  RunResult again = Ctl({"image", "import", root() + "/layout.tar", "--name", "hello:again"});
  ASSERT_EQ(again.exit_code, kExitOk) << again;
  EXPECT_TRUE(absl::StartsWith(again.out, "already imported " + Id())) << again.out;
  EXPECT_TRUE(absl::StrContains(again.out, "0 new blobs")) << again.out;

  RunResult ls = Ctl({"image", "ls"});
  ASSERT_EQ(ls.exit_code, kExitOk) << ls;
  EXPECT_TRUE(absl::StrContains(ls.out, HexOf(manifest_).substr(0, 12))) << ls.out;
  EXPECT_TRUE(absl::StrContains(ls.out, "hello:oci,hello:again")) << ls.out;
  EXPECT_TRUE(absl::StrContains(ls.out, "linux/amd64")) << ls.out;

  // Both imports are in the audit log, with the image's id.
  RunResult audit = Ctl({"audit", "tail", "-n", "20"});
  ASSERT_EQ(audit.exit_code, kExitOk) << audit;
  EXPECT_TRUE(absl::StrContains(audit.out, Id())) << audit.out;
}

TEST_F(ImageCliTest, ImportsADockerSaveArchive) {
  const std::string dir = root() + "/docker";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir + "/abc123").c_str(), 0755), 0);
  ASSERT_EQ(WriteFile(dir + "/abc123/layer.tar", layer_), absl::OkStatus());
  ASSERT_EQ(WriteFile(dir + "/" + HexOf(config_) + ".json", config_), absl::OkStatus());
  ASSERT_EQ(WriteFile(dir + "/manifest.json", absl::StrCat(R"([{"Config":")", HexOf(config_),
                                                           R"(.json","RepoTags":["hello:docker"],)",
                                                           R"("Layers":["abc123/layer.tar"]}])")),
            absl::OkStatus());
  RunResult tar =
      RunProgram({"/bin/tar", "-C", dir, "-cf", root() + "/saved.tar", "."}, absl::Seconds(30));
  ASSERT_EQ(tar.exit_code, 0) << tar;
  RunResult import = Ctl({"-o", "json", "image", "import", root() + "/saved.tar"});
  ASSERT_EQ(import.exit_code, kExitOk) << import;
  EXPECT_EQ(JsonField(import.out, "source_format"), "docker-archive");
  EXPECT_TRUE(absl::StrContains(import.out, R"("names":["hello:docker"])")) << import.out;
  RunResult stat = Ctl({"cas", "stat", DigestText(layer_)});
  EXPECT_EQ(stat.exit_code, kExitOk) << stat;
}

TEST_F(ImageCliTest, ATamperedArchiveIsRefusedWithNothingStored) {
  std::string tampered = layer_;
  tampered[600] ^= 1;  // in the first file's content, under the layer's old digest
  const std::string dir = Layout("bad", tampered);
  RunResult import = Ctl({"image", "import", dir});
  EXPECT_EQ(import.exit_code, kExitRefused) << import;
  EXPECT_TRUE(absl::StrContains(import.err,
                                "sha256:" + HexOf(layer_) + " hashes to sha256:" + HexOf(tampered)))
      << import;
  RunResult ls = Ctl({"-o", "json", "image", "ls"});
  EXPECT_EQ(ls.out, "[]\n") << ls;
  for (const std::string* blob : {&manifest_, &config_, &tampered}) {
    EXPECT_EQ(Ctl({"cas", "stat", DigestText(*blob)}).exit_code, kExitNotFound);
  }
  // No root, not even a half-made one.
  RunResult find =
      RunProgram({"/usr/bin/find", vaultd_->vault().data_dir + "/rootfs", "-mindepth", "1"},
                 absl::Seconds(10));
  EXPECT_EQ(find.exit_code, 0) << find;
  EXPECT_EQ(find.out, "") << find;
  // The refusal is audited.
  RunResult audit = Ctl({"audit", "tail", "-n", "20"});
  EXPECT_TRUE(absl::StrContains(audit.out, "image.import  denied  local-admin")) << audit.out;
}

TEST_F(ImageCliTest, RemoveKeepsTheBlobsAndARestartKeepsTheImages) {
  ASSERT_EQ(Ctl({"image", "import", Layout("layout", layer_), "--name", "keep"}).exit_code,
            kExitOk);
  ASSERT_TRUE(vaultd_->Stop().has_value());
  ASSERT_EQ(vaultd_->Start(), absl::OkStatus());
  RunResult inspect = Ctl({"image", "inspect", "keep"});
  ASSERT_EQ(inspect.exit_code, kExitOk) << inspect;
  RunResult rm = Ctl({"image", "rm", "keep"});
  ASSERT_EQ(rm.exit_code, kExitOk) << rm;
  EXPECT_EQ(rm.out, "removed " + Id() +
                        "; its blobs stay in the CAS (the vault does not delete "
                        "objects)\n");
  RunResult gone = Ctl({"image", "inspect", "keep"});
  EXPECT_EQ(gone.exit_code, kExitNotFound) << gone;
  EXPECT_TRUE(absl::StrContains(gone.err, "vaultctl image ls")) << gone;
  EXPECT_EQ(Ctl({"cas", "stat", DigestText(layer_)}).exit_code, kExitOk);
  struct stat st;
  EXPECT_NE(stat((vaultd_->vault().data_dir + "/rootfs/" + HexOf(manifest_)).c_str(), &st), 0);
}

}  // namespace
}  // namespace vault::integration
