#include "node/cas_service.h"

#include <deque>
#include <memory>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "audit/merkle.h"
#include "node/grpc_status.h"
#include "node/unary.h"

namespace vault::node {
namespace {

using vault::v1::FeedRequest;
using vault::v1::FeedResponse;
using vault::v1::GetRequest;
using vault::v1::GetResponse;
using vault::v1::PutRequest;
using vault::v1::PutResponse;

const grpc::Status& kBusy = BusyStatus();

// `what` names the field in the error; with index >= 0 it is a repeated field's element. The
// label is built only on error (FindMissing parses 100,000 digests a call).
absl::StatusOr<cas::Digest> ParseDigest(const vault::v1::Digest& d, absl::string_view what,
                                        int index = -1) {
  absl::StatusOr<cas::Digest> out = FromProto(d);
  if (out.ok()) return out;
  std::string label = index < 0 ? std::string(what) : absl::StrCat(what, "[", index, "]");
  return absl::InvalidArgumentError(absl::StrCat(label, ": ", out.status().message()));
}

// Records one call's outcome: an entry for the objects it added (if any), a DENIED entry per
// object refused. The digest list's hash covers "sha256:<hex>/<size>\n" per new object, in
// feed order, so anyone holding the feed can recompute it.
// At most this many refused objects of one call get an entry each; the rest of them share one
// entry (their count and the SHA-256 of their digest list), so a caller cannot multiply the log's
// growth by the size of its batches.
constexpr size_t kMaxDeniedEntriesPerCall = 16;

absl::Status AuditPuts(Auditor* auditor, const std::string& actor,
                       absl::Span<const cas::Digest> digests,
                       absl::Span<const absl::StatusOr<cas::PutOutcome>> outcomes) {
  std::vector<vault::v1::AuditEntry> entries;
  std::string listing;
  std::string denied_rest;  // digests of refused objects beyond the per-call cap
  uint64_t denied = 0;
  uint64_t count = 0, bytes = 0, first = 0, last = 0;
  for (size_t i = 0; i < digests.size(); ++i) {
    const absl::StatusOr<cas::PutOutcome>& o = outcomes[i];
    if (o.ok()) {
      if (o->already_present) continue;
      if (count == 0 || o->seq < first) first = o->seq;
      if (count == 0 || o->seq > last) last = o->seq;
      ++count;
      bytes += digests[i].size();
      absl::StrAppend(&listing, digests[i].ToString(), "\n");
    } else if (++denied <= kMaxDeniedEntriesPerCall) {
      entries.push_back(Auditor::Entry(actor, "cas.put", digests[i].ToString(),
                                       vault::v1::AuditEntry::DENIED,
                                       std::string(o.status().message()),
                                       {{"code", absl::StatusCodeToString(o.status().code())}}));
    } else {
      absl::StrAppend(&denied_rest, digests[i].ToString(), "\n");
    }
  }
  if (denied > kMaxDeniedEntriesPerCall) {
    const uint64_t rest = denied - kMaxDeniedEntriesPerCall;
    entries.push_back(Auditor::Entry(
        actor, "cas.put", absl::StrCat(rest, " more objects"), vault::v1::AuditEntry::DENIED,
        "refused in the same call (see the entries before)",
        {{"objects", absl::StrCat(rest)},
         {"digests_sha256", absl::BytesToHexString(audit::AsBytes(audit::Sha256(denied_rest)))}}));
  }
  if (count > 0) {
    std::string subject = count == 1 ? std::string(absl::StripSuffix(listing, "\n"))
                                     : absl::StrCat(count, " objects");
    entries.insert(
        entries.begin(),
        Auditor::Entry(
            actor, "cas.put", std::move(subject), vault::v1::AuditEntry::ALLOWED, "",
            {{"objects", absl::StrCat(count)},
             {"bytes", absl::StrCat(bytes)},
             {"feed_first", absl::StrCat(first)},
             {"feed_last", absl::StrCat(last)},
             {"digests_sha256", absl::BytesToHexString(audit::AsBytes(audit::Sha256(listing)))}}));
  }
  absl::Status s = auditor->RecordMany(std::move(entries));
  if (!s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("objects were stored but could not be audited: ", s.message()));
  }
  return absl::OkStatus();
}

void FillPutResult(const cas::Digest& digest, const absl::StatusOr<cas::PutOutcome>& outcome,
                   vault::v1::PutResult* out) {
  ToProto(digest, out->mutable_digest());
  SetItemStatus(outcome.status(), out->mutable_status());
  if (outcome.ok()) {
    out->set_already_present(outcome->already_present);
    out->set_seq(outcome->seq);
  }
}

// A streaming reactor's finish-once guard: reactors may be finished from an executor thread, an
// alarm or a cancellation, whichever comes first.
class FinishOnce {
 public:
  bool Claim() {
    absl::MutexLock lock(&mu_);
    if (done_) return false;
    done_ = true;
    return true;
  }

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

class PutReactor final : public grpc::ServerReadReactor<PutRequest> {
 public:
  PutReactor(grpc::CallbackServerContext* ctx, cas::Store* store, common::Executor* executor,
             Auditor* auditor, PutResponse* resp)
      : ctx_(ctx),
        store_(store),
        executor_(executor),
        auditor_(auditor),
        actor_(auditor->Actor(ctx)),
        resp_(resp) {
    StartRead(&req_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (ctx_->IsCancelled()) return Done(grpc::Status::CANCELLED);
      if (!executor_->Schedule([this] { FinishUpload(); })) Done(kBusy);
      return;
    }
    if (!executor_->Schedule([this] { HandleMessage(); })) Done(kBusy);
  }
  void OnDone() override { delete this; }

