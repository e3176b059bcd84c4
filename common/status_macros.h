// Status helpers shared by every component.
//
// Abseil 20220623 has no RETURN_IF_ERROR / ASSIGN_OR_RETURN, so they are defined once here.
//
//   VAULT_RETURN_IF_ERROR(db->Write(batch));
//   VAULT_ASSIGN_OR_RETURN(auto record, LoadRecord(key));
//
// Thread-safety: macros only; no state.
#ifndef VAULT_COMMON_STATUS_MACROS_H_
#define VAULT_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define VAULT_STATUS_CONCAT_INNER_(a, b) a##b
#define VAULT_STATUS_CONCAT_(a, b) VAULT_STATUS_CONCAT_INNER_(a, b)

#define VAULT_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status vault_status_ = (expr);         \
    if (!vault_status_.ok()) return vault_status_; \
  } while (0)

#define VAULT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#define VAULT_ASSIGN_OR_RETURN(lhs, expr) \
  VAULT_ASSIGN_OR_RETURN_IMPL_(VAULT_STATUS_CONCAT_(vault_statusor_, __LINE__), lhs, expr)

#endif  // VAULT_COMMON_STATUS_MACROS_H_
