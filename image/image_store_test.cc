#include "image/image_store.h"

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "cas/digest.h"
#include "cas/store.h"
#include "common/file_util.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "image/testing/tar_builder.h"
#include "storage/database.h"

namespace vault::image {
namespace {

using testing::Dir;
using ::testing::ElementsAre;
using testing::File;
using ::testing::HasSubstr;
using testing::MakeTar;
using testing::RawHeader;
using testing::Symlink;
using testing::TarEntry;

constexpr absl::string_view kConfig =
    R"({"architecture":"amd64","os":"linux","config":{"Env":["PATH=/bin"],)"
    R"("Entrypoint":["/bin/agent"],"Cmd":["--serve"],"WorkingDir":"/work"},)"
    R"("rootfs":{"type":"layers","diff_ids":[]}})";

std::string Sha(absl::string_view bytes) { return cas::Digest::Of(bytes).hex(); }

std::string Descriptor(absl::string_view type, absl::string_view bytes) {
  return absl::StrCat(R"({"mediaType":")", type, R"(","digest":"sha256:)", Sha(bytes),
                      R"(","size":)", bytes.size(), "}");
}

// An OCI image layout, as a tar, of an image with the given layers (plain tars) and config.
struct Layout {
  std::vector<std::string> layers;
  std::string config = std::string(kConfig);
  std::string layer_type = "application/vnd.oci.image.layer.v1.tar";
  std::string name = "example:1";

  std::string Manifest() const {
    std::string m = absl::StrCat(
        R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",)",
        R"("config":)", Descriptor("application/vnd.oci.image.config.v1+json", config),
        R"(,"layers":[)");
    for (size_t i = 0; i < layers.size(); ++i) {
      absl::StrAppend(&m, i ? "," : "", Descriptor(layer_type, layers[i]));
    }
    return absl::StrCat(m, "]}");
  }
  std::vector<TarEntry> Entries() const {
    const std::string manifest = Manifest();
    std::string index =
        absl::StrCat(R"({"schemaVersion":2,"manifests":[)",
                     Descriptor("application/vnd.oci.image.manifest.v1+json", manifest));
    index.pop_back();
    absl::StrAppend(&index, R"(,"annotations":{"io.containerd.image.name":")", name, R"("}}]})");
    std::vector<TarEntry> e{File("oci-layout", R"({"imageLayoutVersion":"1.0.0"})"),
                            File("index.json", index),
                            Dir("blobs"),
                            Dir("blobs/sha256"),
                            File("blobs/sha256/" + Sha(manifest), manifest),
                            File("blobs/sha256/" + Sha(config), config)};
    for (const std::string& l : layers) e.push_back(File("blobs/sha256/" + Sha(l), l));
    return e;
  }
  std::string Tar() const { return MakeTar(Entries()); }
};

class ImageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<storage::Database>> db =
        storage::Database::Open({.path = tmp_.Path("db"), .sync_writes = false}, AllFamilies());
    ASSERT_TRUE(db.ok()) << db.status();
    db_ = *std::move(db);
    absl::StatusOr<std::unique_ptr<cas::Store>> store =
        cas::Store::Open(db_.get(), cas::StoreOptions{});
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    absl::StatusOr<std::unique_ptr<ImageStore>> images =
        ImageStore::Open(db_.get(), store_.get(), {.rootfs_dir = tmp_.Path("rootfs")});
    ASSERT_TRUE(images.ok()) << images.status();
    images_ = *std::move(images);
  }
  static std::vector<storage::ColumnFamilySpec> AllFamilies() {
    std::vector<storage::ColumnFamilySpec> cfs = cas::Store::ColumnFamilies();
    for (const auto& cf : ImageStore::ColumnFamilies()) cfs.push_back(cf);
    return cfs;
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = tmp_.Path(name);
    EXPECT_TRUE(common::WriteFileAtomic(path, bytes, 0600).ok());
    return path;
  }
  // Nothing of any image: no record, no root, no blob in the CAS.
  void ExpectNothingStored(const std::vector<std::string>& blobs) {
    EXPECT_TRUE(images_->List()->empty());
    int roots = 0;
    for (const auto& e : std::filesystem::directory_iterator(tmp_.Path("rootfs"))) {
      (void)e;
      ++roots;
    }
    EXPECT_EQ(roots, 0);
    for (const std::string& b : blobs) {
      EXPECT_FALSE(*store_->Contains(cas::Digest::Of(b))) << "a blob of " << b.size() << " bytes";
    }
  }

  common::testing::TempDir tmp_{"image_store_test"};
  std::unique_ptr<storage::Database> db_;
  std::unique_ptr<cas::Store> store_;
  std::unique_ptr<ImageStore> images_;
};

