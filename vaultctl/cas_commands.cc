// vaultctl cas ...: put, get, stat, ls, has.
#include <dirent.h>
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cas/digest.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "node/grpc_status.h"
#include "vaultctl/cas_batch.h"
#include "vaultctl/cas_upload.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

using node::FromGrpc;
using node::FromItemStatus;
using node::ToProto;

constexpr uint64_t kBatchItemMax = 1 << 20;  // larger files are streamed
constexpr size_t kStreamPiece = 1 << 20;
// BatchPut calls in flight (each with its own thread) while the main thread reads the next.
constexpr int kWorkers = 4;
// A batch: at most this much file content (the vault's default limit is 4 MiB per call, and its
// message limit at least 64 KiB above that) in at most this many files.
constexpr uint64_t kBatchBytes = (4 << 20) - (64 << 10);
constexpr size_t kBatchItems = 4096;

struct PutFile {
  std::string path;
  // Files found in a directory: the directory (an index into PutPlan::dirs) and where the
  // name begins in `path`, to open it relative to the directory (a shorter path walk).
  int dir = -1;
  size_t name_at = 0;
  uint64_t size = 0;  // learnt when the file is opened (or first stat'ed, for the progress bar)
  // Results.
  cas::Digest digest;
  absl::Status status;
  bool already_present = false;
  uint64_t seq = 0;
};

struct PutPlan {
  std::vector<std::string> dirs;
  std::vector<PutFile> files;
};

absl::Status CollectDir(const std::string& path, PutPlan* plan);

// `path` is a command-line argument or a directory entry that needs a stat (a symbolic link, or
// a file system that does not give entry types): a regular file or a directory to walk.
absl::Status CollectPath(const std::string& path, PutPlan* plan) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return common::PosixError(errno, path);
  if (S_ISREG(st.st_mode)) {
    plan->files.push_back(PutFile{.path = path, .size = static_cast<uint64_t>(st.st_size)});
    return absl::OkStatus();
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is neither a file nor a directory"));
  }
  return CollectDir(path, plan);
}

