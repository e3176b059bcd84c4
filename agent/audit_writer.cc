#include "agent/audit_writer.h"

#include <algorithm>
#include <utility>

#include "absl/types/span.h"
#include "spdlog/spdlog.h"

namespace vault::agent {

AuditWriter::AuditWriter(audit::AuditLog* log, absl::Duration batch_interval)
    : log_(log), batch_interval_(batch_interval), thread_([this] { Loop(); }) {}

AuditWriter::~AuditWriter() { Stop(); }

void AuditWriter::Append(vault::v1::AuditEntry entry, bool durable) {
  if (!durable) {
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      queue_.push_back(std::move(entry));
      return;
    }
  }
  absl::Status s = log_->Append(std::move(entry)).status();
  if (!s.ok()) spdlog::error("audit append failed: {}", s.ToString());
}

void AuditWriter::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void AuditWriter::Loop() {
  for (;;) {
    std::vector<vault::v1::AuditEntry> batch;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopped and drained
      batch.swap(queue_);
    }
    const absl::Time taken = absl::Now();
    for (size_t i = 0; i < batch.size(); i += 1000) {
      const size_t n = std::min<size_t>(1000, batch.size() - i);
      absl::Status s = log_->AppendMany(absl::MakeSpan(batch.data() + i, n)).status();
      if (!s.ok()) spdlog::error("audit append of {} agent entries failed: {}", n, s.ToString());
    }
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    mu_.AwaitWithDeadline(absl::Condition(&stopping), taken + batch_interval_);
  }
}

}  // namespace vault::agent
