#include "image/layer_unpack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/testing/tar_builder.h"

namespace vault::image {
namespace {

using testing::Block;
using testing::Dir;
using testing::EndOfTar;
using testing::File;
using testing::Gzip;
using testing::Hardlink;
using ::testing::HasSubstr;
using testing::MakeTar;
using testing::RawHeader;
using testing::Special;
using testing::Symlink;
using testing::TarEntry;

// Hands out `bytes` in blocks of at most `block`.
ByteSource FromString(const std::string& bytes, size_t block = 4096) {
  auto offset = std::make_shared<size_t>(0);
  return [&bytes, offset, block]() -> absl::StatusOr<absl::string_view> {
    const size_t n = std::min(block, bytes.size() - *offset);
    absl::string_view out(bytes.data() + *offset, n);
    *offset += n;
    return out;
  };
}

class LayerUnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(mkdir(tmp_.Path("root").c_str(), 0755), 0);
    ASSERT_EQ(mkdir(tmp_.Path("outside").c_str(), 0755), 0);
    ASSERT_TRUE(common::WriteFileAtomic(tmp_.Path("outside/secret"), "keep", 0644).ok());
    root_ = common::UniqueFd(open(tmp_.Path("root").c_str(), O_RDONLY | O_DIRECTORY));
    ASSERT_TRUE(root_.valid());
  }

  absl::Status Apply(const std::string& layer, Compression c = Compression::kNone) {
    return ApplyLayer(FromString(layer), c, root_.get(), &budget_, &report_);
  }
  std::string Root(const std::string& rel) const { return tmp_.Path("root/" + rel); }
  std::string Read(const std::string& rel) const {
    absl::StatusOr<std::string> s = common::ReadFile(Root(rel));
    return s.ok() ? *s : absl::StrCat("<", s.status().ToString(), ">");
  }
  bool Exists(const std::string& rel) const {
    struct stat st;
    return lstat(Root(rel).c_str(), &st) == 0;
  }
  // The world outside the root is as it was.
  void ExpectOutsideUntouched() const {
    EXPECT_EQ(*common::ReadFile(tmp_.Path("outside/secret")), "keep");
    int count = 0;
    for (const auto& e : std::filesystem::directory_iterator(tmp_.Path("outside"))) {
      (void)e;
      ++count;
    }
    EXPECT_EQ(count, 1);
    std::vector<std::string> top;
    for (const auto& e : std::filesystem::directory_iterator(tmp_.path())) {
      top.push_back(e.path().filename());
    }
    EXPECT_THAT(top, ::testing::UnorderedElementsAre("root", "outside"));
  }

  common::testing::TempDir tmp_{"layer_unpack_test"};
  common::UniqueFd root_;
  UnpackLimits limits_;
  UnpackBudget budget_{limits_};
  UnpackReport report_;
};

TEST(CompressionOf, KnowsTheOciAndDockerLayerTypesOnly) {
  EXPECT_EQ(*CompressionOf("application/vnd.oci.image.layer.v1.tar"), Compression::kNone);
  EXPECT_EQ(*CompressionOf("application/vnd.oci.image.layer.v1.tar+gzip"), Compression::kGzip);
  EXPECT_EQ(*CompressionOf("application/vnd.oci.image.layer.v1.tar+zstd"), Compression::kZstd);
  EXPECT_EQ(*CompressionOf("application/vnd.docker.image.rootfs.diff.tar.gzip"),
            Compression::kGzip);
  absl::StatusOr<Compression> other = CompressionOf("application/vnd.oci.image.layer.v1.tar+xz");
  EXPECT_EQ(other.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other.status().message(), HasSubstr("tar+xz"));
}