// Walks a directory in name order. Regular files are taken on the word of their directory
// entry (no stat each: their size is learnt when they are read).
absl::Status CollectDir(const std::string& path, PutPlan* plan) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr) return common::PosixError(errno, path);
  std::vector<std::pair<std::string, unsigned char>> entries;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") entries.emplace_back(std::move(n), e->d_type);
  }
  closedir(d);
  std::sort(entries.begin(), entries.end());
  const int dir = static_cast<int>(plan->dirs.size());
  plan->dirs.push_back(path);
  // "docs/" names its files "docs/x", not "docs//x".
  const std::string prefix = absl::EndsWith(path, "/") ? path : absl::StrCat(path, "/");
  for (const auto& [n, type] : entries) {
    std::string child = absl::StrCat(prefix, n);
    switch (type) {
      case DT_REG:
        plan->files.push_back(
            PutFile{.path = std::move(child), .dir = dir, .name_at = prefix.size()});
        break;
      case DT_DIR:
        VAULT_RETURN_IF_ERROR(CollectDir(child, plan));
        break;
      case DT_LNK:
      case DT_UNKNOWN:
        VAULT_RETURN_IF_ERROR(CollectPath(child, plan));
        break;
      default:
        return absl::InvalidArgumentError(
            absl::StrCat(child, " is neither a file nor a directory"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<cas::Digest> HashFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return common::PosixError(errno, path);
  cas::Sha256 h;
  std::string buf(1 << 20, '\0');
  uint64_t size = 0;
  while (true) {
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      close(fd);
      return common::PosixError(err, path);
    }
    if (n == 0) break;
    h.Update(absl::string_view(buf.data(), static_cast<size_t>(n)));
    size += static_cast<uint64_t>(n);
  }
  close(fd);
  return cas::Digest::FromParts(h.Finish(), size);
}

// Opens the plan's files one after the other, each relative to its directory when it has one
// (the directory stays open while its files are read).
class FileOpener {
 public:
  explicit FileOpener(const PutPlan& plan) : plan_(plan) {}
  ~FileOpener() {
    if (dir_fd_ >= 0) close(dir_fd_);
  }
  FileOpener(const FileOpener&) = delete;
  FileOpener& operator=(const FileOpener&) = delete;

  // An fd (O_RDONLY; O_NONBLOCK so that a FIFO put in a file's place cannot hang the command),
  // or -1 with errno set.
  int Open(const PutFile& f) {
    if (f.dir >= 0 && f.dir != dir_) {
      if (dir_fd_ >= 0) close(dir_fd_);
      dir_ = f.dir;
      dir_fd_ =
          open(plan_.dirs[static_cast<size_t>(f.dir)].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (f.dir >= 0 && dir_fd_ >= 0) {
      return openat(dir_fd_, f.path.c_str() + f.name_at, kFlags);
    }
    return open(f.path.c_str(), kFlags);  // no directory, or it cannot be opened
  }

 private:
  static constexpr int kFlags = O_RDONLY | O_NONBLOCK | O_CLOEXEC;
  const PutPlan& plan_;
  int dir_ = -1;
  int dir_fd_ = -1;
};

// Reads the whole of a file of `size` bytes into `dst` (room: size + 1 bytes, to notice growth).
absl::StatusOr<size_t> ReadExactly(int fd, const std::string& path, uint64_t size, char* dst,
                                   size_t room) {
  size_t got = 0;
  while (got < room) {
    ssize_t n = read(fd, dst + got, room - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      return common::PosixError(errno, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got != size) return absl::AbortedError(absl::StrCat(path, " changed while being read"));
  return got;
}

// A batch of small files, ready to send: the serialized BatchPutRequest and its files in order.
struct Batch {
  std::vector<PutFile*> files;
  grpc::ByteBuffer request;
};

class BatchQueue {
 public:
  explicit BatchQueue(size_t cap) : cap_(cap) {}
  void Push(Batch b) {
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return q_.size() < cap_; };
    mu_.Await(absl::Condition(&room));
    q_.push_back(std::move(b));
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  bool Pop(Batch* out) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || !q_.empty(); };
    mu_.Await(absl::Condition(&ready));
    if (q_.empty()) return false;
    *out = std::move(q_.front());
    q_.pop_front();
    return true;
  }

 private:
  const size_t cap_;
  absl::Mutex mu_;
  std::deque<Batch> q_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// BatchPut with a request already in its wire form (cas_batch.h): the Cas stub's method, through
// a generic stub, so gRPC sends the buffer as it is.
using BatchPutStub = grpc::TemplatedGenericStub<grpc::ByteBuffer, vault::v1::BatchPutResponse>;
constexpr char kBatchPutMethod[] = "/vault.v1.Cas/BatchPut";

// One BatchPut call, waited for on the sender's own completion queue.
grpc::Status CallBatchPut(BatchPutStub& stub, grpc::CompletionQueue& cq, grpc::ClientContext* ctx,
                          const grpc::ByteBuffer& req, vault::v1::BatchPutResponse* resp) {
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<vault::v1::BatchPutResponse>> call =
      stub.PrepareUnaryCall(ctx, kBatchPutMethod, req, &cq);
  call->StartCall();
  call->Finish(resp, &status, &status);
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok) || tag != &status) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "BatchPut: lost track of the call");
  }
  return status;
}

// Sends a batch of small files whole: the vault de-duplicates (answering already_present and
// the object's seq), which costs less than asking first for objects of at most 1 MiB.
void SendBatch(const Connection& conn, BatchPutStub& stub, grpc::CompletionQueue& cq, Batch& batch,
               Progress& progress) {
  const std::vector<PutFile*>& sent = batch.files;
  vault::v1::BatchPutResponse resp;
  // BatchPut is idempotent (the vault de-duplicates): a busy or briefly unreachable vault is
  // retried 4 times with exponential backoff (0.2 s to 1.6 s). A retry waits for the connection
  // to come back (wait_for_ready) for twice its backoff plus a second, so an unreachable vault
  // fails the command after about 12 s.
  absl::Status s, first;
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::unique_ptr<grpc::ClientContext> ctx = conn.Context();
    if (attempt > 0) {
      absl::Duration backoff = absl::Milliseconds(200) * (1 << (attempt - 1));
      absl::SleepFor(backoff);
      ctx->set_wait_for_ready(true);
      ctx->set_deadline(absl::ToChronoTime(absl::Now() + 2 * backoff + absl::Seconds(1)));
    }
    resp.Clear();
    s = FromGrpc(CallBatchPut(stub, cq, ctx.get(), batch.request, &resp));
    if (attempt == 0) first = s;
    bool retry = absl::IsResourceExhausted(s) || absl::IsUnavailable(s) ||
                 (attempt > 0 && absl::IsDeadlineExceeded(s));
    if (!retry) break;
  }
  batch.request.Clear();                             // the files' bytes are not needed any more
  if (absl::IsDeadlineExceeded(s) && !first.ok()) {  // waited in vain: say why it began
    s = absl::Status(first.code(), absl::StrCat(first.message(), " (still, after 5 attempts)"));
  }
  if (s.ok() && resp.results_size() != static_cast<int>(sent.size())) {
    s = absl::InternalError("vault answered BatchPut with the wrong number of results");
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < sent.size(); ++i) {
    if (!s.ok()) {
      sent[i]->status = s;
      continue;
    }
    const vault::v1::PutResult& r = resp.results(static_cast<int>(i));
    sent[i]->status = FromItemStatus(r.status());
    sent[i]->already_present = r.already_present();
    sent[i]->seq = r.seq();
    bytes += sent[i]->size;
  }
  progress.Add(bytes, sent.size());
}