TEST_F(ImageStoreTest, ImportsAnOciLayoutIntoTheCasAndAnUnpackedRoot) {
  Layout l;
  l.layers = {MakeTar({File("bin/agent", "#!agent", 0755), File("etc/old", "x")}),
              MakeTar({File("etc/.wh.old", ""), Symlink("usr/bin", "../bin")})};
  absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("img.tar", l.Tar()), "");
  ASSERT_TRUE(got.ok()) << got.status();
  const vault::v1::ImageRecord& r = got->record;
  EXPECT_EQ(r.id(), "sha256:" + Sha(l.Manifest()));
  EXPECT_THAT(r.names(), ElementsAre("example:1"));
  EXPECT_EQ(r.layers_size(), 2);
  EXPECT_THAT(r.entrypoint(), ElementsAre("/bin/agent"));
  EXPECT_THAT(r.cmd(), ElementsAre("--serve"));
  EXPECT_THAT(r.env(), ElementsAre("PATH=/bin"));
  EXPECT_EQ(r.working_dir(), "/work");
  EXPECT_EQ(r.source_format(), "oci-layout");
  EXPECT_FALSE(got->already_present);
  EXPECT_EQ(got->blobs_stored, 4u);  // manifest, config, two layers
  for (const std::string& blob : {l.Manifest(), l.config, l.layers[0], l.layers[1]}) {
    EXPECT_EQ(*store_->ReadAll(cas::Digest::Of(blob)), blob);
  }
  const std::string root = images_->RootfsPath(r);
  EXPECT_EQ(*common::ReadFile(root + "/bin/agent"), "#!agent");
  EXPECT_FALSE(std::filesystem::exists(root + "/etc/old"));
  EXPECT_EQ(*common::ReadFile(root + "/usr/bin/agent"), "#!agent");

  // By name, by id, by a prefix; a second import changes nothing.
  EXPECT_EQ(images_->Resolve("example:1")->id(), r.id());
  EXPECT_EQ(images_->Resolve(r.id())->id(), r.id());
  EXPECT_EQ(images_->Resolve(r.id().substr(7, 12))->id(), r.id());
  EXPECT_EQ(images_->Resolve(r.id().substr(7, 11)).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<ImageStore::Imported> again = images_->Import(Write("img.tar", l.Tar()), "");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_present);
  EXPECT_EQ(again->blobs_stored, 0u);
}

TEST_F(ImageStoreTest, ImportsADockerSaveArchive) {
  const std::string layer = MakeTar({File("hello", "world")});
  const std::string config(kConfig);
  const std::string manifest_json =
      absl::StrCat(R"([{"Config":")", Sha(config), R"(.json","RepoTags":["hello:latest"],)",
                   R"("Layers":["0123abcd/layer.tar"]}])");
  const std::string tar =
      MakeTar({File("manifest.json", manifest_json), File(Sha(config) + ".json", config),
               Dir("0123abcd"), File("0123abcd/layer.tar", layer),
               File("repositories", R"({"hello":{"latest":"0123abcd"}})")});
  absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("docker.tar", tar), "");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_THAT(got->record.names(), ElementsAre("hello:latest"));
  EXPECT_EQ(got->record.source_format(), "docker-archive");
  ASSERT_EQ(got->record.layers_size(), 1);
  EXPECT_EQ(got->record.layers(0).media_type(), "application/vnd.oci.image.layer.v1.tar");
  EXPECT_EQ(*store_->ReadAll(cas::Digest::Of(layer)), layer);
  // The manifest made for it is stored under the id.
  absl::string_view hex = got->record.id();
  hex.remove_prefix(7);
  EXPECT_EQ(cas::Digest::Of(*store_->ReadAll(cas::Digest::FromParts(got->record.manifest().sha256(),
                                                                    got->record.manifest().size())
                                                 .value()))
                .hex(),
            hex);
  EXPECT_EQ(*common::ReadFile(images_->RootfsPath(got->record) + "/hello"), "world");
}

