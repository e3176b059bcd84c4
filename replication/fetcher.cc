#include "replication/fetcher.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "replication/internal/rpc.h"

namespace vault::replication {

using internal::Context;
using internal::FromGrpc;
using internal::ToProto;

Fetcher::Fetcher(cas::Store* store, std::shared_ptr<grpc::Channel> channel, std::string peer,
                 std::function<bool()> stopping, FetchOptions options)
    : store_(store),
      stub_(vault::v1::Cas::NewStub(std::move(channel))),
      peer_(std::move(peer)),
      stopping_(std::move(stopping)),
      options_(options) {}

absl::Status Fetcher::FetchAll(absl::Span<const cas::Digest> digests, const RecordFn& record) {
  std::vector<cas::Digest> batch;
  uint64_t batch_bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    VAULT_RETURN_IF_ERROR(FetchBatch(batch, record));
    batch.clear();
    batch_bytes = 0;
    return absl::OkStatus();
  };
  for (const cas::Digest& d : digests) {
    if (stopping_ && stopping_()) return absl::CancelledError("stopping");
    if (d.size() >= options_.small_object) {
      absl::StatusOr<cas::PutOutcome> outcome = FetchLarge(d);
      if (!outcome.ok() && !Refusal(outcome.status()) && !RemovedAtPeer(outcome.status())) {
        return outcome.status();
      }
      record(d, outcome);
      continue;
    }
    if (!batch.empty() && batch_bytes + d.size() > options_.batch_bytes) {
      VAULT_RETURN_IF_ERROR(flush());
    }
    batch.push_back(d);
    batch_bytes += d.size();
  }
  return flush();
}

absl::Status Fetcher::FetchBatch(absl::Span<const cas::Digest> digests, const RecordFn& record) {
  vault::v1::BatchGetRequest req;
  for (const cas::Digest& d : digests) ToProto(d, req.add_digests());
  vault::v1::BatchGetResponse resp;
  VAULT_RETURN_IF_ERROR(FromGrpc(stub_->BatchGet(Context(options_.call_timeout).get(), req, &resp),
                                 absl::StrCat("BatchGet from ", peer_)));
  if (resp.items_size() != req.digests_size()) {
    return absl::DataLossError("BatchGet: the peer answered the wrong number of items");
  }
  std::vector<cas::PutItem> items;
  std::vector<size_t> index;
  for (int i = 0; i < resp.items_size(); ++i) {
    absl::Status s = internal::FromItem(resp.items(i).status());
    if (absl::IsNotFound(s)) {
      record(digests[i], absl::StatusOr<cas::PutOutcome>(
                             absl::NotFoundError(absl::StrCat(peer_, ": ", s.message()))));
      continue;
    }
    if (!s.ok()) {
      // The peer could not serve it (not a refusal of bytes).
      record(digests[i], absl::StatusOr<cas::PutOutcome>(
                             absl::UnavailableError(absl::StrCat(peer_, ": ", s.message()))));
      continue;
    }
    items.push_back(cas::PutItem{digests[i], resp.items(i).data()});
    index.push_back(static_cast<size_t>(i));
  }
  // The store hashes every item and refuses a mismatch (INVALID_ARGUMENT).
  std::vector<absl::StatusOr<cas::PutOutcome>> outcomes = store_->PutMany(items);
  for (size_t k = 0; k < outcomes.size(); ++k) record(digests[index[k]], outcomes[k]);
  return absl::OkStatus();
}