 private:
  void HandleMessage() {
    if (upload_ == nullptr) {
      absl::StatusOr<cas::Digest> digest = ParseDigest(req_.digest(), "Put: first message");
      if (!digest.ok()) return Done(ToGrpc(digest.status()));
      digest_ = *digest;
      absl::StatusOr<std::unique_ptr<cas::Upload>> upload =
          store_->StartUpload(digest_, req_.offset());
      if (!upload.ok()) return Done(ToGrpc(upload.status()));
      upload_ = std::move(*upload);
      if (req_.chunk_hints()) upload_->UseChunkHints();
    } else if (req_.chunk_hints()) {
      return Done(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "Put: chunk_hints belongs in the first message only"));
    } else if (req_.has_digest() || req_.offset() != 0) {
      return Done(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "Put: digest and offset belong in the first message only"));
    }
    absl::Status s;
    if (req_.has_chunk()) {
      if (!req_.data().empty()) {
        return Done(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "Put: a message carries data or a chunk, not both"));
      }
      if (req_.chunk().sha256().size() != cas::kSha256Bytes) {
        return Done(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "Put: chunk.sha256 must be 32 bytes"));
      }
      s = upload_->AppendStoredChunk(req_.chunk().sha256(), req_.chunk().size());
    } else {
      s = upload_->Append(req_.data(), req_.chunk_end());
    }
    if (!s.ok()) return Done(ToGrpc(s));
    req_.Clear();
    StartRead(&req_);
  }

  void FinishUpload() {
    if (upload_ == nullptr) {
      return Done(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "Put: empty stream; the first message must name the digest"));
    }
    absl::StatusOr<cas::PutOutcome> outcome = upload_->Finish();
    FillPutResult(digest_, outcome, resp_->mutable_result());
    absl::Status audited = AuditPuts(auditor_, actor_, absl::MakeConstSpan(&digest_, 1),
                                     absl::MakeConstSpan(&outcome, 1));
    Done(ToGrpc(outcome.ok() ? audited : outcome.status()));
  }

  void Done(const grpc::Status& status) {
    upload_.reset();  // release the object's upload claim before the client can retry
    Finish(status);
  }

  grpc::CallbackServerContext* const ctx_;
  cas::Store* const store_;
  common::Executor* const executor_;
  Auditor* const auditor_;
  const std::string actor_;
  PutResponse* const resp_;
  PutRequest req_;
  cas::Digest digest_;
  std::unique_ptr<cas::Upload> upload_;
};