TEST_F(ImageStoreTest, RefusesADigestMismatchAndStoresNothing) {
  Layout l;
  l.layers = {MakeTar({File("a", "1")})};
  std::vector<TarEntry> entries = l.Entries();
  // One byte of the layer changed, under its old name.
  entries.back().content[entries.back().content.size() / 2] ^= 1;
  absl::StatusOr<ImageStore::Imported> got =
      images_->Import(Write("img.tar", MakeTar(entries)), "");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("hashes to sha256:"));
  ExpectNothingStored({l.Manifest(), l.config, l.layers[0]});
}

TEST_F(ImageStoreTest, RefusesMissingBlobsUnknownTypesAndOtherSystems) {
  Layout l;
  l.layers = {MakeTar({File("a", "1")})};
  {
    std::vector<TarEntry> entries = l.Entries();
    entries.pop_back();  // the layer
    absl::StatusOr<ImageStore::Imported> got =
        images_->Import(Write("img.tar", MakeTar(entries)), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("is not in the archive"));
  }
  {
    Layout xz = l;
    xz.layer_type = "application/vnd.oci.image.layer.v1.tar+xz";
    absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("img.tar", xz.Tar()), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("tar+xz"));
  }
  {
    Layout windows = l;
    windows.config = absl::StrReplaceAll(kConfig, {{"\"linux\"", "\"windows\""}});
    absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("img.tar", windows.Tar()), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("\"windows\""));
  }
  {
    absl::StatusOr<ImageStore::Imported> got =
        images_->Import(Write("img.tar", MakeTar({File("readme", "no image here")})), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("index.json"));
  }
  {
    absl::StatusOr<ImageStore::Imported> got =
        images_->Import(Write("img.tar", std::string(5000, 'x')), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  }
  ExpectNothingStored({l.Manifest(), l.config, l.layers[0]});
}

// The hash pass and the later passes must read the same bytes: a second entry of the same path
// (the one tar would extract last) is refused rather than hashed in place of the first.
TEST_F(ImageStoreTest, RefusesAnArchiveWithTwoEntriesOfOnePath) {
  const std::string good = MakeTar({File("bin/agent", "good")});
  const std::string evil = MakeTar({File("bin/agent", "evil")});
  const std::string config(kConfig);
  const std::string manifest_json =
      absl::StrCat(R"([{"Config":")", Sha(config), R"(.json","Layers":["l/layer.tar"]}])");
  for (bool evil_first : {true, false}) {
    const std::string tar =
        MakeTar({File("manifest.json", manifest_json), File(Sha(config) + ".json", config),
                 Dir("l"), File("l/layer.tar", evil_first ? evil : good),
                 File("l/layer.tar", evil_first ? good : evil)});
    absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("img.tar", tar), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("\"l/layer.tar\" appears twice"));
    ExpectNothingStored({config, good, evil});
  }
}

TEST_F(ImageStoreTest, AHostileLayerRefusesTheImportAndStoresNothing) {
  Layout l;
  l.layers = {MakeTar({File("ok", "1")}),
              RawHeader("../escape", '0', 4) + testing::Block("evil") + testing::EndOfTar()};
  absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("img.tar", l.Tar()), "");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("layer 1"));
  EXPECT_THAT(got.status().message(), HasSubstr("`..`"));
  ExpectNothingStored({l.Manifest(), l.config, l.layers[0], l.layers[1]});
  EXPECT_FALSE(std::filesystem::exists(tmp_.Path("escape")));
}

