// vaultctl init, vaultctl federation ...: creating vaults and their federation's TLS material.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "capability/principal.h"
#include "common/file_util.h"
#include "common/status_macros.h"
#include "node/config.h"
#include "node/tls_material.h"
#include "vaultctl/commands.h"
#include "vaultctl/output.h"

namespace vault::vaultctl {
namespace {

constexpr absl::Duration kCaValidity = absl::Hours(24 * 365 * 10);
constexpr absl::Duration kCertValidity = absl::Hours(24 * 365 * 2);

absl::StatusOr<bool> DirIsEmpty(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return common::PosixError(errno, absl::StrCat("open ", dir));
  bool empty = true;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") {
      empty = false;
      break;
    }
  }
  closedir(d);
  return empty;
}

void RemoveTree(const std::string& path) {
  // Only ever called on the temporary directory this command created itself.
  if (DIR* d = opendir(path.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n == "." || n == "..") continue;
      std::string child = absl::StrCat(path, "/", n);
      struct stat st;
      if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        RemoveTree(child);
      } else {
        unlink(child.c_str());
      }
    }
    closedir(d);
  }
  rmdir(path.c_str());
}

absl::StatusOr<node::KeyAndCert> LoadCa(const std::string& dir) {
  node::KeyAndCert ca;
  VAULT_ASSIGN_OR_RETURN(ca.key_pem, common::ReadPrivateFile(dir + "/ca.key"));
  VAULT_ASSIGN_OR_RETURN(ca.cert_pem, common::ReadFile(dir + "/ca.crt"));
  return ca;
}

absl::Status CreateCaFiles(const std::string& dir, const std::string& name) {
  VAULT_RETURN_IF_ERROR(common::MakeDirs(dir, 0700));
  if (common::PathExists(dir + "/ca.key") || common::PathExists(dir + "/ca.crt")) {
    return absl::AlreadyExistsError(
        absl::StrCat(dir, " already holds a federation CA; refusing to replace it"));
  }
  VAULT_ASSIGN_OR_RETURN(node::KeyAndCert ca, node::CreateFederationCa(name, kCaValidity));
  VAULT_RETURN_IF_ERROR(common::WriteNewFile(dir + "/ca.key", ca.key_pem, 0600));
  return common::WriteNewFile(dir + "/ca.crt", ca.cert_pem, 0644);
}

struct InitResult {
  std::string public_key;
  std::string config_path;
  std::string admin_socket;
  std::string admin_key;        // DIR/admin.key: a vault administrator's key (agents.admins)
  std::string admin_principal;  // its ed25519:<hex>
};