TEST_F(LayerUnpackTest, UnpacksFilesDirectoriesLinksAndModes) {
  const std::string layer = MakeTar(
      {Dir("usr"), Dir("usr/bin"), File("usr/bin/tool", "#!x", 0755), Symlink("bin", "usr/bin"),
       Hardlink("usr/bin/alias", "usr/bin/tool"), Dir("tmp", 01777), File("etc/motd", "hi\n", 0600),
       Dir("app", 0777), File("app/run", "#!y", 0777)});
  ASSERT_TRUE(Apply(layer).ok());
  EXPECT_EQ(Read("usr/bin/tool"), "#!x");
  EXPECT_EQ(Read("bin/tool"), "#!x");  // through the symlink
  EXPECT_EQ(Read("usr/bin/alias"), "#!x");
  struct stat a, b, t, m;
  ASSERT_EQ(stat(Root("usr/bin/tool").c_str(), &a), 0);
  ASSERT_EQ(stat(Root("usr/bin/alias").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
  EXPECT_EQ(a.st_mode & 07777, 0755u);
  // Nothing is writable but by the vault, whatever the layer says: no local user plants a file
  // in a root every container of the image runs from.
  ASSERT_EQ(stat(Root("tmp").c_str(), &t), 0);
  EXPECT_EQ(t.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(Root("app").c_str(), &t), 0);
  EXPECT_EQ(t.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(Root("app/run").c_str(), &t), 0);
  EXPECT_EQ(t.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(Root("etc/motd").c_str(), &m), 0);  // its directory made for it
  EXPECT_EQ(m.st_mode & 07777, 0600u);
  EXPECT_EQ(report_.files, 3u);
  EXPECT_EQ(report_.symlinks, 1u);
  EXPECT_EQ(report_.hardlinks, 1u);
  EXPECT_EQ(report_.bytes, 9u);
}

TEST_F(LayerUnpackTest, ReadsGzipAndZstdLayers) {
  for (Compression c : {Compression::kGzip, Compression::kZstd}) {
    const std::string layer = MakeTar({File("a", "compressed")}, c);
    ASSERT_TRUE(Apply(layer, c).ok());
    EXPECT_EQ(Read("a"), "compressed");
  }
}

TEST_F(LayerUnpackTest, UpperLayersReplaceWhiteOutAndMakeDirectoriesOpaque) {
  ASSERT_TRUE(Apply(MakeTar({File("keep", "1"), File("gone", "2"), Dir("d"), File("d/old", "3"),
                             File("d/x", "4"), File("was-file", "5"), Dir("was-dir"),
                             File("was-dir/inner", "6")}))
                  .ok());
  ASSERT_TRUE(Apply(MakeTar({File(".wh.gone", ""), File("d/.wh..wh..opq", ""), File("d/new", "7"),
                             Dir("was-file"), File("was-dir", "8"), File("keep", "1b")}))
                  .ok());
  EXPECT_EQ(Read("keep"), "1b");
  EXPECT_FALSE(Exists("gone"));
  EXPECT_FALSE(Exists(".wh.gone"));
  EXPECT_FALSE(Exists("d/old"));
  EXPECT_FALSE(Exists("d/x"));
  EXPECT_EQ(Read("d/new"), "7");
  EXPECT_FALSE(Exists("d/.wh..wh..opq"));
  EXPECT_TRUE(std::filesystem::is_directory(Root("was-file")));
  EXPECT_EQ(Read("was-dir"), "8");
  EXPECT_EQ(report_.whiteouts, 2u);
}

TEST_F(LayerUnpackTest, OpaqueMarkerAfterTheNewEntriesKeepsThem) {
  ASSERT_TRUE(Apply(MakeTar({File("d/old", "1")})).ok());
  ASSERT_TRUE(Apply(MakeTar({File("d/new", "2"), File("d/.wh..wh..opq", "")})).ok());
  EXPECT_FALSE(Exists("d/old"));
  EXPECT_EQ(Read("d/new"), "2");
}

// The hostile corpus: each crafted layer is refused or neutralised, and nothing outside the
// root changes.

TEST_F(LayerUnpackTest, RefusesDotDotAndAbsolutePaths) {
  for (const char* name :
       {"../outside/secret", "a/../../outside/secret", "/etc/passwd", "./../x", "a/b/../../.."}) {
    const std::string layer = RawHeader(name, '0', 4) + Block("evil") + EndOfTar();
    absl::Status s = Apply(layer);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << name << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("the layer is refused")) << name;
  }
  ExpectOutsideUntouched();
}

TEST_F(LayerUnpackTest, SymlinksResolveInsideTheRootWhenLaterEntriesGoThroughThem) {
  // Symlinks to / and climbing out, then files written "through" them: they land in the root,
  // as they would seen from inside the container.
  ASSERT_TRUE(Apply(MakeTar({Symlink("up", "../../../../../../"), Symlink("rootlink", "/")})).ok());
  ASSERT_TRUE(Apply(MakeTar({File("up/tmp/planted", "x"), File("rootlink/etc/evil", "x")})).ok());
  EXPECT_EQ(Read("tmp/planted"), "x");
  EXPECT_EQ(Read("etc/evil"), "x");
  EXPECT_FALSE(std::filesystem::exists("/tmp/planted"));
  // A symlink to the absolute path of a folder outside: inside the root that path does not
  // exist, so an entry under it is refused rather than followed out.
  const std::string outside = tmp_.Path("outside");
  ASSERT_TRUE(Apply(MakeTar({Symlink("escape", outside)})).ok());
  absl::Status s = Apply(MakeTar({File("escape/secret", "pwned")}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("cannot be made"));
  ExpectOutsideUntouched();
}

TEST_F(LayerUnpackTest, WhiteoutsThroughASymlinkRemoveOnlyInsideTheRoot) {
  const std::string outside = tmp_.Path("outside");
  ASSERT_TRUE(
      Apply(MakeTar({Symlink("o", outside), Symlink("r", "/"), File("secret", "mine")})).ok());
  // Under a link to a folder that exists only outside: nothing to remove, nothing made.
  EXPECT_EQ(Apply(MakeTar({File("o/.wh.secret", "")})).code(), absl::StatusCode::kOk);
  EXPECT_EQ(Apply(MakeTar({File("o/.wh..wh..opq", "")})).code(), absl::StatusCode::kOk);
  ExpectOutsideUntouched();
  // Through a link to "/", the whiteout removes the root's own file.
  ASSERT_TRUE(Apply(MakeTar({File("r/.wh.secret", "")})).ok());
  EXPECT_FALSE(Exists("secret"));
  ExpectOutsideUntouched();
  for (const char* name : {".wh.", ".wh..", ".wh..."}) {
    EXPECT_EQ(Apply(RawHeader(name, '0', 0) + EndOfTar()).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
}

TEST_F(LayerUnpackTest, AufsBookkeepingIsSkipped) {
  ASSERT_TRUE(Apply(MakeTar({Dir(".wh..wh.plnk"), File(".wh..wh.plnk/1.2", "x"),
                             File(".wh..wh.aufs", ""), File("d/.wh..wh.orph", "")}))
                  .ok());
  EXPECT_FALSE(Exists(".wh..wh.plnk"));
  EXPECT_FALSE(Exists(".wh..wh.aufs"));
  EXPECT_FALSE(Exists("d/.wh..wh.orph"));
}

// A symlink to the deepest folder lets a path of 128 components reach far deeper on disk, where
// removal recursion and descriptors would run out: the depth counted is the folder's own.
TEST_F(LayerUnpackTest, DepthIsCountedOnDiskNotInThePath) {
  std::string deep;
  for (int i = 0; i < 126; ++i) absl::StrAppend(&deep, "a/");
  ASSERT_TRUE(Apply(MakeTar({File(deep + "x", "")})).ok());  // folders 1..126
  ASSERT_TRUE(Apply(MakeTar({Symlink("tip", deep)})).ok());
  ASSERT_TRUE(Apply(MakeTar({File("tip/b/y", "")})).ok());  // y in a folder 127 deep
  absl::Status s = Apply(MakeTar({File("tip/b/c/z", "")}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("more than 128 levels deep"));
  s = Apply(MakeTar({Dir("tip/b/c/d")}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
}

TEST_F(LayerUnpackTest, MissingFoldersAreMadeThroughSymlinkedParents) {
  ASSERT_TRUE(Apply(MakeTar({Dir("usr"), Dir("usr/lib"), Symlink("lib", "usr/lib")})).ok());
  ASSERT_TRUE(Apply(MakeTar({File("lib/x86_64/deep/libz.so", "elf")})).ok());
  EXPECT_EQ(Read("usr/lib/x86_64/deep/libz.so"), "elf");
}

TEST_F(LayerUnpackTest, RefusesASecondOpaqueMarkerAndLongSymlinkTargets) {
  ASSERT_TRUE(Apply(MakeTar({File("d/f", "")})).ok());
  absl::Status s = Apply(MakeTar({File("d/.wh..wh..opq", ""), File("d/.wh..wh..opq", "")}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("second opaque marker"));
  s = Apply(MakeTar({Symlink("l", std::string(1025, 'a'))}));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(Apply(MakeTar({Symlink("l", std::string(1024, 'a'))})).ok());
}

TEST_F(LayerUnpackTest, StopsWhenTheCallerSaysSo) {
  int asked = 0;
  budget_.keep_going = [&]() -> absl::Status {
    return ++asked > 2 ? absl::CancelledError("the import was cancelled") : absl::OkStatus();
  };
  absl::Status s = Apply(MakeTar({File("a", ""), File("b", ""), File("c", ""), File("d", "")}));
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(Exists("b"));
  EXPECT_FALSE(Exists("c"));
}

TEST_F(LayerUnpackTest, HardLinksMustNameAFileInsideTheRoot) {
  ASSERT_TRUE(Apply(MakeTar({Dir("d"), Symlink("s", "/")})).ok());
  const std::string outside_secret = tmp_.Path("outside/secret");
  struct Case {
    std::string target;
    std::string why;
  };
  for (const Case& c : std::vector<Case>{{outside_secret, "an absolute path"},
                                         {"../outside/secret", "a `..` component"},
                                         {"s/outside/secret", "which the layers do not hold"},
                                         {"d", "a hard link to a directory"},
                                         {"nothing", "which the layers do not hold"}}) {
    absl::Status s = Apply(RawHeader("link", '1', 0, c.target) + EndOfTar());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.target << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.why)) << c.target;
  }
  EXPECT_FALSE(Exists("link"));
  ExpectOutsideUntouched();
  struct stat st;
  ASSERT_EQ(stat(outside_secret.c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1u);
}

TEST_F(LayerUnpackTest, DropsSetidBitsDevicesAndExtendedAttributes) {
  TarEntry capped = File("usr/bin/ping", "elf", 04755);
  capped.xattrs = {{"security.capability", std::string("\x01\x00\x00\x02", 4)},
                   {"trusted.overlay.opaque", "y"}};
  ASSERT_TRUE(Apply(MakeTar({capped, File("sgid", "x", 02755), Special("dev/sda", AE_IFBLK),
                             Special("dev/kmem", AE_IFCHR), Special("fifo", AE_IFIFO)}))
                  .ok());
  struct stat st;
  ASSERT_EQ(stat(Root("usr/bin/ping").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat(Root("sgid").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_FALSE(Exists("dev/sda"));
  EXPECT_FALSE(Exists("dev/kmem"));
  EXPECT_FALSE(Exists("fifo"));
  EXPECT_EQ(getxattr(Root("usr/bin/ping").c_str(), "security.capability", nullptr, 0), -1);
  EXPECT_EQ(report_.dropped_setid, 2u);
  EXPECT_EQ(report_.skipped_devices, 3u);
  EXPECT_GE(report_.ignored_xattrs, 2u);  // pax carries each under two names
}

TEST_F(LayerUnpackTest, BoundsEntriesBytesAndDecompressionBombs) {
  {
    UnpackLimits small;
    small.max_bytes = 1 << 20;
    UnpackBudget budget(small);
    // A gzip bomb: 64 MiB of zeros in about 64 KiB.
    const std::string bomb =
        MakeTar({File("zeros", std::string(64 << 20, '\0'))}, Compression::kGzip);
    ASSERT_LT(bomb.size(), 1u << 20);
    absl::Status s =
        ApplyLayer(FromString(bomb), Compression::kGzip, root_.get(), &budget, &report_);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("containers.max_image_bytes"));
    EXPECT_FALSE(Exists("zeros"));
  }
  {
    // A declared size of 8 GiB - 1 with nothing behind it.
    UnpackLimits small;
    small.max_bytes = 1ull << 30;
    UnpackBudget budget(small);
    absl::Status s = ApplyLayer(FromString(RawHeader("big", '0', (8ull << 30) - 1) + EndOfTar()),
                                Compression::kNone, root_.get(), &budget, &report_);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  }
  {
    UnpackLimits few;
    few.max_entries = 10;
    UnpackBudget budget(few);
    std::vector<TarEntry> many;
    for (int i = 0; i < 11; ++i) many.push_back(File(absl::StrCat("f", i), ""));
    absl::Status s =
        ApplyLayer(FromString(MakeTar(many)), Compression::kNone, root_.get(), &budget, &report_);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("containers.max_image_entries"));
  }
  {
    // Tar bytes that are no file's content: 64 entries behind pax headers of 900 KiB each
    // (under libarchive's own bound for one), about 1 MiB of gzip.
    UnpackLimits small;
    small.max_bytes = 1 << 20;
    UnpackBudget budget(small);
    std::string tar;
    for (int i = 0; i < 64; ++i) {
      const std::string value(900 << 10, 'c');
      std::string record = absl::StrCat(" comment=", value, "\n");
      record = absl::StrCat(record.size() + 6, record);  // 921,6xx: six digits of length
      tar += RawHeader("pax", 'x', record.size()) + Block(record) +
             RawHeader(absl::StrCat("f", i), '0', 0);
    }
    tar += EndOfTar();
    absl::Status s =
        ApplyLayer(FromString(Gzip(tar)), Compression::kGzip, root_.get(), &budget, &report_);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("decompression bomb"));
  }
  {
    // A special header (pax) of 64 MiB: libarchive's own bound refuses it.
    UnpackBudget budget(limits_);
    std::string tar = RawHeader("pax", 'x', 64 << 20) + std::string(64 << 20, 'a') + EndOfTar();
    absl::Status s =
        ApplyLayer(FromString(Gzip(tar)), Compression::kGzip, root_.get(), &budget, &report_);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(s.message(), HasSubstr("too large"));
  }
}

TEST_F(LayerUnpackTest, BudgetSpansTheImagesLayers) {
  UnpackLimits small;
  small.max_bytes = 10;
  UnpackBudget budget(small);
  ASSERT_TRUE(ApplyLayer(FromString(MakeTar({File("a", "123456")})), Compression::kNone,
                         root_.get(), &budget, &report_)
                  .ok());
  EXPECT_EQ(ApplyLayer(FromString(MakeTar({File("b", "123456")})), Compression::kNone, root_.get(),
                       &budget, &report_)
                .code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(LayerUnpackTest, RefusesWhatIsNotATarOrNotTheNamedCompression) {
  absl::Status garbage = Apply(std::string(4096, 'x'));
  EXPECT_EQ(garbage.code(), absl::StatusCode::kInvalidArgument) << garbage;
  const std::string gz = MakeTar({File("a", "1")}, Compression::kGzip);
  EXPECT_EQ(Apply(gz, Compression::kNone).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Apply(MakeTar({File("a", "1")}), Compression::kGzip).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Apply(gz, Compression::kZstd).code(), absl::StatusCode::kInvalidArgument);
  // Truncated in the middle of a file's content.
  const std::string whole = MakeTar({File("a", std::string(10000, 'z'))});
  EXPECT_EQ(Apply(whole.substr(0, 3000)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LayerUnpackTest, RefusesPathsDeeperThanAnyImageNeeds) {
  std::string deep;
  for (int i = 0; i < 129; ++i) absl::StrAppend(&deep, "d/");
  deep += "f";
  EXPECT_EQ(Apply(MakeTar({File(deep, "x")})).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LayerUnpackTest, MountPointsAreMadeWhereTheImageHasNone) {
  ASSERT_TRUE(Apply(MakeTar({File("probe", "x", 0755), Dir("tmp", 0700)})).ok());
  ASSERT_TRUE(PrepareMountPoints(root_.get()).ok());
  for (const char* d : {"proc", "dev", "sys", "work", "tmp", ".vault"}) {
    EXPECT_TRUE(std::filesystem::is_directory(Root(d))) << d;
  }
  EXPECT_EQ(Read(".vault/init"), "");
  struct stat st;
  ASSERT_EQ(stat(Root("tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);  // the image's own folder, as it made it
}

TEST_F(LayerUnpackTest, MountPointsThatAreNotFoldersRefuseTheImage) {
  ASSERT_TRUE(Apply(MakeTar({Symlink("proc", "/")})).ok());
  absl::Status s = PrepareMountPoints(root_.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/proc is not a folder"));
  ExpectOutsideUntouched();
}

TEST_F(LayerUnpackTest, TheVaultsOwnFolderNameIsRefused) {
  ASSERT_TRUE(Apply(MakeTar({File(".vault/init", "#!/bin/sh\necho pwned\n", 0755)})).ok());
  absl::Status s = PrepareMountPoints(root_.get());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/.vault"));
}

TEST_F(LayerUnpackTest, AFailingSourceFailsTheLayerWithItsOwnError) {
  ByteSource broken = []() -> absl::StatusOr<absl::string_view> {
    return absl::DataLossError("chunk 3 of the layer is damaged");
  };
  absl::Status s = ApplyLayer(broken, Compression::kNone, root_.get(), &budget_, &report_);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("chunk 3"));
}

}  // namespace
}  // namespace vault::image