// Streams one file, resuming at the vault's durable offset; retries a broken stream twice.
absl::Status StreamFile(const Connection& conn, PutFile& f, Progress& progress) {
  VAULT_ASSIGN_OR_RETURN(f.digest, HashFile(f.path));
  absl::Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    vault::v1::StatRequest sr;
    ToProto(f.digest, sr.mutable_digest());
    vault::v1::StatResponse st;
    last = FromGrpc(conn.cas()->Stat(conn.Context().get(), sr, &st));
    if (!last.ok()) {
      if (absl::IsUnavailable(last)) continue;
      return last;
    }
    if (st.present()) {
      f.already_present = true;
      f.seq = st.seq();
      progress.Add(f.size, 1);
      return absl::OkStatus();
    }
    uint64_t offset = st.upload_offset();
    int fd = open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return common::PosixError(errno, f.path);
    auto ctx = conn.StreamContext(f.size - offset);
    vault::v1::PutResponse resp;
    std::unique_ptr<grpc::ClientWriter<vault::v1::PutRequest>> writer =
        conn.cas()->Put(ctx.get(), &resp);
    vault::v1::PutRequest req;
    ToProto(f.digest, req.mutable_digest());
    req.set_offset(offset);
    std::string buf(kStreamPiece, '\0');
    uint64_t pos = offset;
    bool ok = true;
    absl::Status io;
    while (ok && pos < f.size) {
      ssize_t n = pread(fd, buf.data(), std::min<uint64_t>(kStreamPiece, f.size - pos),
                        static_cast<off_t>(pos));
      if (n <= 0) {
        io = n < 0 ? common::PosixError(errno, f.path)
                   : absl::AbortedError(absl::StrCat(f.path, " shrank while being uploaded"));
        break;
      }
      req.set_data(buf.data(), static_cast<size_t>(n));
      ok = writer->Write(req);
      req.Clear();
      pos += static_cast<uint64_t>(n);
      if (ok) progress.Add(static_cast<uint64_t>(n), 0);
    }
    close(fd);
    if (!io.ok()) {
      ctx->TryCancel();
      writer->Finish().ok();
      return io;
    }
    if (ok) writer->WritesDone();
    last = FromGrpc(writer->Finish());
    if (last.ok()) {
      last = FromItemStatus(resp.result().status());
      f.already_present = resp.result().already_present();
      f.seq = resp.result().seq();
      if (last.ok()) progress.Add(0, 1);
      return last;
    }
    if (!absl::IsUnavailable(last)) return last;
  }
  return last;
}