// Builds the whole vault in `tmp`, then renames it to `dir`: a failure leaves nothing behind.
absl::StatusOr<InitResult> InitVault(const std::string& name, std::string dir,
                                     const std::string& listen, const std::string& ca_dir) {
  VAULT_RETURN_IF_ERROR(node::ValidateVaultName(name));
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // "a/" is "a"
  if (dir.empty() || dir == "/" || dir == "." || dir == "..") {
    return absl::InvalidArgumentError(absl::StrCat("--dir \"", dir, "\" cannot hold a new vault"));
  }
  bool dir_exists = common::PathExists(dir);
  if (dir_exists) {
    VAULT_ASSIGN_OR_RETURN(bool empty, DirIsEmpty(dir));
    if (!empty) {
      return absl::AlreadyExistsError(absl::StrCat(
          dir, " is not empty (an existing vault?); refusing to initialize it. Nothing changed."));
    }
  }
  node::KeyAndCert ca;
  if (!ca_dir.empty()) {
    VAULT_ASSIGN_OR_RETURN(ca, LoadCa(ca_dir));
  } else {
    VAULT_ASSIGN_OR_RETURN(ca, node::CreateFederationCa(name + "-federation", kCaValidity));
  }
  VAULT_ASSIGN_OR_RETURN(node::KeyAndCert tls, node::IssueMemberCert(ca, name, kCertValidity));
  VAULT_ASSIGN_OR_RETURN(capability::PrivateKey key, capability::PrivateKey::Generate());
  // The operator's key for the agent commands: an administrator of this vault's agents.
  VAULT_ASSIGN_OR_RETURN(capability::PrivateKey admin, capability::PrivateKey::Generate());

  vault::v1::VaultConfig config;
  config.set_name(name);
  config.set_data_dir("data");
  config.set_listen_address(listen);
  config.set_key_file("vault.key");
  config.mutable_tls()->set_cert_file("tls/vault.crt");
  config.mutable_tls()->set_key_file("tls/vault.key");
  config.mutable_tls()->set_ca_file("tls/ca.crt");
  vault::v1::Member* self = config.add_members();
  self->set_name(name);
  self->set_address(listen);
  self->set_public_key(key.public_key().ToText());
  config.mutable_agents()->add_admins(admin.public_key().ToText());
  std::string text = absl::StrCat(
      "# Vault configuration (protobuf text format, vault.v1.VaultConfig).\n"
      "# Relative paths are relative to this file. See docs/configuration.md.\n",
      node::ConfigToText(config));
  // Validate what we are about to write, as vaultd will.
  {
    VAULT_ASSIGN_OR_RETURN(vault::v1::VaultConfig check, node::ParseConfigText(text, "vault.conf"));
    VAULT_RETURN_IF_ERROR(node::FinalizeConfig("vault.conf", &check, /*check_files=*/false));
  }

  // A fresh, private directory beside `dir` (mkdtemp: never one someone else prepared).
  std::string tmp = absl::StrCat(dir, ".init-XXXXXX");
  if (mkdtemp(tmp.data()) == nullptr) {
    return common::PosixError(errno, absl::StrCat("create a temporary directory beside ", dir));
  }
  absl::Status s = [&]() -> absl::Status {
    VAULT_RETURN_IF_ERROR(common::MakeDirs(tmp + "/tls", 0700));
    VAULT_RETURN_IF_ERROR(common::MakeDirs(tmp + "/data", 0700));
    VAULT_RETURN_IF_ERROR(key.SaveNewFile(tmp + "/vault.key"));
    VAULT_RETURN_IF_ERROR(admin.SaveNewFile(tmp + "/admin.key"));
    VAULT_RETURN_IF_ERROR(common::WriteNewFile(tmp + "/tls/vault.key", tls.key_pem, 0600));
    VAULT_RETURN_IF_ERROR(common::WriteNewFile(tmp + "/tls/vault.crt", tls.cert_pem, 0644));
    VAULT_RETURN_IF_ERROR(common::WriteNewFile(tmp + "/tls/ca.crt", ca.cert_pem, 0644));
    if (ca_dir.empty()) {  // a federation of one: keep its CA so others can join
      VAULT_RETURN_IF_ERROR(common::MakeDirs(tmp + "/ca", 0700));
      VAULT_RETURN_IF_ERROR(common::WriteNewFile(tmp + "/ca/ca.key", ca.key_pem, 0600));
      VAULT_RETURN_IF_ERROR(common::WriteNewFile(tmp + "/ca/ca.crt", ca.cert_pem, 0644));
    }
    VAULT_RETURN_IF_ERROR(common::WriteNewFile(tmp + "/vault.conf", text, 0600));
    if (chmod(tmp.c_str(), 0700) != 0) return common::PosixError(errno, "chmod " + tmp);
    if (dir_exists && rmdir(dir.c_str()) != 0) return common::PosixError(errno, "rmdir " + dir);
    if (rename(tmp.c_str(), dir.c_str()) != 0) {
      return common::PosixError(errno, absl::StrCat("rename ", tmp, " to ", dir));
    }
    return absl::OkStatus();
  }();
  if (!s.ok()) {
    RemoveTree(tmp);
    if (dir_exists) mkdir(dir.c_str(), 0700);
    return s;
  }
  char abs[PATH_MAX];
  std::string abs_dir = realpath(dir.c_str(), abs) != nullptr ? std::string(abs) : dir;
  return InitResult{key.public_key().ToText(), abs_dir + "/vault.conf",
                    abs_dir + "/data/vault.sock", abs_dir + "/admin.key",
                    admin.public_key().ToText()};
}

