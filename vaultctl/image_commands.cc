// vaultctl image ...: container images on a vault (docs/containers.md), through the Images
// service on its admin socket.
//
//   vaultctl image import hello.tar [--name hello:1]   # docker/podman save, or an OCI layout tar
//   vaultctl image import ./oci-layout-dir              # a directory: sent as a tar (GNU tar)
//   vaultctl image ls
//   vaultctl image inspect hello:1
//   vaultctl image rm hello:1
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/file_util.h"
#include "common/unique_fd.h"
#include "node/grpc_status.h"
#include "vault/v1/image.grpc.pb.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using vault::v1::ImageRecord;

constexpr size_t kPiece = 1 << 20;

absl::Status FromImagesGrpc(const grpc::Status& status) {
  absl::Status s = node::FromGrpc(status);
  if (absl::IsUnimplemented(s)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this vault does not serve the image commands here: they are served only on a vault's "
        "admin socket (--vault PATH or --config), by a vaultd with container images (",
        s.message(), ")"));
  }
  return s;
}

std::string Hex(const vault::v1::Digest& d) { return absl::BytesToHexString(d.sha256()); }

std::string ShortId(const ImageRecord& r) { return r.id().substr(7, 12); }

uint64_t BlobBytes(const ImageRecord& r) {
  uint64_t total = r.manifest().size() + r.config().size();
  for (const vault::v1::ImageLayer& l : r.layers()) total += l.blob().size();
  return total;
}

Json RecordJson(const ImageRecord& r) {
  Json names = Json::Array();
  for (const std::string& n : r.names()) names.Push(n);
  Json layers = Json::Array();
  for (const vault::v1::ImageLayer& l : r.layers()) {
    layers.Push(Json::Object()
                    .Add("digest", absl::StrCat("sha256:", Hex(l.blob())))
                    .Add("size", l.blob().size())
                    .Add("media_type", l.media_type()));
  }
  auto strings = [](const google::protobuf::RepeatedPtrField<std::string>& v) {
    Json a = Json::Array();
    for (const std::string& s : v) a.Push(s);
    return a;
  };
  return Json::Object()
      .Add("id", r.id())
      .Add("names", names)
      .Add("manifest", absl::StrCat("sha256:", Hex(r.manifest())))
      .Add("config", absl::StrCat("sha256:", Hex(r.config())))
      .Add("layers", layers)
      .Add("architecture", r.architecture())
      .Add("os", r.os())
      .Add("entrypoint", strings(r.entrypoint()))
      .Add("cmd", strings(r.cmd()))
      .Add("env", strings(r.env()))
      .Add("working_dir", r.working_dir())
      .Add("user", r.user())
      .Add("source_format", r.source_format())
      .Add("blob_bytes", BlobBytes(r))
      .Add("files", r.files())
      .Add("unpacked_bytes", r.unpacked_bytes())
      .Add("dropped", r.dropped())
      .Add("imported_unix_ms", r.imported_unix_ms());
}