int PutCommand(const GlobalOptions& g, const std::vector<std::string>& paths) {
  PutPlan plan;
  for (const std::string& p : paths) {
    if (absl::Status s = CollectPath(p, &plan); !s.ok()) return ReportError(s, g.json());
  }
  std::vector<PutFile>& files = plan.files;
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  // Only the progress bar needs the total up front; otherwise sizes are learnt as files are read.
  uint64_t total = 0;
  if (isatty(STDERR_FILENO) == 1) {
    for (PutFile& f : files) {
      struct stat st;
      if (f.dir >= 0 && stat(f.path.c_str(), &st) == 0) f.size = static_cast<uint64_t>(st.st_size);
      total += f.size;
    }
  }
  Progress progress("put", total, files.size());

  // The main thread reads and hashes the small files straight into batches (each a BatchPut
  // request in its wire form) while up to kWorkers batches are being sent.
  BatchPutStub stub(conn->channel());
  BatchQueue queue(kWorkers);
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.emplace_back([&] {
      grpc::CompletionQueue cq;
      Batch b;
      while (queue.Pop(&b)) SendBatch(*conn, stub, cq, b, progress);
      cq.Shutdown();
      void* tag;
      bool ok;
      while (cq.Next(&tag, &ok)) {
      }
    });
  }
  BatchPutWriter writer(kBatchBytes, kBatchItems);
  Batch batch;
  auto ship = [&] {
    batch.request = writer.Finish();
    queue.Push(std::move(batch));
    batch = Batch();
  };
  std::vector<PutFile*> large;
  FileOpener opener(plan);
  for (PutFile& f : files) {
    int fd = opener.Open(f);
    if (fd < 0) {
      f.status = common::PosixError(errno, absl::StrCat("open ", f.path));
      continue;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      f.status = common::PosixError(errno, absl::StrCat("stat ", f.path));
      close(fd);
      continue;
    }
    if (!S_ISREG(st.st_mode)) {  // replaced since the directory was read
      f.status = absl::InvalidArgumentError(absl::StrCat(f.path, " is not a regular file"));
      close(fd);
      continue;
    }
    f.size = static_cast<uint64_t>(st.st_size);
    if (f.size > kBatchItemMax) {
      close(fd);
      large.push_back(&f);
      continue;
    }
    if (!writer.Fits(f.size)) ship();
    absl::StatusOr<cas::Digest> digest =
        writer.Append(f.size, [&](char* dst, size_t room) -> absl::StatusOr<size_t> {
          return ReadExactly(fd, f.path, f.size, dst, room);
        });
    close(fd);
    if (!digest.ok()) {
      f.status = digest.status();
      continue;
    }
    f.digest = *std::move(digest);
    batch.files.push_back(&f);
  }
  if (!writer.empty()) ship();
  queue.Close();
  for (std::thread& t : workers) t.join();
  for (PutFile* f : large) f->status = StreamFile(*conn, *f, progress);
  progress.Done();

  absl::Status first_error;
  if (!g.json()) {
    // One write for all the lines; stdout is flushed before each error so that a terminal shows
    // them in file order.
    std::string out;
    for (const PutFile& f : files) {
      if (f.status.ok()) {
        absl::StrAppend(&out, f.digest.ToString(), "  ", f.path, "\n");
        continue;
      }
      if (first_error.ok()) first_error = f.status;
      std::cout.write(out.data(), static_cast<std::streamsize>(out.size())).flush();
      out.clear();
      std::cerr << "vaultctl: " << f.path << ": " << f.status.message() << "\n";
    }
    std::cout.write(out.data(), static_cast<std::streamsize>(out.size())).flush();
    return ExitCodeFor(first_error);
  }
  Json arr = Json::Array();
  for (const PutFile& f : files) {
    if (!f.status.ok() && first_error.ok()) first_error = f.status;
    Json o = Json::Object().Add("file", f.path);
    if (f.status.ok()) {
      o.Add("digest", f.digest.ToString())
          .Add("status", f.already_present ? "present" : "stored")
          .Add("seq", f.seq);
    } else {
      o.Add("status", "error")
          .Add("code", absl::StatusCodeToString(f.status.code()))
          .Add("message", f.status.message());
    }
    arr.Push(o);
  }
  std::cout << arr.ToString() << "\n";
  return ExitCodeFor(first_error);
}

// Parses command-line digests; a malformed one is a usage error (exit 2), reported here.
bool ParseDigestArgs(const std::vector<std::string>& texts, bool json,
                     std::vector<cas::Digest>* out) {
  for (const std::string& t : texts) {
    absl::StatusOr<cas::Digest> d = cas::Digest::Parse(t);
    if (!d.ok()) {
      ReportError(d.status(), json);
      return false;
    }
    out->push_back(*d);
  }
  return true;
}

