// node: vaultd's JSON log format — one JSON object per line, for log collectors.
//
//   {"time":"2026-11-22T13:04:05.123456Z","level":"info","vault":"vault-a",
//    "message":"agent a-0123456789abcdef spawned","agent":"a-0123456789abcdef"}
//
// Members, in this order: time (RFC 3339, UTC, microseconds), level (trace, debug, info, warn,
// error, critical), vault (this vault's name), message, then the line's structured fields when it
// has them (common/log_fields.h): agent, transfer. Strings are escaped per RFC 8259
// (common/json.h); bytes that are not UTF-8 become U+FFFD, so every line is valid JSON whatever a
// message holds.
//
//   spdlog::default_logger()->set_formatter(node::NewJsonLogFormatter(config.name()));
//
// Thread-safety: a formatter belongs to its sink (spdlog locks the sink around it). It reads the
// fields of the calling thread, so it must be used with synchronous sinks.
#ifndef VAULT_NODE_JSON_LOG_H_
#define VAULT_NODE_JSON_LOG_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"

namespace vault::node {

std::unique_ptr<spdlog::formatter> NewJsonLogFormatter(std::string vault_name);

}  // namespace vault::node

#endif  // VAULT_NODE_JSON_LOG_H_