class GetReactor final : public grpc::ServerWriteReactor<GetResponse> {
 public:
  GetReactor(cas::Store* store, common::Executor* executor, const GetRequest& req,
             uint32_t piece_bytes)
      : store_(store), executor_(executor), piece_bytes_(piece_bytes) {
    absl::StatusOr<cas::Digest> digest = ParseDigest(req.digest(), "Get");
    if (!digest.ok()) {
      Finish(ToGrpc(digest.status()));
      return;
    }
    digest_ = *digest;
    pos_ = req.offset();
    if (pos_ > digest_.size()) {
      end_ = pos_ + 1;  // the store answers NOT_FOUND or OUT_OF_RANGE
    } else {
      uint64_t left = digest_.size() - pos_;
      end_ = (req.limit() == 0 || req.limit() > left) ? digest_.size() : pos_ + req.limit();
    }
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::CANCELLED);
    pieces_.pop_front();
    if (!pieces_.empty()) return StartWrite(&pieces_.front());
    if (pos_ >= end_) return Finish(grpc::Status::OK);
    Next();
  }
  void OnDone() override { delete this; }

 private:
  // Each storage read covers up to kReadAhead bytes (an inline object is then hashed once), and
  // its pieces are written one by one.
  static constexpr uint64_t kReadAhead = 4 << 20;

  void Next() {
    if (!executor_->Schedule([this] { ReadAhead(); })) Finish(kBusy);
  }
  void ReadAhead() {
    if (reader_ == nullptr) {  // record and manifest: loaded and verified once per stream
      absl::StatusOr<std::unique_ptr<cas::ObjectReader>> reader = store_->OpenReader(digest_);
      if (!reader.ok()) return Finish(ToGrpc(reader.status()));
      reader_ = *std::move(reader);
    }
    uint64_t n = std::min<uint64_t>(std::max<uint64_t>(kReadAhead, piece_bytes_), end_ - pos_);
    absl::Status s =
        reader_->Read(pos_, n, piece_bytes_, [&](uint64_t offset, absl::string_view piece) {
          // Fill messages up to piece_bytes across chunk boundaries.
          while (!piece.empty()) {
            if (pieces_.empty() || pieces_.back().data().size() >= piece_bytes_) {
              pieces_.emplace_back().set_offset(offset);
            }
            std::string* d = pieces_.back().mutable_data();
            size_t take = std::min<size_t>(piece_bytes_ - d->size(), piece.size());
            d->append(piece.data(), take);
            piece.remove_prefix(take);
            offset += take;
          }
          return absl::OkStatus();
        });
    if (!s.ok()) return Finish(ToGrpc(s));
    if (pieces_.empty()) {
      if (pos_ == end_) return Finish(grpc::Status::OK);  // empty range of a stored object
      return Finish(
          grpc::Status(grpc::StatusCode::DATA_LOSS, "stored object is shorter than its size"));
    }
    for (const GetResponse& r : pieces_) pos_ += r.data().size();
    StartWrite(&pieces_.front());
  }

  cas::Store* const store_;
  common::Executor* const executor_;
  const uint32_t piece_bytes_;
  cas::Digest digest_;
  uint64_t pos_ = 0;
  uint64_t end_ = 0;
  std::unique_ptr<cas::ObjectReader> reader_;
  std::deque<GetResponse> pieces_;
};

// Feed: pages of entries; with follow, the store wakes the stream when something new is stored
// (no thread waits and no timer polls), and closing the store ends it.
class FeedReactor final : public grpc::ServerWriteReactor<FeedResponse> {
 public:
  FeedReactor(cas::Store* store, common::Executor* executor, const FeedRequest& req, uint32_t page)
      : store_(store),
        executor_(executor),
        page_(page),
        after_(req.after_seq()),
        remaining_(req.limit()),
        limited_(req.limit() != 0),
        follow_(req.follow()) {
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return Done(grpc::Status::CANCELLED);
    if (limited_ && remaining_ == 0) return Done(grpc::Status::OK);
    Next();
  }
  void OnCancel() override {
    cancelled_.store(true);
    if (store_->RemoveWaiter(Key())) Done(grpc::Status::CANCELLED);
  }
  void OnDone() override { delete this; }

