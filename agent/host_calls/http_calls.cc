// The HTTP host call: http_get. The vault fetches a URL for the agent with libcurl (the agent has
// no network of its own), under a URL grant: GET needs read or network, POST write or network.
// Redirects are not followed by libcurl: each target is put in canonical form and checked against
// the agent's grants again, at most kMaxRedirects times. The body is bounded by the request's
// max_bytes and the vault's http_max_bytes, the whole fetch by its timeout and the vault's
// call_deadline_ms; the URL and the body's SHA-256 go in the audit entry.
#include <curl/curl.h>

#include <algorithm>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "agent/internal/host_call.h"
#include "capability/grant.h"

namespace vault::agent::host_calls {
namespace {

using vault::v1::Grant;

constexpr int kMaxRedirects = 5;
constexpr uint32_t kDefaultTimeoutMs = 10000;
constexpr uint32_t kMaxTimeoutMs = 60000;

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};

// The body, as it comes, up to `max` bytes; more aborts the transfer.
struct Sink {
  std::string body;
  uint64_t max = 0;
  bool too_large = false;
};

size_t Write(char* data, size_t size, size_t n, void* user) {
  Sink* sink = static_cast<Sink*>(user);
  const size_t bytes = size * n;
  if (sink->body.size() + bytes > sink->max) {
    sink->too_large = true;
    return 0;  // libcurl fails the transfer with CURLE_WRITE_ERROR
  }
  sink->body.append(data, bytes);
  return bytes;
}

bool IsPost(const vault::v1::HttpGetRequest& r) { return r.method() == "POST"; }

// The grants that may allow `method` on `url`: the method's own kind first, then network.
std::vector<Grant> Candidates(bool post, const std::string& url) {
  std::vector<Grant> out;
  for (Grant::Kind kind : {post ? Grant::WRITE : Grant::READ, Grant::NETWORK}) {
    Grant g = MakeGrant(kind);
    g.set_url(url);
    out.push_back(std::move(g));
  }
  return out;
}

// The first candidate the agent's authority allows, else the first (what a denial names).
Grant Choose(LiveAgent& live, bool post, const std::string& url, bool* allowed) {
  std::vector<Grant> candidates = Candidates(post, url);
  absl::MutexLock lock(&live.mu);
  for (Grant& g : candidates) {
    if (live.authority != nullptr && live.authority->Allows(g)) {
      *allowed = true;
      return g;
    }
  }
  *allowed = false;
  return candidates.front();
}

// A request URL in canonical form, or INVALID_ARGUMENT. '*' stands for "any continuation" in
// grants, so a URL that contains one would be read as a pattern: refused.
absl::StatusOr<std::string> RequestUrl(const std::string& text) {
  if (text.find('*') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("URL \"", text, "\" contains '*'"));
  }
  return capability::CanonicalUrl(text, capability::UrlUse::kRequest);
}

}  // namespace

void AuthorizeHttpGet(HostCallContext& ctx) {
  const auto& r = ctx.request.http_get();
  HostCall& c = ctx.call;
  c.subject = r.url();
  if (!r.method().empty() && r.method() != "GET" && r.method() != "POST") {
    c.status = absl::InvalidArgumentError(
        absl::StrCat("method \"", r.method(), "\": http_get does GET or POST"));
    return;
  }
  if (!IsPost(r) && (!r.body().empty() || !r.content_type().empty())) {
    c.status = absl::InvalidArgumentError("a GET carries no body (set method POST)");
    return;
  }
  if (r.timeout_ms() > kMaxTimeoutMs) {
    c.status = absl::InvalidArgumentError(
        absl::StrCat("timeout_ms ", r.timeout_ms(), " is above ", kMaxTimeoutMs));
    return;
  }
  absl::StatusOr<std::string> url = RequestUrl(r.url());
  if (!url.ok()) {
    c.status = url.status();
    return;
  }
  c.subject = absl::StrCat(IsPost(r) ? "POST " : "", *url);
  bool allowed;
  c.grant = Choose(*ctx.live, IsPost(r), *url, &allowed);
}

