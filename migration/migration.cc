// Migration's setup and teardown, and what both sides of a hop share.
#include "migration/migration.h"

#include <utility>

#include "migration/internal/transfer.h"

namespace vault::migration {
namespace {

// How often held processes past their time are ended.
constexpr absl::Duration kHousekeeping = absl::Seconds(1);

}  // namespace

std::vector<storage::ColumnFamilySpec> Migration::ColumnFamilies() {
  return {storage::ColumnFamilySpec{kTransfers}, storage::ColumnFamilySpec{kLocations}};
}

absl::StatusOr<std::unique_ptr<Migration>> Migration::Start(MigrationOptions options,
                                                            MigrationDeps deps) {
  if (deps.db == nullptr || deps.cas == nullptr || deps.vault_key == nullptr ||
      deps.port == nullptr) {
    return absl::InvalidArgumentError("migration needs a database, a CAS, a vault key and a port");
  }
  std::unique_ptr<Migration> m(new Migration(std::move(options), deps));
  m->housekeeper_ = std::thread([raw = m.get()] {
    while (!raw->stop_.WaitForNotificationWithTimeout(kHousekeeping)) {
      raw->ExpirePrestarts(/*all=*/false);
    }
  });
  return m;
}

Migration::Migration(MigrationOptions options, MigrationDeps deps)
    : options_(std::move(options)),
      deps_(deps),
      hops_(std::make_unique<common::Executor>(4, 1 << 16)),
      held_(std::make_unique<common::Executor>(2, 1 << 10)),
      outbox_(std::make_unique<common::RetryQueue>(absl::Milliseconds(200), absl::Seconds(10))) {}

Migration::~Migration() { Stop(); }

void Migration::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_.Notify();
  if (housekeeper_.joinable()) housekeeper_.join();
  ExpirePrestarts(/*all=*/true);  // arrivals not committed: the source learns it from Status
  // Hops the agents asked for: each leaves at its next retry (stopping_), settled at restart.
  hops_->Shutdown();
  std::vector<std::thread> resolvers;
  {
    absl::MutexLock lock(&mu_);
    resolvers.swap(resolvers_);
  }
  for (std::thread& t : resolvers) t.join();  // each leaves at its next retry: stopping_
  held_->Shutdown();
  outbox_->Stop();
}

std::optional<capability::PublicKey> Migration::MemberKey(absl::string_view name) const {
  for (const vault::v1::Member& m : options_.members) {
    if (m.name() == name) {
      absl::StatusOr<capability::PublicKey> k = capability::PublicKey::FromText(m.public_key());
      if (k.ok()) return *k;
    }
  }
  return std::nullopt;
}

}  // namespace vault::migration