// Reads a config as written (relative paths kept), for editing.
absl::StatusOr<vault::v1::VaultConfig> ReadRawConfig(const std::string& path) {
  VAULT_ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
  return node::ParseConfigText(text, path);
}

absl::Status AddMember(const std::string& config_path, const vault::v1::Member& member) {
  VAULT_ASSIGN_OR_RETURN(vault::v1::VaultConfig raw, ReadRawConfig(config_path));
  for (const vault::v1::Member& m : raw.members()) {
    if (m.name() == member.name()) {
      if (m.address() == member.address() && m.public_key() == member.public_key()) {
        return absl::OkStatus();  // already there, identical
      }
      return absl::AlreadyExistsError(absl::StrCat("member ", member.name(), " is already in ",
                                                   config_path,
                                                   " with a different address or key"));
    }
  }
  *raw.add_members() = member;
  vault::v1::VaultConfig check = raw;
  VAULT_RETURN_IF_ERROR(node::FinalizeConfig(config_path, &check, /*check_files=*/false));
  std::string text = absl::StrCat(
      "# Vault configuration (protobuf text format, vault.v1.VaultConfig).\n"
      "# Relative paths are relative to this file. See docs/configuration.md.\n",
      node::ConfigToText(raw));
  return common::WriteFileAtomic(config_path, text, 0600);
}

absl::StatusOr<vault::v1::Member> SelfMember(const std::string& config_path) {
  VAULT_ASSIGN_OR_RETURN(vault::v1::VaultConfig raw, ReadRawConfig(config_path));
  for (const vault::v1::Member& m : raw.members()) {
    if (m.name() == raw.name()) return m;
  }
  return absl::NotFoundError(absl::StrCat(config_path, " does not list its own vault as a member"));
}

}  // namespace

