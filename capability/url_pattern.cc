// URL scopes: the canonical form of a URL pattern in a grant, the check of a URL an agent asks
// the vault to fetch, and which pattern covers which (grant.h).
//
// A pattern is "scheme://host:port/path", canonical: scheme http or https, the host as a
// network grant's (lowercase, exact or "*.suffix"), an explicit port, and a path (with its
// query) of printable ASCII that is either exact or ends in '*', which stands for any
// continuation. What could make one URL mean another to the server is refused in patterns and
// requests alike: user info ('@'), fragments ('#'), backslashes, "." and ".." path segments,
// and their percent-encoded spellings (%2e, %2f, %5c), so that a prefix can only be widened by
// what the prefix itself says.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "capability/internal/grant_rules.h"

namespace vault::capability {
namespace {

constexpr size_t kMaxUrlBytes = 4096;

struct UrlParts {
  absl::string_view scheme;
  absl::string_view host;
  absl::string_view port;  // digits, as written
  absl::string_view path;  // from the first '/', with the query
};

// Splits "scheme://host:port/path" without judging the parts beyond their shape.
const char* Split(absl::string_view url, UrlParts* out) {
  const size_t colon = url.find("://");
  if (colon == absl::string_view::npos) return "is not scheme://host/path";
  out->scheme = url.substr(0, colon);
  absl::string_view rest = url.substr(colon + 3);
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  out->path = slash == absl::string_view::npos ? absl::string_view() : rest.substr(slash);
  if (authority.find('@') != absl::string_view::npos) return "has user info ('@')";
  if (authority.find('?') != absl::string_view::npos) return "has a query but no path";
  if (absl::StartsWith(authority, "[")) return "names an IPv6 literal (not supported)";
  const size_t port = authority.rfind(':');
  out->host = authority.substr(0, port);
  out->port = port == absl::string_view::npos ? absl::string_view() : authority.substr(port + 1);
  return nullptr;
}

bool IsHex(char c) { return absl::ascii_isxdigit(static_cast<unsigned char>(c)); }
int HexValue(char c) {
  return absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10;
}

// The path (with its query) of a pattern or a request. `pattern`: '*' may end it.
const char* PathPartProblem(absl::string_view path, bool pattern) {
  if (path.empty() || path.front() != '/') return "has no path (it must start with '/')";
  for (size_t i = 0; i < path.size(); ++i) {
    const char c = path[i];
    if (c <= ' ' || c > '~') return "contains a byte that is not printable ASCII";
    if (c == '#') return "has a fragment ('#')";
    if (c == '\\') return "contains '\\'";
    if (c == '*' && pattern && i + 1 != path.size()) {
      return "may use '*' only at the very end (any continuation)";
    }
    if (c == '%') {
      if (i + 2 >= path.size() || !IsHex(path[i + 1]) || !IsHex(path[i + 2])) {
        return "has a '%' that is not followed by two hex digits";
      }
      const int decoded = HexValue(path[i + 1]) * 16 + HexValue(path[i + 2]);
      if (decoded == '.' || decoded == '/' || decoded == '\\') {
        return "percent-encodes '.', '/' or '\\' (write them plainly)";
      }
    }
  }
  // Dot segments, in the path only (not the query).
  absl::string_view segments = path.substr(0, path.find('?'));
  if (pattern && absl::EndsWith(segments, "*")) segments.remove_suffix(1);
  size_t start = 1;
  while (start <= segments.size()) {
    size_t end = segments.find('/', start);
    if (end == absl::string_view::npos) end = segments.size();
    const absl::string_view segment = segments.substr(start, end - start);
    if (segment == "." || segment == "..") return "has a \".\" or \"..\" segment";
    start = end + 1;
  }
  return nullptr;
}

const char* UrlProblemOf(absl::string_view url, bool pattern, UrlParts* parts) {
  if (url.empty()) return "is empty";
  if (url.size() > kMaxUrlBytes) return "is longer than 4096 bytes";
  if (const char* problem = Split(url, parts)) return problem;
  if (parts->scheme != "http" && parts->scheme != "https") {
    return "has a scheme other than http or https (lowercase)";
  }
  if (const char* problem = HostProblem(parts->host)) return problem;
  if (!pattern && absl::StartsWith(parts->host, "*.")) return "has a wildcard host";
  uint32_t port = 0;
  if (parts->port.empty() || parts->port.front() == '0' || !absl::SimpleAtoi(parts->port, &port) ||
      port > 65535 || !std::all_of(parts->port.begin(), parts->port.end(), absl::ascii_isdigit)) {
    return "needs an explicit port 1-65535 (the canonical form writes it)";
  }
  return PathPartProblem(parts->path, pattern);
}

}  // namespace

const char* UrlProblem(absl::string_view url) {
  UrlParts parts;
  return UrlProblemOf(url, /*pattern=*/true, &parts);
}

bool UrlCoversValid(absl::string_view parent, absl::string_view child) {
  if (!absl::EndsWith(parent, "*")) return parent == child;
  UrlParts p, c;
  if (Split(parent, &p) != nullptr || Split(child, &c) != nullptr) return false;
  if (p.scheme != c.scheme || p.port != c.port || !HostCoversValid(p.host, c.host)) return false;
  absl::string_view prefix = p.path;
  prefix.remove_suffix(1);
  return absl::StartsWith(c.path, prefix);
}

bool UrlCovers(absl::string_view parent, absl::string_view child) {
  return UrlProblem(parent) == nullptr && UrlProblem(child) == nullptr &&
         UrlCoversValid(parent, child);
}

absl::StatusOr<std::string> CanonicalUrl(absl::string_view text, UrlUse use) {
  const bool pattern = use == UrlUse::kPattern;
  std::string url(text);
  const size_t colon = url.find("://");
  if (colon != std::string::npos) {
    for (size_t i = 0; i < colon; ++i) url[i] = absl::ascii_tolower(url[i]);
    const size_t host_start = colon + 3;
    size_t host_end = url.find_first_of("/?", host_start);
    if (host_end == std::string::npos) host_end = url.size();
    std::string authority = absl::AsciiStrToLower(url.substr(host_start, host_end - host_start));
    const absl::string_view scheme(url.data(), colon);
    if (authority.find(':') == std::string::npos && authority.find('@') == std::string::npos &&
        !absl::StartsWith(authority, "[")) {
      if (scheme == "https") absl::StrAppend(&authority, ":443");
      if (scheme == "http") absl::StrAppend(&authority, ":80");
    }
    std::string path = url.substr(host_end);
    if (path.empty() || path.front() == '?') path = absl::StrCat("/", path);
    url = absl::StrCat(url.substr(0, host_start), authority, path);
  }
  UrlParts parts;
  if (const char* problem = UrlProblemOf(url, pattern, &parts)) {
    return absl::InvalidArgumentError(
        absl::StrCat(pattern ? "URL pattern " : "URL ", Quoted(text), " ", problem));
  }
  return url;
}

bool UrlAllows(absl::string_view pattern, absl::string_view request) {
  UrlParts p, r;
  if (UrlProblemOf(pattern, true, &p) != nullptr || UrlProblemOf(request, false, &r) != nullptr) {
    return false;
  }
  if (!absl::EndsWith(pattern, "*")) return pattern == request;
  if (p.scheme != r.scheme || p.port != r.port || !HostCoversValid(p.host, r.host)) return false;
  absl::string_view prefix = p.path;
  prefix.remove_suffix(1);
  return absl::StartsWith(r.path, prefix);
}

}  // namespace vault::capability
