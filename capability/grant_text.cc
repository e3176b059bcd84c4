// A grant as one line of text (GrantToString): the form of grant.h, every value escaped so that a
// hostile one can neither break a log line nor pose as another value.
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "capability/grant.h"
#include "capability/internal/grant_rules.h"

namespace vault::capability {
namespace {

using vault::v1::Grant;

// One line, printable: bytes outside printable ASCII and the backslash are escaped, so a hostile
// value can neither break a log line nor pose as another value. Valid scopes print unchanged.
void AppendEscaped(std::string* out, absl::string_view s) {
  for (char c : s) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c >= ' ' && c <= '~') {
      out->push_back(c);
    } else {
      absl::StrAppend(out, "\\x", absl::BytesToHexString(absl::string_view(&c, 1)));
    }
  }
}

}  // namespace

std::string Quoted(absl::string_view s) {
  std::string out = "\"";
  AppendEscaped(&out, s);
  out.push_back('"');
  return out;
}

std::string GrantToString(const Grant& grant) {
  std::string out;
  // The scope fields the kind's form prints; any other non-empty one is appended in brackets so
  // that a malformed grant is never shown as a well-formed one.
  bool path = false, hash = false, network = false, agent = false, vaults = false, types = false,
       url = false;
  switch (grant.kind()) {
    case Grant::READ:
      out = "read";
      hash = HasHash(grant);
      path = HasPath(grant);
      url = HasUrl(grant);
      break;
    case Grant::WRITE:
      out = "write";
      url = HasUrl(grant);
      path = !url || HasPath(grant);
      break;
    case Grant::CAS_READ:
      out = "cas-read";
      break;
    case Grant::CAS_WRITE:
      out = "cas-write";
      break;
    case Grant::SPAWN:
      out = "spawn";
      break;
    case Grant::NETWORK:
      out = "network";
      url = HasUrl(grant);
      network = !url;
      break;
    case Grant::SEND:
      out = "send";
      agent = types = true;
      break;
    case Grant::RECEIVE:
      out = "receive";
      agent = types = true;
      break;
    case Grant::MIGRATE:
      out = "migrate";
      vaults = true;
      break;
    default:
      out = absl::StrCat("kind(", static_cast<int>(grant.kind()), ")");
      break;
  }
  if (path && HasPath(grant)) {
    out.push_back(' ');
    AppendEscaped(&out, grant.path());
  }
  if (hash) absl::StrAppend(&out, " sha256:", absl::BytesToHexString(grant.hash()));
  if (url) {
    out.push_back(' ');
    AppendEscaped(&out, grant.url());
  }
  if (network) {
    out.push_back(' ');
    AppendEscaped(&out, grant.host());
    out.push_back(':');
    if (grant.port() == 0) {
      out.push_back('*');
    } else {
      absl::StrAppend(&out, grant.port());
    }
  }
  if (agent && HasAgent(grant)) {
    out.push_back(' ');
    AppendEscaped(&out, grant.agent());
  }
  if (vaults) {
    for (const std::string& v : grant.vaults()) {
      out.push_back(' ');
      AppendEscaped(&out, v);
    }
  }
  auto append_types = [&out, &grant] {
    for (int i = 0; i < grant.message_types_size(); ++i) {
      if (i > 0) out.push_back(',');
      AppendEscaped(&out, grant.message_types(i));
    }
  };
  if (types && HasMessageTypes(grant)) {
    out.append(" types=");
    append_types();
  }
  // Fields the kind does not have.
  if (!path && HasPath(grant)) {
    out.append(" [path ");
    AppendEscaped(&out, grant.path());
    out.push_back(']');
  }
  if (!hash && HasHash(grant)) {
    absl::StrAppend(&out, " [hash ", absl::BytesToHexString(grant.hash()), "]");
  }
  if (!network && HasHost(grant)) {
    out.append(" [host ");
    AppendEscaped(&out, grant.host());
    out.push_back(']');
  }
  if (!network && HasPort(grant)) absl::StrAppend(&out, " [port ", grant.port(), "]");
  if (!url && HasUrl(grant)) {
    out.append(" [url ");
    AppendEscaped(&out, grant.url());
    out.push_back(']');
  }
  if (!agent && HasAgent(grant)) {
    out.append(" [agent ");
    AppendEscaped(&out, grant.agent());
    out.push_back(']');
  }
  if (!vaults && HasVaults(grant)) {
    out.append(" [vaults");
    for (const std::string& v : grant.vaults()) {
      out.push_back(' ');
      AppendEscaped(&out, v);
    }
    out.push_back(']');
  }
  if (!types && HasMessageTypes(grant)) {
    out.append(" [message_types ");
    append_types();
    out.push_back(']');
  }
  return out;
}

}  // namespace vault::capability