absl::StatusOr<cas::PutOutcome> Fetcher::FetchLarge(const cas::Digest& d) {
  VAULT_ASSIGN_OR_RETURN(uint64_t offset, store_->UploadOffset(d));
  absl::StatusOr<std::unique_ptr<cas::Upload>> started = store_->StartUpload(d, offset);
  if (absl::IsFailedPrecondition(started.status())) {
    offset = 0;
    started = store_->StartUpload(d, 0);
  }
  if (!started.ok()) return started.status();
  std::unique_ptr<cas::Upload> upload = *std::move(started);

  // The peer's chunks; a manifest that does not add up is ignored (it only decides what is taken
  // from here: the object's hash is checked either way).
  std::vector<cas::ChunkInfo> chunks;
  {
    vault::v1::GetManifestRequest req;
    ToProto(d, req.mutable_digest());
    vault::v1::GetManifestResponse resp;
    if (stub_->GetManifest(Context(options_.call_timeout).get(), req, &resp).ok()) {
      uint64_t total = 0;
      for (const vault::v1::ChunkDigest& c : resp.chunks()) {
        chunks.push_back({c.sha256(), c.size()});
        total += c.size();
      }
      if (total != d.size() || chunks.size() < 2) chunks.clear();
    }
  }
  absl::flat_hash_set<std::string> lacking;
  if (!chunks.empty()) {
    VAULT_ASSIGN_OR_RETURN(std::vector<cas::ChunkInfo> missing, store_->FindMissingChunks(chunks));
    for (const cas::ChunkInfo& c : missing) lacking.insert(c.sha256);
  }
  auto append = [&](absl::string_view piece) { return upload->Append(piece); };
  uint64_t pending_from = offset, pending_to = offset;  // bytes still to fetch
  auto fetch_pending = [&]() -> absl::Status {
    if (pending_to > pending_from) {
      VAULT_RETURN_IF_ERROR(Get(d, pending_from, pending_to - pending_from, append));
    }
    pending_from = pending_to;
    return absl::OkStatus();
  };
  if (chunks.empty()) {
    pending_to = d.size();
  } else {
    uint64_t at = 0;
    for (const cas::ChunkInfo& c : chunks) {
      const uint64_t start = at, end = at + c.size;
      at = end;
      if (end <= offset) continue;
      if (start >= offset && !lacking.contains(c.sha256)) {
        VAULT_RETURN_IF_ERROR(fetch_pending());
        absl::Status s = upload->AppendStoredChunk(c.sha256, c.size);
        if (s.ok()) {
          pending_from = pending_to = end;
          continue;
        }
        if (!absl::IsFailedPrecondition(s) && !absl::IsDataLoss(s)) return s;
      }
      pending_to = end;  // fetched
    }
  }
  VAULT_RETURN_IF_ERROR(fetch_pending());
  return upload->Finish();
}

absl::StatusOr<std::string> Fetcher::ReadVerified(const cas::Digest& d, uint64_t max_bytes) {
  if (d.size() > max_bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(d.ToString(), " is larger than ", max_bytes, " bytes: not read into memory"));
  }
  std::string data;
  data.reserve(d.size());
  VAULT_RETURN_IF_ERROR(Get(d, 0, d.size(), [&](absl::string_view piece) {
    data.append(piece.data(), piece.size());
    return absl::OkStatus();
  }));
  if (cas::Digest::Of(data) != d) {
    return absl::DataLossError(
        absl::StrCat(peer_, " served bytes that do not match ", d.ToString()));
  }
  return data;
}

absl::Status Fetcher::Get(const cas::Digest& d, uint64_t offset, uint64_t limit,
                          const std::function<absl::Status(absl::string_view)>& sink) {
  vault::v1::GetRequest req;
  ToProto(d, req.mutable_digest());
  req.set_offset(offset);
  req.set_limit(limit);
  std::unique_ptr<grpc::ClientContext> ctx =
      Context(options_.call_timeout +
              absl::Seconds(static_cast<double>(limit) /
                            static_cast<double>(options_.min_rate_bytes_per_second)));
  std::unique_ptr<grpc::ClientReader<vault::v1::GetResponse>> reader = stub_->Get(ctx.get(), req);
  vault::v1::GetResponse piece;
  uint64_t at = offset;
  absl::Status local = absl::OkStatus();
  while (local.ok() && reader->Read(&piece)) {
    if (piece.offset() != at || piece.data().size() > offset + limit - at) {
      local = absl::DataLossError(
          absl::StrCat("Get from ", peer_, ": piece at ", piece.offset(), ", expected ", at));
      break;
    }
    at += piece.data().size();
    local = sink(piece.data());
    if (local.ok() && stopping_ && stopping_()) local = absl::CancelledError("stopping");
  }
  if (!local.ok()) ctx->TryCancel();
  absl::Status finished = FromGrpc(reader->Finish(), absl::StrCat("Get from ", peer_));
  VAULT_RETURN_IF_ERROR(local);
  VAULT_RETURN_IF_ERROR(finished);
  if (at != offset + limit) {
    return absl::DataLossError(
        absl::StrCat("Get from ", peer_, ": ended at ", at, ", expected ", offset + limit));
  }
  return absl::OkStatus();
}

}  // namespace vault::replication