TEST_F(ImageStoreTest, NamesMoveBetweenImagesAndRemovalLeavesTheBlobs) {
  Layout a, b;
  a.layers = {MakeTar({File("v", "1")})};
  b.layers = {MakeTar({File("v", "2")})};
  ASSERT_TRUE(images_->Import(Write("a.tar", a.Tar()), "web").ok());
  absl::StatusOr<ImageStore::Imported> second = images_->Import(Write("b.tar", b.Tar()), "web");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(images_->Resolve("web")->id(), second->record.id());
  absl::StatusOr<std::vector<vault::v1::ImageRecord>> all = images_->List();
  ASSERT_EQ(all->size(), 2u);
  for (const vault::v1::ImageRecord& r : *all) {
    if (r.id() != second->record.id()) {
      EXPECT_TRUE(r.names().empty());
    }
  }
  EXPECT_EQ(images_->Import(Write("a.tar", a.Tar()), "sha256:abc").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(images_->Import(Write("a.tar", a.Tar()), "bad name").status().code(),
            absl::StatusCode::kInvalidArgument);

  absl::StatusOr<vault::v1::ImageRecord> removed = images_->Remove("web");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(images_->Resolve("web").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(images_->RootfsPath(*removed)));
  EXPECT_TRUE(*store_->Contains(cas::Digest::Of(b.layers[0])));
  EXPECT_EQ(images_->List()->size(), 1u);
}

// A name the archive suggests never takes one an image already has, and no name may look like an
// id: an untrusted archive cannot stand in for an image the operator named or by its id.
TEST_F(ImageStoreTest, SuggestedNamesNeverMoveAndNamesCannotLookLikeIds) {
  Layout a, b;
  a.layers = {MakeTar({File("v", "1")})};
  b.layers = {MakeTar({File("v", "2")})};
  b.name = "web:prod";
  ASSERT_TRUE(images_->Import(Write("a.tar", a.Tar()), "web:prod").ok());
  absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("b.tar", b.Tar()), "");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(got->record.names().empty());
  EXPECT_EQ(images_->Resolve("web:prod")->id(), "sha256:" + Sha(a.Manifest()));
  for (const std::string& id_like : {Sha(a.Manifest()).substr(0, 12), Sha(a.Manifest())}) {
    EXPECT_EQ(images_->Import(Write("b.tar", b.Tar()), id_like).status().code(),
              absl::StatusCode::kInvalidArgument);
    b.name = id_like;
    ASSERT_TRUE(images_->Import(Write("b.tar", b.Tar()), "").ok());
    EXPECT_EQ(images_->Resolve(id_like)->id(), "sha256:" + Sha(a.Manifest()));
  }
}

