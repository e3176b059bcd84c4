// node: vaultd's configuration — loading, defaults, validation.
//
// One protobuf message (vault.v1.VaultConfig) is the single source of truth: it is read from a
// protobuf text file, overridden by flags, then validated once. Relative paths are resolved
// against the config file's directory. Every error names the file, the field and the reason:
//
//   parse error: /etc/vault/a.conf:7:3: Message type "vault.v1.VaultConfig" has no field "nam".
//   /etc/vault/a.conf: field tls.cert_file: /etc/vault/a/tls.crt: No such file or directory
//
//   VAULT_ASSIGN_OR_RETURN(vault::v1::VaultConfig cfg, node::LoadConfigFile(path));
//   cfg.set_listen_address(flag_listen);              // overrides
//   VAULT_RETURN_IF_ERROR(node::FinalizeConfig(path, &cfg));  // defaults + validation
//
// Thread-safety: pure functions.
#ifndef VAULT_NODE_CONFIG_H_
#define VAULT_NODE_CONFIG_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vault/v1/config.pb.h"

namespace vault::node {

// Parses protobuf text format. INVALID_ARGUMENT with "<file>:<line>:<col>: ..." on errors.
absl::StatusOr<vault::v1::VaultConfig> ParseConfigText(absl::string_view text,
                                                       absl::string_view source);
// Reads and parses `path`; relative paths in it are resolved against its directory.
absl::StatusOr<vault::v1::VaultConfig> LoadConfigFile(const std::string& path);

// Fills defaults and validates; INVALID_ARGUMENT "<source>: field <f>: <reason>".
// With check_files, also checks that the key, certificate and CA files exist and are readable.
absl::Status FinalizeConfig(absl::string_view source, vault::v1::VaultConfig* config,
                            bool check_files = true);

// Checks a vault name: 1-63 of [a-z0-9-], not starting or ending with '-'.
absl::Status ValidateVaultName(absl::string_view name);

// Serializes to protobuf text format (for vaultctl init and `vaultd --print-config`).
std::string ConfigToText(const vault::v1::VaultConfig& config);

}  // namespace vault::node

#endif  // VAULT_NODE_CONFIG_H_