 private:
  uintptr_t Key() const { return reinterpret_cast<uintptr_t>(this); }
  void Next() {
    if (!executor_->Schedule([this] { ReadPage(); })) Done(kBusy);
  }
  void ReadPage() {
    if (cancelled_.load()) return Done(grpc::Status::CANCELLED);
    size_t n = page_;
    if (limited_ && remaining_ < n) n = remaining_;
    absl::StatusOr<std::vector<cas::FeedItem>> items = store_->ReadFeed(after_, n);
    if (!items.ok()) return Done(ToGrpc(items.status()));
    if (items->empty()) {
      if (!follow_) return Done(grpc::Status::OK);
      if (store_->closed()) {
        return Done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "vault is shutting down"));
      }
      switch (store_->AddWaiter(Key(), after_, &cancelled_, [this] { Next(); })) {
        case cas::Store::WaitResult::kRegistered:
          return;  // `this` now belongs to the waker or to OnCancel: touch nothing
        case cas::Store::WaitResult::kReady:
          return Next();
        case cas::Store::WaitResult::kCancelled:
          return Done(grpc::Status::CANCELLED);
      }
      return;
    }
    resp_.Clear();
    for (const cas::FeedItem& item : *items) {
      vault::v1::FeedEntry* e = resp_.add_entries();
      e->set_seq(item.seq);
      ToProto(item.digest, e->mutable_digest());
      e->set_stored_unix_ms(item.stored_unix_ms);
    }
    after_ = items->back().seq;
    if (limited_) remaining_ -= items->size();
    resp_.set_last_seq(store_->last_seq());
    StartWrite(&resp_);
  }
  void Done(const grpc::Status& status) {
    if (finish_.Claim()) Finish(status);
  }

  cas::Store* const store_;
  common::Executor* const executor_;
  const uint32_t page_;
  uint64_t after_;
  uint64_t remaining_;
  const bool limited_;
  const bool follow_;
  std::atomic<bool> cancelled_{false};
  FinishOnce finish_;
  FeedResponse resp_;
};

}  // namespace

grpc::ServerUnaryReactor* CasService::FindMissing(grpc::CallbackServerContext* ctx,
                                                  const vault::v1::FindMissingRequest* req,
                                                  vault::v1::FindMissingResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    if (static_cast<uint64_t>(req->digests_size()) > limits_.max_find_missing) {
      return absl::InvalidArgumentError(absl::StrCat("FindMissing: ", req->digests_size(),
                                                     " digests; the limit is ",
                                                     limits_.max_find_missing, " per call"));
    }
    std::vector<cas::Digest> digests;
    digests.reserve(req->digests_size());
    for (int i = 0; i < req->digests_size(); ++i) {
      absl::StatusOr<cas::Digest> d = ParseDigest(req->digests(i), "FindMissing: digests", i);
      if (!d.ok()) return d.status();
      digests.push_back(*std::move(d));
    }
    absl::StatusOr<std::vector<cas::Digest>> missing = store_->FindMissing(digests);
    if (!missing.ok()) return missing.status();
    for (const cas::Digest& d : *missing) ToProto(d, resp->add_missing());
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasService::BatchPut(grpc::CallbackServerContext* ctx,
                                               const vault::v1::BatchPutRequest* req,
                                               vault::v1::BatchPutResponse* resp) {
  return RunUnary(
      ctx, executor_, [this, req, resp, actor = auditor_->Actor(ctx)]() -> absl::Status {
        if (static_cast<uint64_t>(req->items_size()) > limits_.max_batch_items) {
          return absl::InvalidArgumentError(absl::StrCat("BatchPut: ", req->items_size(),
                                                         " items; the limit is ",
                                                         limits_.max_batch_items, " per call"));
        }
        uint64_t total = 0;
        for (const auto& item : req->items()) total += item.data().size();
        if (total > limits_.max_batch_bytes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "BatchPut: ", total, " bytes of data; the limit is ", limits_.max_batch_bytes,
              " per call (use several calls, or the streaming Put for large objects)"));
        }
        std::vector<cas::Digest> digests(req->items_size());
        std::vector<absl::Status> parse(req->items_size());
        std::vector<cas::PutItem> items;
        std::vector<int> index;
        for (int i = 0; i < req->items_size(); ++i) {
          absl::StatusOr<cas::Digest> d = ParseDigest(req->items(i).digest(), "BatchPut: items", i);
          if (!d.ok()) {
            parse[i] = d.status();
            continue;
          }
          digests[i] = *std::move(d);
          items.push_back(cas::PutItem{digests[i], req->items(i).data()});
          index.push_back(i);
        }
        std::vector<absl::StatusOr<cas::PutOutcome>> outcomes = store_->PutMany(items);
        for (int i = 0; i < req->items_size(); ++i) resp->add_results();
        for (int i = 0; i < req->items_size(); ++i) {
          if (!parse[i].ok()) {
            SetItemStatus(parse[i], resp->mutable_results(i)->mutable_status());
            *resp->mutable_results(i)->mutable_digest() = req->items(i).digest();
          }
        }
        std::vector<cas::Digest> stored_digests;
        stored_digests.reserve(index.size());
        for (size_t k = 0; k < index.size(); ++k) {
          FillPutResult(digests[index[k]], outcomes[k], resp->mutable_results(index[k]));
          stored_digests.push_back(digests[index[k]]);
        }
        return AuditPuts(auditor_, actor, stored_digests, outcomes);
      });
}

