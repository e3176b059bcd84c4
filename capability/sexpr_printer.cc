// The canonical S-expression of specs, grants and constraints (text_form.h): what parses back to
// the same message.
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "capability/grant.h"
#include "capability/text_form.h"
#include "capability/text_syntax.h"
#include "google/protobuf/descriptor.h"

namespace vault::capability {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Reflection;
using text::ConstraintName;
using text::IsIntegerLiteral;
using text::IsSymbolChar;
using vault::v1::AgentSpec;
using vault::v1::Constraints;
using vault::v1::Grant;

std::string Quote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (u < 0x20 || u == 0x7f) {
          absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
        } else {
          out.push_back(c);
        }
    }
  }
  out += "\"";
  return out;
}

// A bare symbol when it reads back as the same symbol, else a string.
std::string NameText(absl::string_view s) {
  if (!s.empty() && std::all_of(s.begin(), s.end(), IsSymbolChar) && !IsIntegerLiteral(s)) {
    return std::string(s);
  }
  return Quote(s);
}

std::string HashText(absl::string_view hash) {
  return absl::StrCat("sha256:", absl::BytesToHexString(hash));
}

// "(head\n  item\n  item)" with items indented by `indent` + 2.
std::string Block(absl::string_view head, const std::vector<std::string>& items, int indent) {
  std::string out = absl::StrCat("(", head);
  for (const std::string& item : items) {
    absl::StrAppend(&out, "\n", std::string(indent + 2, ' '), item);
  }
  out += ")";
  return out;
}

std::string GrantText(const Grant& g) {
  switch (g.kind()) {
    case Grant::READ: {
      std::string out = "(read";
      if (!g.path().empty() || (g.hash().empty() && g.url().empty()))
        absl::StrAppend(&out, " (path ", Quote(g.path()), ")");
      if (!g.hash().empty()) absl::StrAppend(&out, " (hash ", Quote(HashText(g.hash())), ")");
      if (!g.url().empty()) absl::StrAppend(&out, " (url ", Quote(g.url()), ")");
      return out + ")";
    }
    case Grant::WRITE: {
      std::string out = "(write";
      if (!g.path().empty() || g.url().empty())
        absl::StrAppend(&out, " (path ", Quote(g.path()), ")");
      if (!g.url().empty()) absl::StrAppend(&out, " (url ", Quote(g.url()), ")");
      return out + ")";
    }
    case Grant::CAS_READ:
      return "(cas-read)";
    case Grant::CAS_WRITE:
      return "(cas-write)";
    case Grant::SPAWN:
      return "(spawn)";
    case Grant::NETWORK: {
      if (!g.url().empty() && g.host().empty() && g.port() == 0) {
        return absl::StrCat("(network (url ", Quote(g.url()), "))");
      }
      std::string out = absl::StrCat("(network (host ", Quote(g.host()), ")");
      if (g.port() != 0) absl::StrAppend(&out, " (port ", g.port(), ")");
      return out + ")";
    }
    case Grant::SEND:
    case Grant::RECEIVE: {
      std::string out = g.kind() == Grant::SEND ? absl::StrCat("(send (agent ", Quote(g.agent()))
                                                : absl::StrCat("(receive (from ", Quote(g.agent()));
      out += ")";
      if (g.message_types_size() > 0) {
        out += " (types";
        for (const std::string& t : g.message_types()) absl::StrAppend(&out, " ", NameText(t));
        out += ")";
      }
      return out + ")";
    }
    case Grant::MIGRATE: {
      std::string out = "(migrate (vaults";
      for (const std::string& v : g.vaults()) absl::StrAppend(&out, " ", NameText(v));
      return out + "))";
    }
    default:
      // Not a valid grant: printed for a human, does not parse.
      return absl::StrCat("(invalid-grant-kind ", static_cast<int>(g.kind()), ")");
  }
}

std::vector<std::string> GrantItems(const Grants& grants) {
  std::vector<std::string> items;
  for (const Grant& g : grants) items.push_back(GrantText(g));
  return items;
}

