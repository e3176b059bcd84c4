// image_bench: what `vaultctl image import` costs against unpacking the same layer with tar.
//
// The image: one gzip layer of this machine's /usr/include (about 150 MB in 10,000 files), plus
// a small file that differs each run so that every import stores and unpacks a new image, in an
// OCI image layout tar. Each run imports it into a vault (the archive streamed over the admin
// socket, every blob hashed, the layer unpacked by the confined unpacker and synced, the blobs
// stored in the CAS, the record and an audit entry written). Baseline, same run: `tar -xzf` of the
// same layer into an empty folder (no hashing, no sync, no store), and the same followed by
// `sync -f`. Nothing is removed until every run is done (see the note in Main).
//
//   build/bench/image_bench [--runs=N]
#include <sys/stat.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "bench/bench_result.h"
#include "bench/bench_util.h"
#include "common/sha256.h"

namespace vault::bench {
namespace {

std::string Hex(const std::string& bytes) {
  common::Sha256 h;
  h.Update(bytes);
  const std::string raw = h.Finish();
  std::string out;
  for (unsigned char c : raw) absl::StrAppendFormat(&out, "%02x", c);
  return out;
}

std::string Descriptor(const std::string& type, const std::string& bytes) {
  return absl::StrCat(R"({"mediaType":")", type, R"(","digest":"sha256:)", Hex(bytes),
                      R"(","size":)", bytes.size(), "}");
}

// An OCI layout tar at `out` holding one image whose one layer is `layer` (gzip).
void WriteLayout(const std::string& dir, const std::string& layer, const std::string& out) {
  const std::string config =
      R"({"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers"}})";
  const std::string manifest = absl::StrCat(
      R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":)",
      Descriptor("application/vnd.oci.image.config.v1+json", config), R"(,"layers":[)",
      Descriptor("application/vnd.oci.image.layer.v1.tar+gzip", layer), "]}");
  MustRun({"mkdir", "-p", dir + "/blobs/sha256"});
  WriteAll(dir + "/oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  WriteAll(dir + "/index.json",
           absl::StrCat(R"({"schemaVersion":2,"manifests":[)",
                        Descriptor("application/vnd.oci.image.manifest.v1+json", manifest), "]}"));
  for (const std::string* b : {&config, &manifest, &layer}) {
    WriteAll(dir + "/blobs/sha256/" + Hex(*b), *b);
  }
  MustRun({"tar", "-C", dir, "-cf", out, "."});
}

int Main(int argc, char** argv) {
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--runs=")) {
      if (!absl::SimpleAtoi(a, &runs) || runs < 1) Die("--runs: a positive number");
    } else {
      std::printf("usage: %s [--runs=N]\n", argv[0]);
      return a == "--help" ? 0 : 2;
    }
  }
  char tmpl[] = "/tmp/image-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp");
  const std::string root = tmpl;
  Federation fed(root + "/fed", IMAGE_BENCH_VAULTCTL, IMAGE_BENCH_VAULTD);
  fed.Create({"a"});
  fed.StartAll();

  std::vector<double> import_s, tar_s, tar_sync_s;
  uint64_t layer_bytes = 0, tree_bytes = 0;
  for (int i = 0; i < runs; ++i) {
    // The run's layer: /usr/include and a file of its own.
    const std::string extra = absl::StrCat(root, "/extra-", i);
    MustRun({"mkdir", "-p", extra});
    WriteAll(extra + "/run", absl::StrCat("run ", i, "\n"));
    const std::string layer_path = absl::StrCat(root, "/layer-", i, ".tar.gz");
    MustRun(
        {"tar", "--format=pax", "-czf", layer_path, "-C", "/usr", "include", "-C", extra, "run"});
    const std::string layer = ReadAll(layer_path);
    layer_bytes = layer.size();
    const std::string image = absl::StrCat(root, "/image-", i, ".tar");
    WriteLayout(absl::StrCat(root, "/layout-", i), layer, image);

    const std::string out = absl::StrCat(root, "/untar-", i);
    MustRun({"mkdir", "-p", out});
    MustRun({"sync"});
    RunResult tar = MustRun({"tar", "-xzf", layer_path, "-C", out});
    tar_s.push_back(tar.seconds);
    RunResult synced = MustRun({"sync", "-f", out});  // what the import's syncfs costs tar
    tar_sync_s.push_back(tar.seconds + synced.seconds);
    RunResult du = MustRun({"du", "-sb", out});
    tree_bytes = std::stoull(du.out.substr(0, du.out.find('\t')));
    // Removed only at the end: ext4 scans past inodes freed moments ago when it allocates new
    // ones, which would charge the next step for this one's cleanup.

    MustRun({"sync"});
    RunResult imported = MustRun({IMAGE_BENCH_VAULTCTL, "--vault", fed.Socket("a"), "image",
                                  "import", image, "--name", absl::StrCat("bench:", i)});
    import_s.push_back(imported.seconds);
    std::fprintf(stderr, "run %d: import %.2f s, tar -xzf %.2f s\n", i, imported.seconds,
                 tar.seconds);
  }
  Summary imp = Summarize(import_s), tar = Summarize(tar_s), tar_sync = Summarize(tar_sync_s);
  std::printf(
      "image import of /usr/include (%.1f MB gzip layer, %.1f MB unpacked): p50 %.2f s "
      "(%.0f MB/s unpacked) vs tar -xzf %.2f s (x%.2f), tar -xzf + sync -f %.2f s "
      "(x%.2f)\n",
      layer_bytes / 1e6, tree_bytes / 1e6, imp.p50, tree_bytes / 1e6 / imp.p50, tar.p50,
      imp.p50 / tar.p50, tar_sync.p50, imp.p50 / tar_sync.p50);
  Result r;
  r.bench = "image_bench";
  r.metric = "image.import";
  r.label = "vaultctl image import: one gzip layer of /usr/include, p50";
  r.issue = 26;
  r.value = imp.p50;
  r.unit = "s";
  r.baseline = tar.p50;
  r.baseline_name = "tar -xzf of the same layer";
  r.better = Better::kLower;
  r.note = absl::StrFormat(
      "%d runs; layer %.1f MB, unpacked %.1f MB; import hashes every blob, unpacks with the "
      "confined unpacker and syncs, stores the blobs in the CAS, writes record and audit entry; "
      "tar -xzf + sync -f of the folder: p50 %.2f s",
      runs, layer_bytes / 1e6, tree_bytes / 1e6, tar_sync.p50);
  EmitResult(r);
  MustRun({"rm", "-rf", root});
  return 0;
}

}  // namespace
}  // namespace vault::bench

int main(int argc, char** argv) { return vault::bench::Main(argc, argv); }