grpc::ServerUnaryReactor* CasService::BatchGet(grpc::CallbackServerContext* ctx,
                                               const vault::v1::BatchGetRequest* req,
                                               vault::v1::BatchGetResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    if (static_cast<uint64_t>(req->digests_size()) > limits_.max_batch_items) {
      return absl::InvalidArgumentError(absl::StrCat("BatchGet: ", req->digests_size(),
                                                     " digests; the limit is ",
                                                     limits_.max_batch_items, " per call"));
    }
    uint64_t total = 0;
    for (int i = 0; i < req->digests_size(); ++i) {
      vault::v1::BatchGetResponse::Item* item = resp->add_items();
      *item->mutable_digest() = req->digests(i);
      absl::StatusOr<cas::Digest> d = ParseDigest(req->digests(i), "BatchGet: digests", i);
      absl::Status s = d.status();
      if (s.ok()) s = store_->Stat(*d).status();  // absent: NOT_FOUND, whatever its size
      if (s.ok() && total + d->size() > limits_.max_batch_bytes) {
        s = absl::ResourceExhaustedError(
            absl::StrCat("BatchGet: ", d->ToString(), " does not fit in this call's limit of ",
                         limits_.max_batch_bytes, " bytes; fetch it with Get"));
      }
      if (s.ok()) {
        absl::StatusOr<std::string> data = store_->ReadAll(*d);
        s = data.status();
        if (s.ok()) {
          total += data->size();
          item->set_data(*std::move(data));
        }
      }
      SetItemStatus(s, item->mutable_status());
    }
    return absl::OkStatus();
  });
}

grpc::ServerReadReactor<PutRequest>* CasService::Put(grpc::CallbackServerContext* ctx,
                                                     PutResponse* resp) {
  return new PutReactor(ctx, store_, executor_, auditor_, resp);
}

grpc::ServerWriteReactor<GetResponse>* CasService::Get(grpc::CallbackServerContext* ctx,
                                                       const GetRequest* req) {
  return new GetReactor(store_, executor_, *req, limits_.get_piece_bytes);
}