int GetCommand(const GlobalOptions& g, const std::string& digest_text, const std::string& out) {
  std::vector<cas::Digest> parsed;
  if (!ParseDigestArgs({digest_text}, g.json(), &parsed)) return kExitUsage;
  const cas::Digest* digest = &parsed[0];
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  std::string tmp = out.empty() ? "" : absl::StrCat(out, ".part-", getpid());
  int fd = STDOUT_FILENO;
  if (!out.empty()) {
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return ReportError(common::PosixError(errno, tmp), g.json());
  }
  Progress progress("get", digest->size(), 1);
  absl::Status s = [&]() -> absl::Status {
    vault::v1::GetRequest req;
    ToProto(*digest, req.mutable_digest());
    auto ctx = conn->StreamContext(digest->size());
    auto reader = conn->cas()->Get(ctx.get(), req);
    vault::v1::GetResponse resp;
    cas::Sha256 h;
    uint64_t got = 0;
    while (reader->Read(&resp)) {
      if (resp.offset() != got) {
        ctx->TryCancel();
        reader->Finish().ok();
        return absl::DataLossError("vault sent pieces out of order");
      }
      h.Update(resp.data());
      const std::string& d = resp.data();
      for (size_t done = 0; done < d.size();) {
        ssize_t n = write(fd, d.data() + done, d.size() - done);
        if (n < 0) {
          if (errno == EINTR) continue;
          int err = errno;
          ctx->TryCancel();
          reader->Finish().ok();
          return common::PosixError(err, out.empty() ? "stdout" : tmp);
        }
        done += static_cast<size_t>(n);
      }
      got += d.size();
      progress.Add(d.size(), 0);
    }
    VAULT_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
    if (got != digest->size() || h.Finish() != digest->sha256()) {
      return absl::DataLossError(
          absl::StrCat("received bytes do not match ", digest->ToString(), "; discarded"));
    }
    progress.Add(0, 1);
    return absl::OkStatus();
  }();
  progress.Done();
  if (!out.empty()) {
    if (s.ok() && fsync(fd) != 0) s = common::PosixError(errno, tmp);
    close(fd);
    if (s.ok() && rename(tmp.c_str(), out.c_str()) != 0) s = common::PosixError(errno, out);
    if (!s.ok()) unlink(tmp.c_str());
  }
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json() && !out.empty()) {
    std::cout << Json::Object().Add("digest", digest->ToString()).Add("file", out).ToString()
              << "\n";
  }
  return kExitOk;
}