std::vector<std::string> ConstraintItems(const Constraints& c) {
  std::vector<std::string> items;
  const Descriptor* descriptor = Constraints::descriptor();
  const Reflection* reflection = c.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    if (!reflection->HasField(c, field)) continue;
    const ConstraintName* seconds = nullptr;  // the form in seconds, when there is one
    const ConstraintName* exact = nullptr;    // the form in the field's own unit
    for (const ConstraintName& name : text::ConstraintNames()) {
      if (name.field == field->name()) (name.scale == 1000 ? seconds : exact) = &name;
    }
    if (exact == nullptr) continue;
    std::string item;
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_UINT64: {
        uint64_t v = reflection->GetUInt64(c, field);
        item = seconds != nullptr && v % 1000 == 0
                   ? absl::StrCat("(", seconds->name, " ", v / 1000, ")")
                   : absl::StrCat("(", exact->name, " ", v, ")");
        break;
      }
      case FieldDescriptor::CPPTYPE_INT64: {
        int64_t v = reflection->GetInt64(c, field);
        item = seconds != nullptr && v % 1000 == 0
                   ? absl::StrCat("(", seconds->name, " ", v / 1000, ")")
                   : absl::StrCat("(", exact->name, " ", v, ")");
        break;
      }
      case FieldDescriptor::CPPTYPE_UINT32:
        item = absl::StrCat("(", exact->name, " ", reflection->GetUInt32(c, field), ")");
        break;
      default:
        continue;
    }
    items.push_back(std::move(item));
  }
  return items;
}

}  // namespace

std::string AgentSpecToSexpr(const AgentSpec& spec) {
  std::vector<std::string> items;
  if (!spec.purpose().empty())
    items.push_back(absl::StrCat("(purpose ", Quote(spec.purpose()), ")"));
  if (!spec.instructions().empty()) {
    items.push_back(absl::StrCat("(instructions ", Quote(spec.instructions()), ")"));
  }
  if (spec.has_code_digest()) {
    items.push_back(absl::StrCat("(code \"", HashText(spec.code_digest().sha256()), "/",
                                 spec.code_digest().size(), "\")"));
  } else if (spec.has_code_file()) {
    items.push_back(absl::StrCat("(code-file ", Quote(spec.code_file()), ")"));
  } else if (spec.has_code_source()) {
    items.push_back(absl::StrCat("(code '", spec.code_source(), ")"));
  }
  if (!spec.image().empty()) items.push_back(absl::StrCat("(image ", Quote(spec.image()), ")"));
  if (spec.command_size() > 0) {
    std::string command = "(command";
    for (const std::string& c : spec.command()) absl::StrAppend(&command, " ", Quote(c));
    items.push_back(command + ")");
  }
  if (!spec.id().empty()) items.push_back(absl::StrCat("(id ", Quote(spec.id()), ")"));
  if (!spec.name().empty()) items.push_back(absl::StrCat("(name ", NameText(spec.name()), ")"));
  if (spec.groups_size() > 0) {
    std::string groups = "(groups";
    for (const std::string& g : spec.groups()) absl::StrAppend(&groups, " ", NameText(g));
    items.push_back(groups + ")");
  }
  if (!spec.spawned_by().empty()) {
    items.push_back(absl::StrCat("(spawned-by ", Quote(spec.spawned_by()), ")"));
  }
  if (spec.grants_size() > 0) items.push_back(Block("capabilities", GrantItems(spec.grants()), 2));
  if (spec.has_constraints()) {
    items.push_back(Block("constraints", ConstraintItems(spec.constraints()), 2));
  }
  if (!spec.sandbox().empty())
    items.push_back(absl::StrCat("(sandbox ", NameText(spec.sandbox()), ")"));
  if (spec.args_size() > 0) {
    std::string args = "(args";
    for (const std::string& a : spec.args()) absl::StrAppend(&args, " ", Quote(a));
    items.push_back(args + ")");
  }
  if (spec.env_size() > 0) {
    std::string env = "(env";
    for (const std::string& e : spec.env()) absl::StrAppend(&env, " ", Quote(e));
    items.push_back(env + ")");
  }
  return Block("agent", items, 0);
}

std::string GrantsToSexpr(const std::vector<Grant>& grants) {
  std::vector<std::string> items;
  for (const Grant& g : grants) items.push_back(GrantText(g));
  return Block("capabilities", items, 0);
}

std::string ConstraintsToSexpr(const Constraints& constraints) {
  return Block("constraints", ConstraintItems(constraints), 0);
}

}  // namespace vault::capability