std::string Time(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

void PrintRecord(const ImageRecord& r) {
  auto list = [](const google::protobuf::RepeatedPtrField<std::string>& v) {
    std::vector<std::string> safe;
    for (const std::string& s : v) safe.push_back(TerminalSafe(s));
    return safe.empty() ? std::string("-") : absl::StrJoin(safe, " ");
  };
  std::cout << "id:           " << r.id() << "\n"
            << "names:        " << list(r.names()) << "\n"
            << "platform:     " << TerminalSafe(r.os()) << "/" << TerminalSafe(r.architecture())
            << "\n"
            << "entrypoint:   " << list(r.entrypoint()) << "\n"
            << "cmd:          " << list(r.cmd()) << "\n"
            << "working dir:  " << (r.working_dir().empty() ? "/" : TerminalSafe(r.working_dir()))
            << "\n"
            << "env:          " << list(r.env()) << "\n"
            << "imported:     " << Time(r.imported_unix_ms()) << " from a " << r.source_format()
            << "\n"
            << "blobs:        " << HumanBytes(BlobBytes(r)) << " in the CAS\n"
            << "unpacked:     " << r.files() << " files, " << HumanBytes(r.unpacked_bytes());
  if (r.dropped() > 0) std::cout << " (" << r.dropped() << " devices, setid bits, xattrs dropped)";
  std::cout << "\n"
            << "config:       sha256:" << Hex(r.config()) << "\n"
            << "layers:\n";
  for (const vault::v1::ImageLayer& l : r.layers()) {
    std::cout << "  sha256:" << Hex(l.blob()) << "  " << HumanBytes(l.blob().size()) << "  "
              << TerminalSafe(l.media_type()) << "\n";
  }
}

// The bytes of FILE, or of a directory as GNU tar writes it, in pieces.
class ArchiveSource {
 public:
  static absl::StatusOr<ArchiveSource> Open(const std::string& path) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) return common::PosixError(errno, path);
    ArchiveSource s;
    if (!S_ISDIR(st.st_mode)) {
      s.fd_ = common::UniqueFd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!s.fd_.valid()) return common::PosixError(errno, path);
      s.size_ = static_cast<uint64_t>(st.st_size);
      return s;
    }
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return common::PosixError(errno, "pipe");
    const pid_t pid = fork();
    if (pid < 0) return common::PosixError(errno, "fork");
    if (pid == 0) {
      dup2(pipe_fds[1], 1);
      execlp("tar", "tar", "--format=pax", "-C", path.c_str(), "-cf", "-", ".", nullptr);
      _exit(127);
    }
    close(pipe_fds[1]);
    s.fd_ = common::UniqueFd(pipe_fds[0]);
    s.tar_pid_ = pid;
    return s;
  }
  ArchiveSource(ArchiveSource&& o) noexcept
      : fd_(std::move(o.fd_)), tar_pid_(std::exchange(o.tar_pid_, -1)), size_(o.size_) {}
  ~ArchiveSource() {
    if (tar_pid_ > 0) {
      kill(tar_pid_, SIGKILL);
      waitpid(tar_pid_, nullptr, 0);
    }
  }
  // 0 for a directory (its size is known only once sent).
  uint64_t size() const { return size_; }

  // The next piece; empty at the end.
  absl::StatusOr<std::string> Next() {
    std::string buf(kPiece, '\0');
    size_t got = 0;
    while (got < buf.size()) {
      const ssize_t n = read(fd_.get(), buf.data() + got, buf.size() - got);
      if (n < 0) {
        if (errno == EINTR) continue;
        return common::PosixError(errno, "read the archive");
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    buf.resize(got);
    if (got == 0 && tar_pid_ > 0) {
      int status = 0;
      waitpid(tar_pid_, &status, 0);
      tar_pid_ = -1;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        return absl::FailedPreconditionError(
            "tar could not read the directory (its message is above); nothing was imported");
      }
    }
    return buf;
  }

 private:
  ArchiveSource() = default;
  common::UniqueFd fd_;
  pid_t tar_pid_ = -1;
  uint64_t size_ = 0;
};

int ImportCommand(const GlobalOptions& g, const std::string& path, const std::string& name) {
  absl::StatusOr<ArchiveSource> source = ArchiveSource::Open(path);
  if (!source.ok()) return ReportConnectError(source.status(), g.json());
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::Images::Stub images(conn->channel());
  // The vault unpacks every layer before it answers: give it time for that too.
  std::unique_ptr<grpc::ClientContext> ctx =
      conn->StreamContext(std::max<uint64_t>(source->size(), uint64_t{1} << 30) * 3);
  vault::v1::ImportImageResponse resp;
  std::unique_ptr<grpc::ClientWriter<vault::v1::ImportImageRequest>> writer =
      images.Import(ctx.get(), &resp);
  vault::v1::ImportImageRequest req;
  req.set_name(name);
  absl::Status local;
  for (;;) {
    absl::StatusOr<std::string> piece = source->Next();
    if (!piece.ok()) {
      local = piece.status();
      break;
    }
    if (piece->empty()) break;
    req.set_data(*std::move(piece));
    if (!writer->Write(req)) break;  // the vault ended the call: Finish says why
    req.Clear();
  }
  if (!local.ok()) {
    ctx->TryCancel();
    (void)writer->Finish();
    return ReportError(local, g.json());
  }
  writer->WritesDone();
  absl::Status s = FromImagesGrpc(writer->Finish());
  if (!s.ok()) return ReportError(s, g.json());
  const ImageRecord& r = resp.image();
  if (g.json()) {
    std::cout << RecordJson(r)
                     .Add("already_present", resp.already_present())
                     .Add("blobs_stored", resp.blobs_stored())
                     .ToString()
              << "\n";
  } else {
    std::cout << (resp.already_present() ? "already imported " : "imported ") << r.id();
    if (!r.names().empty()) std::cout << " as " << TerminalSafe(absl::StrJoin(r.names(), ", "));
    std::cout << ": " << r.layers_size() << " layers, " << r.files() << " files ("
              << HumanBytes(r.unpacked_bytes()) << ")"
              << ", " << resp.blobs_stored() << " new blobs in the CAS\n";
  }
  return kExitOk;
}