int StatCommand(const GlobalOptions& g, const std::string& digest_text) {
  std::vector<cas::Digest> parsed;
  if (!ParseDigestArgs({digest_text}, g.json(), &parsed)) return kExitUsage;
  const cas::Digest* digest = &parsed[0];
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::StatRequest req;
  ToProto(*digest, req.mutable_digest());
  vault::v1::StatResponse resp;
  absl::Status s = FromGrpc(conn->cas()->Stat(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  const char* layout = resp.layout() == vault::v1::StatResponse::CHUNKED ? "chunked" : "inline";
  if (g.json()) {
    Json o = Json::Object().Add("digest", digest->ToString()).Add("present", resp.present());
    if (resp.present()) {
      o.Add("size", digest->size())
          .Add("seq", resp.seq())
          .Add("layout", layout)
          .Add("chunks", resp.chunk_count())
          .Add("stored_unix_ms", resp.stored_unix_ms());
    } else {
      o.Add("upload_offset", resp.upload_offset());
    }
    std::cout << o.ToString() << "\n";
  } else if (resp.present()) {
    std::cout << "digest:  " << digest->ToString() << "\nsize:    " << digest->size()
              << "\nseq:     " << resp.seq() << "\nlayout:  " << layout;
    if (resp.chunk_count() > 0) std::cout << " (" << resp.chunk_count() << " chunks)";
    std::cout << "\nstored:  " << absl::FormatTime(absl::FromUnixMillis(resp.stored_unix_ms()))
              << "\n";
  } else {
    std::cerr << "vaultctl: " << digest->ToString() << " is not stored";
    if (resp.upload_offset() > 0) {
      std::cerr << " (an interrupted upload has " << resp.upload_offset() << " bytes)";
    }
    std::cerr << "\n";
  }
  return resp.present() ? kExitOk : kExitNotFound;
}

int LsCommand(const GlobalOptions& g, uint64_t after, uint32_t limit) {
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::FeedRequest req;
  req.set_after_seq(after);
  req.set_limit(limit);
  auto ctx = conn->Context();
  auto reader = conn->cas()->Feed(ctx.get(), req);
  vault::v1::FeedResponse resp;
  Json arr = Json::Array();
  while (reader->Read(&resp)) {
    for (const vault::v1::FeedEntry& e : resp.entries()) {
      absl::StatusOr<cas::Digest> d = node::FromProto(e.digest());
      std::string text = d.ok() ? d->ToString() : "(malformed digest)";
      if (g.json()) {
        arr.Push(Json::Object()
                     .Add("seq", e.seq())
                     .Add("digest", text)
                     .Add("stored_unix_ms", e.stored_unix_ms()));
      } else {
        std::cout << e.seq() << "  " << text << "  "
                  << absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                                      absl::FromUnixMillis(e.stored_unix_ms()), absl::UTCTimeZone())
                  << "\n";
      }
    }
  }
  absl::Status s = FromGrpc(reader->Finish());
  if (!s.ok()) return ReportError(s, g.json());
  if (g.json()) std::cout << arr.ToString() << "\n";
  return kExitOk;
}

int HasCommand(const GlobalOptions& g, const std::vector<std::string>& texts) {
  std::vector<cas::Digest> digests;
  if (!ParseDigestArgs(texts, g.json(), &digests)) return kExitUsage;
  absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
  if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
  vault::v1::FindMissingRequest req;
  for (const cas::Digest& d : digests) ToProto(d, req.add_digests());
  vault::v1::FindMissingResponse resp;
  absl::Status s = FromGrpc(conn->cas()->FindMissing(conn->Context().get(), req, &resp));
  if (!s.ok()) return ReportError(s, g.json());
  absl::flat_hash_set<std::string> missing;
  for (const auto& d : resp.missing()) missing.insert(d.sha256() + "/" + std::to_string(d.size()));
  bool all = true;
  Json arr = Json::Array();
  for (const cas::Digest& d : digests) {
    bool present = !missing.contains(d.sha256() + "/" + std::to_string(d.size()));
    all = all && present;
    if (g.json()) {
      arr.Push(Json::Object().Add("digest", d.ToString()).Add("present", present));
    } else {
      std::cout << (present ? "present  " : "missing  ") << d.ToString() << "\n";
    }
  }
  if (g.json()) std::cout << arr.ToString() << "\n";
  return all ? kExitOk : kExitNotFound;
}

}  // namespace

absl::StatusOr<cas::Digest> UploadFile(const Connection& conn, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return common::PosixError(errno, path);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  }
  // An empty object would be a Put stream without a single message (StreamFile sends the
  // digest with the first piece of data): refuse it here, with the reason.
  if (st.st_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is empty: nothing to upload"));
  }
  PutFile f{.path = path, .size = static_cast<uint64_t>(st.st_size)};
  Progress progress("upload", f.size, 1);
  VAULT_RETURN_IF_ERROR(StreamFile(conn, f, progress));
  progress.Done();
  return f.digest;
}

void AddCasCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  auto* cas = app.add_subcommand("cas", "The content-addressed store");
  cas->require_subcommand(1);

  auto* put = cas->add_subcommand(
      "put", "Store files (directories recursively); prints sha256:<hex>/<size>  FILE for each");
  static std::vector<std::string> put_paths;
  put->add_option("FILE", put_paths, "Files or directories")->required();
  put->callback([&] { command = [&g] { return PutCommand(g, put_paths); }; });

  auto* get = cas->add_subcommand(
      "get",
      "Fetch an object, verified against its digest: with --out, the file appears only once "
      "verified; to stdout, bytes stream as they come and a mismatch fails at the end (exit 1)");
  static std::string get_digest, get_out;
  get->add_option("DIGEST", get_digest, "sha256:<hex>/<size>")->required();
  get->add_option("-O,--out", get_out,
                  "Write to this file (atomically, after verification); -o is the output format");
  get->callback([&] { command = [&g] { return GetCommand(g, get_digest, get_out); }; });

  auto* stat = cas->add_subcommand("stat", "Show an object's metadata (exit 3 if not stored)");
  static std::string stat_digest;
  stat->add_option("DIGEST", stat_digest, "sha256:<hex>/<size>")->required();
  stat->callback([&] { command = [&g] { return StatCommand(g, stat_digest); }; });

  auto* ls = cas->add_subcommand("ls", "List objects in the order they were stored (change feed)");
  static uint64_t ls_after = 0;
  static uint32_t ls_limit = 0;
  ls->add_option("--after", ls_after, "Only objects with seq greater than this");
  ls->add_option("--limit", ls_limit, "At most this many (0: all)");
  ls->callback([&] { command = [&g] { return LsCommand(g, ls_after, ls_limit); }; });

  AddReplicationCommands(*cas, g, command);
  AddCasLifecycleCommands(*cas, g, command);

  auto* has = cas->add_subcommand("has", "Tell which objects are stored (exit 3 if any missing)");
  static std::vector<std::string> has_digests;
  has->add_option("DIGEST", has_digests, "sha256:<hex>/<size>")->required();
  has->callback([&] { command = [&g] { return HasCommand(g, has_digests); }; });
}

void AddStatusCommand(CLI::App& app, GlobalOptions& g, Command& command) {
  auto* status = app.add_subcommand("status", "Show the vault's identity, members and store size");
  status->callback([&] {
    command = [&g] {
      absl::StatusOr<Connection> conn = Connection::Connect(g.connect);
      if (!conn.ok()) return ReportConnectError(conn.status(), g.json());
      vault::v1::StatusResponse resp;
      absl::Status s =
          FromGrpc(conn->admin()->Status(conn->Context().get(), vault::v1::StatusRequest(), &resp));
      if (!s.ok()) {
        if (absl::IsUnimplemented(s)) {
          s = absl::FailedPreconditionError(
              "status is served only on the vault's admin socket, not over TCP");
        }
        return ReportError(s, g.json());
      }
      if (g.json()) {
        Json members = Json::Array();
        for (const auto& m : resp.members()) {
          members.Push(Json::Object()
                           .Add("name", m.name())
                           .Add("address", m.address())
                           .Add("public_key", m.public_key()));
        }
        std::cout << Json::Object()
                         .Add("name", resp.name())
                         .Add("public_key", resp.public_key())
                         .Add("version", resp.version())
                         .Add("listen_address", resp.listen_address())
                         .Add("admin_socket", resp.admin_socket())
                         .Add("data_dir", resp.data_dir())
                         .Add("started_unix_ms", resp.started_unix_ms())
                         .Add("objects", resp.object_count())
                         .Add("stored_bytes", resp.stored_bytes())
                         .Add("last_seq", resp.last_seq())
                         .Add("members", members)
                         .Add("agents_enabled", resp.agents_enabled())
                         .Add("agents_disabled_reason", resp.agents_disabled_reason())
                         .Add("sandbox_fences", resp.sandbox_fences())
                         .ToString()
                  << "\n";
      } else {
        std::cout << "vault:    " << resp.name() << " (" << resp.version() << ")\n"
                  << "key:      " << resp.public_key() << "\n"
                  << "listen:   " << (resp.listen_address().empty() ? "-" : resp.listen_address())
                  << " (mTLS)\nadmin:    " << resp.admin_socket() << "\n"
                  << "objects:  " << resp.object_count() << " (" << HumanBytes(resp.stored_bytes())
                  << ")\nmembers:\n";
        for (const auto& m : resp.members()) {
          std::cout << "  " << m.name() << "  " << m.address() << "  " << m.public_key() << "\n";
        }
        std::cout << "agents:   "
                  << (resp.agents_enabled() ? std::string("enabled")
                                            : "DISABLED: " + resp.agents_disabled_reason())
                  << "\nsandbox:\n";
        for (absl::string_view line :
             absl::StrSplit(resp.sandbox_fences(), '\n', absl::SkipEmpty())) {
          std::cout << "  " << line << "\n";
        }
      }
      return kExitOk;
    };
  });
}

}  // namespace vault::vaultctl