void HttpGet(HostCallContext& ctx) {
  static std::once_flag curl_init;
  std::call_once(curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HostCallServices& s = ctx.services;
  const auto& r = ctx.request.http_get();
  HostCall& c = ctx.call;
  const bool post = IsPost(r);

  uint64_t max_bytes = ctx.max_payload > 1024 ? ctx.max_payload - 1024 : ctx.max_payload;
  if (s.config().http_max_bytes() != 0)
    max_bytes = std::min(max_bytes, s.config().http_max_bytes());
  if (r.max_bytes() != 0) max_bytes = std::min(max_bytes, r.max_bytes());
  const uint32_t timeout_ms = std::min<uint32_t>(
      r.timeout_ms() != 0 ? r.timeout_ms() : kDefaultTimeoutMs, s.config().call_deadline_ms());
  const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);

  absl::StatusOr<std::string> first = RequestUrl(r.url());  // checked by AuthorizeHttpGet
  if (!first.ok()) {
    c.status = first.status();
    return;
  }
  std::string url = *first;
  bool method_post = post;
  for (int hop = 0;; ++hop) {
    std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
    if (curl == nullptr) {
      c.status = absl::InternalError("libcurl could not start a transfer");
      return;
    }
    CURL* h = curl.get();
    Sink sink{.max = max_bytes};
    char error[CURL_ERROR_SIZE] = "";
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      c.status = absl::DeadlineExceededError(
          absl::StrCat("http_get ", r.url(), ": no answer within ", timeout_ms, " ms"));
      return;
    }
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(left_ms));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &Write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(max_bytes));
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "vaultd");
    curl_easy_setopt(h, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_IGNORED));
    curl_easy_setopt(h, CURLOPT_PROXY, "");  // never a proxy from vaultd's environment
    if (!s.config().http_ca_file().empty()) {
      curl_easy_setopt(h, CURLOPT_CAINFO, s.config().http_ca_file().c_str());
    }
    std::unique_ptr<curl_slist, SlistDeleter> headers;
    if (method_post) {
      const std::string type =
          absl::StrCat("Content-Type: ",
                       r.content_type().empty() ? "application/octet-stream" : r.content_type());
      if (type.find_first_of("\r\n") != std::string::npos) {
        c.status = absl::InvalidArgumentError("content_type contains a line break");
        return;
      }
      headers.reset(curl_slist_append(nullptr, type.c_str()));
      curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.body().data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body().size()));
    }
    const CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK) {
      if (sink.too_large || rc == CURLE_FILESIZE_EXCEEDED) {
        c.status = absl::ResourceExhaustedError(
            absl::StrCat("http_get ", url, ": the response is larger than ", max_bytes, " bytes"));
      } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        c.status = absl::DeadlineExceededError(
            absl::StrCat("http_get ", url, ": no answer within ", timeout_ms, " ms"));
      } else {
        c.status = absl::UnavailableError(absl::StrCat(
            "http_get ", url, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc)));
      }
      return;
    }
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    char* location = nullptr;
    curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &location);
    const bool redirect =
        (status == 301 || status == 302 || status == 303 || status == 307 || status == 308) &&
        location != nullptr;
    if (!redirect) {
      char* type = nullptr;
      curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &type);
      auto* out = c.response.mutable_http_get();
      out->set_status(static_cast<uint32_t>(status));
      out->set_final_url(url);
      if (type != nullptr) out->set_content_type(type);
      c.bytes = sink.body.size();
      c.output_bytes = sink.body;
      out->set_body(std::move(sink.body));
      return;
    }
    if (hop == kMaxRedirects) {
      c.status = absl::FailedPreconditionError(
          absl::StrCat("http_get ", r.url(), ": more than ", kMaxRedirects, " redirects"));
      return;
    }
    // The target is checked as a request of its own: a redirect never widens the grants.
    absl::StatusOr<std::string> next = RequestUrl(location);
    if (!next.ok()) {
      c.status = absl::PermissionDeniedError(absl::StrCat(
          "denied: ", url, " redirects to a URL that is refused: ", next.status().message()));
      return;
    }
    if (status == 303) method_post = false;  // "see other": a GET
    bool allowed;
    (void)Choose(*ctx.live, method_post, *next, &allowed);
    if (!allowed) {
      c.status = absl::PermissionDeniedError(absl::StrCat(
          "denied: ", url, " redirects to ", *next, ", which no url grant of this agent covers"));
      return;
    }
    url = *std::move(next);
  }
}

}  // namespace vault::agent::host_calls