void AddInitCommands(CLI::App& app, GlobalOptions& g, Command& command) {
  // vaultctl init
  auto* init = app.add_subcommand("init", "Create a new vault: keys, TLS material, config, data");
  static std::string name, dir, listen = "127.0.0.1:7700", ca_dir;
  init->add_option("--name", name, "Vault name ([a-z0-9-], 1-63 characters)")->required();
  init->add_option("--dir", dir, "Directory to create the vault in (absent or empty)")->required();
  init->add_option("--listen", listen, "host:port of its federation (mTLS) listener")
      ->capture_default_str();
  init->add_option("--ca", ca_dir,
                   "Federation CA directory (from `federation create-ca`); without it the vault "
                   "gets a CA of its own in DIR/ca");
  init->callback([&g, &command] {
    command = [&g] {
      absl::StatusOr<InitResult> r = InitVault(name, dir, listen, ca_dir);
      if (!r.ok()) return ReportError(r.status(), g.json());
      if (g.json()) {
        std::cout << Json::Object()
                         .Add("name", name)
                         .Add("public_key", r->public_key)
                         .Add("config", r->config_path)
                         .Add("admin_socket", r->admin_socket)
                         .Add("listen_address", listen)
                         .Add("admin_key", r->admin_key)
                         .Add("admin_principal", r->admin_principal)
                         .ToString()
                  << "\n";
      } else {
        std::cout << "created vault " << name << "\n  public key:   " << r->public_key
                  << "\n  config:       " << r->config_path
                  << "\n  admin socket: " << r->admin_socket << " (once vaultd runs)"
                  << "\n  admin key:    " << r->admin_key << " (" << r->admin_principal
                  << "; for vaultctl agent ... --as)"
                  << "\n  start it:     vaultd --config " << r->config_path << "\n";
      }
      return kExitOk;
    };
  });

  // vaultctl federation ...
  auto* fed = app.add_subcommand("federation", "Federation membership and TLS material");
  fed->require_subcommand(1);
  AddFederationStatusCommand(fed, g, command);
  auto* create_ca = fed->add_subcommand("create-ca", "Create a federation CA (ca.key, ca.crt)");
  static std::string ca_out, fed_name = "vault-federation";
  create_ca->add_option("--dir", ca_out, "Directory for ca.key and ca.crt")->required();
  create_ca->add_option("--name", fed_name, "Federation name (the CA's CN)")->capture_default_str();
  create_ca->callback([&g, &command] {
    command = [&g] {
      absl::Status s = CreateCaFiles(ca_out, fed_name);
      if (!s.ok()) return ReportError(s, g.json());
      if (g.json()) {
        std::cout << Json::Object()
                         .Add("ca_cert", ca_out + "/ca.crt")
                         .Add("ca_key", ca_out + "/ca.key")
                         .ToString()
                  << "\n";
      } else {
        std::cout << "created federation CA " << fed_name << " in " << ca_out
                  << "\n  new vaults join with: vaultctl init --ca " << ca_out << " ...\n";
      }
      return kExitOk;
    };
  });

  auto* issue = fed->add_subcommand("issue-cert", "Issue a member TLS certificate from a CA");
  static std::string issue_ca, issue_name, issue_out;
  issue->add_option("--ca", issue_ca, "Federation CA directory")->required();
  issue->add_option("--name", issue_name, "Member (vault) name")->required();
  issue->add_option("--out", issue_out, "Directory for NAME.crt and NAME.key")->required();
  issue->callback([&g, &command] {
    command = [&g] {
      absl::Status s = [&]() -> absl::Status {
        VAULT_ASSIGN_OR_RETURN(node::KeyAndCert ca, LoadCa(issue_ca));
        VAULT_ASSIGN_OR_RETURN(node::KeyAndCert kc,
                               node::IssueMemberCert(ca, issue_name, kCertValidity));
        VAULT_RETURN_IF_ERROR(common::MakeDirs(issue_out, 0700));
        VAULT_RETURN_IF_ERROR(
            common::WriteNewFile(issue_out + "/" + issue_name + ".key", kc.key_pem, 0600));
        return common::WriteNewFile(issue_out + "/" + issue_name + ".crt", kc.cert_pem, 0644);
      }();
      if (!s.ok()) return ReportError(s, g.json());
      std::string base = issue_out + "/" + issue_name;
      if (g.json()) {
        std::cout << Json::Object().Add("cert", base + ".crt").Add("key", base + ".key").ToString()
                  << "\n";
      } else {
        std::cout << "issued " << base << ".crt and " << base << ".key\n";
      }
      return kExitOk;
    };
  });

  auto* add = fed->add_subcommand("add-member", "Add a member vault to a vault's config");
  static std::string add_config, peer_config, m_name, m_address, m_key;
  add->add_option("--config", add_config, "The config file to edit")->required();
  add->add_option("--peer-config", peer_config, "Take the member from this vault's config");
  add->add_option("--name", m_name, "Member name (without --peer-config)");
  add->add_option("--address", m_address, "Member host:port (without --peer-config)");
  add->add_option("--public-key", m_key, "Member ed25519:<hex> key (without --peer-config)");
  add->callback([&g, &command] {
    command = [&g] {
      vault::v1::Member m;
      if (!peer_config.empty()) {
        absl::StatusOr<vault::v1::Member> peer = SelfMember(peer_config);
        if (!peer.ok()) return ReportError(peer.status(), g.json());
        m = *peer;
      } else if (m_name.empty() || m_address.empty() || m_key.empty()) {
        ReportError(absl::InvalidArgumentError(
                        "give --peer-config, or all of --name, --address, --public-key"),
                    g.json());
        return kExitUsage;
      } else {
        m.set_name(m_name);
        m.set_address(m_address);
        m.set_public_key(m_key);
      }
      absl::Status s = AddMember(add_config, m);
      if (!s.ok()) return ReportError(s, g.json());
      if (g.json()) {
        std::cout << Json::Object()
                         .Add("config", add_config)
                         .Add("member", m.name())
                         .Add("address", m.address())
                         .Add("public_key", m.public_key())
                         .ToString()
                  << "\n";
      } else {
        std::cout << "added member " << m.name() << " (" << m.address() << ") to " << add_config
                  << "; restart its vaultd to apply\n";
      }
      return kExitOk;
    };
  });
}

}  // namespace vault::vaultctl