// A root no record stands for (left by an import that failed after unpacking) is never trusted:
// removed at the next start, and unpacked afresh by the next import of its image.
TEST_F(ImageStoreTest, RootsWithoutARecordAreNotTrusted) {
  Layout l;
  l.layers = {MakeTar({File("bin/agent", "good")})};
  const std::string root = tmp_.Path("rootfs/" + Sha(l.Manifest()));
  ASSERT_EQ(mkdir(root.c_str(), 0755), 0);
  ASSERT_TRUE(common::WriteFileAtomic(root + "/planted", "evil", 0644).ok());
  ASSERT_TRUE(images_->Import(Write("img.tar", l.Tar()), "").ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/planted"));
  EXPECT_EQ(*common::ReadFile(root + "/bin/agent"), "good");

  const std::string stray = tmp_.Path("rootfs/" + std::string(64, 'a'));
  ASSERT_EQ(mkdir(stray.c_str(), 0755), 0);
  images_.reset();
  absl::StatusOr<std::unique_ptr<ImageStore>> again =
      ImageStore::Open(db_.get(), store_.get(), {.rootfs_dir = tmp_.Path("rootfs")});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(std::filesystem::exists(stray));
  EXPECT_TRUE(std::filesystem::exists(root + "/bin/agent"));  // its record stands for it
}

TEST_F(ImageStoreTest, BoundsLayersNamesAndDecompressedBytes) {
  {
    Layout many;
    for (int i = 0; i < 129; ++i) many.layers.push_back(MakeTar({File(absl::StrCat("f", i), "")}));
    absl::StatusOr<ImageStore::Imported> got = images_->Import(Write("img.tar", many.Tar()), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("at most 128"));
  }
  {
    absl::StatusOr<ImageStore::Imported> got = images_->Import(
        Write("img.tar",
              MakeTar({File(std::string(2000, 'n') + "/" + std::string(2100, 'm'), "")})),
        "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("longer than 4095"));
  }
  {
    // 64 MiB of tar in a gzip of about 64 KiB, against a bound of 1 MiB.
    absl::StatusOr<std::unique_ptr<ImageStore>> small = ImageStore::Open(
        db_.get(), store_.get(), {.rootfs_dir = tmp_.Path("rootfs"), .max_archive_bytes = 1 << 20});
    ASSERT_TRUE(small.ok());
    const std::string bomb =
        MakeTar({File("blobs/sha256/x", std::string(64 << 20, '\0'))}, Compression::kGzip);
    absl::StatusOr<ImageStore::Imported> got = (*small)->Import(Write("bomb.tar.gz", bomb), "");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(got.status().message(), HasSubstr("containers.max_import_bytes"));
  }
  {
    Layout l;
    l.layers = {MakeTar({File("a", "1")})};
    absl::StatusOr<ImageStore::Imported> got = images_->Import(
        Write("img.tar", l.Tar()), "", [] { return absl::CancelledError("caller gone"); });
    EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled);
    ExpectNothingStored({l.Manifest(), l.config, l.layers[0]});
  }
}

// An image whose blobs reached the CAS another way (a container agent's hop brings them) is
// imported from there: the same checks, the same root.
TEST_F(ImageStoreTest, ImportsFromBlobsAlreadyInTheCas) {
  Layout l;
  l.layers = {MakeTar({File("bin/agent", "#!agent", 0755)}), MakeTar({File("etc/motd", "hi")})};
  for (const std::string& blob : {l.Manifest(), l.config, l.layers[0], l.layers[1]}) {
    ASSERT_TRUE(store_->Put(cas::Digest::Of(blob), blob).ok());
  }
  absl::StatusOr<vault::v1::ImageRecord> got =
      images_->ImportFromStore(cas::Digest::Of(l.Manifest()));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->id(), "sha256:" + Sha(l.Manifest()));
  EXPECT_EQ(got->source_format(), "cas");
  EXPECT_THAT(got->entrypoint(), ElementsAre("/bin/agent"));
  EXPECT_TRUE(got->names().empty());
  const std::string root = images_->RootfsPath(*got);
  EXPECT_EQ(*common::ReadFile(root + "/bin/agent"), "#!agent");
  EXPECT_EQ(*common::ReadFile(root + "/etc/motd"), "hi");
  EXPECT_TRUE(std::filesystem::is_directory(root + "/.vault"));  // mount points made
  EXPECT_EQ(images_->Resolve(got->id())->id(), got->id());
  // Again: the record that exists.
  absl::StatusOr<vault::v1::ImageRecord> again =
      images_->ImportFromStore(cas::Digest::Of(l.Manifest()));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->imported_unix_ms(), got->imported_unix_ms());
}

TEST_F(ImageStoreTest, FromTheCasAMissingBlobOrAnotherObjectIsRefused) {
  Layout l;
  l.layers = {MakeTar({File("bin/agent", "#!agent", 0755)})};
  ASSERT_TRUE(store_->Put(cas::Digest::Of(l.Manifest()), l.Manifest()).ok());
  ASSERT_TRUE(store_->Put(cas::Digest::Of(l.config), l.config).ok());
  absl::StatusOr<vault::v1::ImageRecord> got =
      images_->ImportFromStore(cas::Digest::Of(l.Manifest()));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr("the layer 0 of image sha256:"));
  EXPECT_TRUE(images_->List()->empty());

  const std::string code = "#!/bin/sh\necho not an image\n";
  ASSERT_TRUE(store_->Put(cas::Digest::Of(code), code).ok());
  got = images_->ImportFromStore(cas::Digest::Of(code));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("is not an image this vault runs"));

  // A hostile layer from the CAS is refused as from an archive, with nothing left.
  Layout bad;
  bad.layers = {RawHeader("../escape", '0', 4) + testing::Block("evil") + testing::EndOfTar()};
  for (const std::string& blob : {bad.Manifest(), bad.config, bad.layers[0]}) {
    ASSERT_TRUE(store_->Put(cas::Digest::Of(blob), blob).ok());
  }
  got = images_->ImportFromStore(cas::Digest::Of(bad.Manifest()));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr("`..`"));
  EXPECT_TRUE(images_->List()->empty());
  EXPECT_TRUE(std::filesystem::is_empty(tmp_.Path("rootfs")));
}

}  // namespace
}  // namespace vault::image