grpc::ServerUnaryReactor* CasService::Stat(grpc::CallbackServerContext* ctx,
                                           const vault::v1::StatRequest* req,
                                           vault::v1::StatResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    absl::StatusOr<cas::Digest> d = ParseDigest(req->digest(), "Stat");
    if (!d.ok()) return d.status();
    ToProto(*d, resp->mutable_digest());
    absl::StatusOr<cas::ObjectInfo> info = store_->Stat(*d);
    if (info.ok()) {
      resp->set_present(true);
      resp->set_seq(info->seq);
      resp->set_layout(info->chunked ? vault::v1::StatResponse::CHUNKED
                                     : vault::v1::StatResponse::INLINE);
      resp->set_chunk_count(info->chunk_count);
      resp->set_stored_unix_ms(info->stored_unix_ms);
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(info.status())) return info.status();
    absl::StatusOr<uint64_t> offset = store_->UploadOffset(*d);
    if (!offset.ok()) return offset.status();
    resp->set_upload_offset(*offset);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasService::FindMissingChunks(
    grpc::CallbackServerContext* ctx, const vault::v1::FindMissingChunksRequest* req,
    vault::v1::FindMissingChunksResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    if (static_cast<uint64_t>(req->chunks_size()) > limits_.max_find_missing) {
      return absl::InvalidArgumentError(absl::StrCat("FindMissingChunks: ", req->chunks_size(),
                                                     " chunks; the limit is ",
                                                     limits_.max_find_missing, " per call"));
    }
    std::vector<cas::ChunkInfo> chunks;
    chunks.reserve(req->chunks_size());
    for (int i = 0; i < req->chunks_size(); ++i) {
      const vault::v1::ChunkDigest& c = req->chunks(i);
      if (c.sha256().size() != cas::kSha256Bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("FindMissingChunks: chunks[", i, "].sha256 must be 32 bytes"));
      }
      chunks.push_back(cas::ChunkInfo{c.sha256(), c.size()});
    }
    absl::StatusOr<std::vector<cas::ChunkInfo>> missing = store_->FindMissingChunks(chunks);
    if (!missing.ok()) return missing.status();
    for (const cas::ChunkInfo& c : *missing) {
      vault::v1::ChunkDigest* out = resp->add_missing();
      out->set_sha256(c.sha256);
      out->set_size(c.size);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasService::GetManifest(grpc::CallbackServerContext* ctx,
                                                  const vault::v1::GetManifestRequest* req,
                                                  vault::v1::GetManifestResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    absl::StatusOr<cas::Digest> d = ParseDigest(req->digest(), "GetManifest");
    if (!d.ok()) return d.status();
    absl::StatusOr<std::unique_ptr<cas::ObjectReader>> reader = store_->OpenReader(*d);
    if (!reader.ok()) return reader.status();
    if (!(*reader)->info().chunked) {
      vault::v1::ChunkDigest* out = resp->add_chunks();
      out->set_sha256(d->sha256());
      out->set_size(static_cast<uint32_t>(d->size()));
      return absl::OkStatus();
    }
    for (const auto& [hash, size] : (*reader)->chunks()) {
      vault::v1::ChunkDigest* out = resp->add_chunks();
      out->set_sha256(hash);
      out->set_size(size);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* CasService::RangeFingerprints(
    grpc::CallbackServerContext* ctx, const vault::v1::RangeFingerprintsRequest* req,
    vault::v1::RangeFingerprintsResponse* resp) {
  return RunUnary(ctx, executor_, [this, req, resp]() -> absl::Status {
    if (static_cast<uint64_t>(req->ranges_size()) > limits_.max_ranges) {
      return absl::InvalidArgumentError(absl::StrCat("RangeFingerprints: ", req->ranges_size(),
                                                     " ranges; the limit is ", limits_.max_ranges,
                                                     " per call"));
    }
    if (req->list_below() > limits_.max_range_listing) {
      return absl::InvalidArgumentError(absl::StrCat("RangeFingerprints: list_below ",
                                                     req->list_below(), " is above the limit of ",
                                                     limits_.max_range_listing));
    }
    std::vector<std::pair<std::string, std::string>> ranges;
    ranges.reserve(req->ranges_size());
    for (const vault::v1::KeyRange& r : req->ranges()) {
      if (!r.end().empty() && r.end() <= r.start()) {
        return absl::InvalidArgumentError("RangeFingerprints: a range ends before it starts");
      }
      ranges.emplace_back(r.start(), r.end());
    }
    absl::StatusOr<std::vector<cas::RangeSummary>> sums =
        store_->RangeFingerprints(ranges, req->list_below());
    if (!sums.ok()) return sums.status();
    for (int i = 0; i < req->ranges_size(); ++i) {
      const cas::RangeSummary& sum = (*sums)[i];
      vault::v1::RangeFingerprint* out = resp->add_ranges();
      *out->mutable_range() = req->ranges(i);
      out->set_count(sum.count);
      out->set_fingerprint(sum.fingerprint);
      for (const cas::Digest& d : sum.digests) ToProto(d, out->add_digests());
    }
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<FeedResponse>* CasService::Feed(grpc::CallbackServerContext* ctx,
                                                         const FeedRequest* req) {
  return new FeedReactor(store_, executor_, *req, limits_.feed_page);
}

}  // namespace vault::node