int ListCommand(const GlobalOptions& g) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::Images::Stub images(conn->channel());
  vault::v1::ListImagesResponse resp;
  absl::Status s =
      FromImagesGrpc(images.List(conn->Context().get(), vault::v1::ListImagesRequest(), &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    Json arr = Json::Array();
    for (const ImageRecord& r : resp.images()) arr.Push(RecordJson(r));
    std::cout << arr.ToString() << "\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows = {
      {"ID", "NAMES", "PLATFORM", "LAYERS", "SIZE", "IMPORTED"}};
  for (const ImageRecord& r : resp.images()) {
    std::vector<std::string> names;
    for (const std::string& n : r.names()) names.push_back(TerminalSafe(n));
    rows.push_back({ShortId(r), names.empty() ? "-" : absl::StrJoin(names, ","),
                    absl::StrCat(TerminalSafe(r.os()), "/", TerminalSafe(r.architecture())),
                    absl::StrCat(r.layers_size()), HumanBytes(BlobBytes(r)),
                    Time(r.imported_unix_ms())});
  }
  PrintTable(rows);
  return kExitOk;
}

int InspectCommand(const GlobalOptions& g, const std::string& ref) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::Images::Stub images(conn->channel());
  vault::v1::InspectImageRequest req;
  req.set_ref(ref);
  ImageRecord r;
  absl::Status s = FromImagesGrpc(images.Inspect(conn->Context().get(), req, &r));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout << RecordJson(r).ToString() << "\n";
  } else {
    PrintRecord(r);
  }
  return kExitOk;
}

int RemoveCommand(const GlobalOptions& g, const std::string& ref) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::Images::Stub images(conn->channel());
  vault::v1::RemoveImageRequest req;
  req.set_ref(ref);
  vault::v1::RemoveImageResponse resp;
  absl::Status s = FromImagesGrpc(images.Remove(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) {
    std::cout << Json::Object().Add("id", resp.image().id()).Add("removed", true).ToString()
              << "\n";
  } else {
    std::cout << "removed " << resp.image().id()
              << "; its blobs stay in the CAS (the vault does not delete objects)\n";
  }
  return kExitOk;
}

}  // namespace

void AddImageCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  auto* image = app.add_subcommand(
      "image", "Container images: import, list, inspect, remove (admin socket only)");
  image->require_subcommand(1);

  auto* import_cmd = image->add_subcommand(
      "import",
      "Import an image: a `docker save`/`podman save` archive, an OCI image layout as a tar, or "
      "an OCI image layout directory. Every blob is hashed and checked and every layer unpacked "
      "before anything is stored");
  static std::string import_path, import_name;
  import_cmd->add_option("FILE", import_path, "Archive (.tar, .tar.gz) or OCI layout directory")
      ->required();
  import_cmd->add_option("--name", import_name,
                         "Name the image (default: the name the archive gives, if any)");
  import_cmd->callback(
      [&] { command = [&g] { return ImportCommand(g, import_path, import_name); }; });

  auto* ls = image->add_subcommand("ls", "List the vault's images");
  ls->callback([&] { command = [&g] { return ListCommand(g); }; });

  auto* inspect = image->add_subcommand("inspect", "Show an image: platform, command, layers");
  static std::string inspect_ref;
  inspect->add_option("IMAGE", inspect_ref, "A name, sha256:<id>, or 12+ hex digits of the id")
      ->required();
  inspect->callback([&] { command = [&g] { return InspectCommand(g, inspect_ref); }; });

  auto* rm = image->add_subcommand(
      "rm", "Remove an image: its record, names and unpacked root (its blobs stay in the CAS)");
  static std::string rm_ref;
  rm->add_option("IMAGE", rm_ref, "A name, sha256:<id>, or 12+ hex digits of the id")->required();
  rm->callback([&] { command = [&g] { return RemoveCommand(g, rm_ref); }; });
}

}  // namespace vault::vaultctl
