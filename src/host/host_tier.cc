#include "kvtier/host_tier.h"

#include <string>
#include <unordered_set>
#include <utility>

#include "host/host_arena.h"

namespace kvtier {

using host_internal::Arena;
using host_internal::KeySet;
using host_internal::Owner;

namespace {

KeySet ToSet(std::span<const BlockKey> keys) { return KeySet(keys.begin(), keys.end()); }

}  // namespace

// ---- HostTierOptions ----

Status HostTierOptions::Validate() const {
  if (shared_budget == nullptr && capacity_bytes == 0) {
    return Status::InvalidArgument(
        "HostTierOptions.capacity_bytes must be > 0 when no shared_budget is given");
  }
  if (eviction_policy != HostEvictionPolicy::kLru && eviction_policy != HostEvictionPolicy::kReuse) {
    return Status::InvalidArgument("HostTierOptions.eviction_policy is not a known policy (" +
                                   std::to_string(static_cast<int>(eviction_policy)) + ")");
  }
  return Status::Ok();
}

// ---- SharedHostBudget ----

SharedHostBudget::SharedHostBudget(std::shared_ptr<Arena> arena) : arena_(std::move(arena)) {}

Result<std::shared_ptr<SharedHostBudget>> SharedHostBudget::Create(uint64_t capacity_bytes,
                                                                   HostEvictionPolicy policy) {
  if (capacity_bytes == 0) {
    return Status::InvalidArgument("SharedHostBudget capacity_bytes must be > 0");
  }
  if (policy != HostEvictionPolicy::kLru && policy != HostEvictionPolicy::kReuse) {
    return Status::InvalidArgument("SharedHostBudget: unknown eviction policy " +
                                   std::to_string(static_cast<int>(policy)));
  }
  return std::shared_ptr<SharedHostBudget>(
      new SharedHostBudget(std::make_shared<Arena>(capacity_bytes, policy)));
}

uint64_t SharedHostBudget::capacity_bytes() const { return arena_->capacity(); }

uint64_t SharedHostBudget::ShrinkTo(uint64_t target_bytes,
                                    std::span<const BlockKey> protected_keys) {
  return arena_->ShrinkTo(nullptr, target_bytes, ToSet(protected_keys));
}

uint64_t SharedHostBudget::ClearAll() { return arena_->Clear(nullptr); }

HostBudgetStats SharedHostBudget::Stats() const { return arena_->Stats(); }

// ---- HostTier::Reservation ----

HostTier::Reservation::Reservation(Reservation&& other) noexcept
    : arena_(std::move(other.arena_)),
      owner_(std::move(other.owner_)),
      bytes_(std::exchange(other.bytes_, 0)) {}

HostTier::Reservation& HostTier::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    Release();
    arena_ = std::move(other.arena_);
    owner_ = std::move(other.owner_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

HostTier::Reservation::~Reservation() { Release(); }

void HostTier::Reservation::Release() {
  if (bytes_ != 0) arena_->Release(owner_.get(), bytes_);
  bytes_ = 0;
  arena_.reset();
  owner_.reset();
}

// ---- HostTier ----

HostTier::HostTier(std::shared_ptr<SharedHostBudget> budget, std::shared_ptr<Owner> owner)
    : budget_(std::move(budget)), owner_(std::move(owner)) {
  arena().AddOwner(owner_.get());
}

HostTier::~HostTier() { arena().CloseOwner(owner_.get()); }

Arena& HostTier::arena() const { return *budget_->arena_; }

Result<std::unique_ptr<HostTier>> HostTier::Create(HostTierOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  std::shared_ptr<SharedHostBudget> budget = std::move(options.shared_budget);
  if (budget == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(
        budget, SharedHostBudget::Create(options.capacity_bytes, options.eviction_policy));
  }
  auto owner = std::make_shared<Owner>();
  owner->sink = std::move(options.eviction_sink);
  owner->listener = std::move(options.key_listener);
  return std::unique_ptr<HostTier>(new HostTier(std::move(budget), std::move(owner)));
}

Status HostTier::Put(const BlockKey& key, SharedBlock block, HostEntryState state,
                     Reservation* reservation) {
  if (block == nullptr) return Status::InvalidArgument("HostTier::Put: block is null");
  uint64_t* reserved = nullptr;
  if (reservation != nullptr && !reservation->empty()) {
    if (reservation->owner_ != owner_) {
      return Status::InvalidArgument("HostTier::Put: the reservation belongs to another tier");
    }
    reserved = &reservation->bytes_;
  }
  KVTIER_RETURN_IF_ERROR(
      arena().Put(owner_.get(), key, std::move(block), state == HostEntryState::kDirty, reserved));
  // The arena zeroed the reserved bytes; drop the empty reservation's refs.
  if (reserved != nullptr) reservation->Release();
  return Status::Ok();
}

Result<SharedBlock> HostTier::Get(const BlockKey& key, std::span<std::byte> dst) {
  return arena().Get(owner_.get(), key, dst);
}

std::vector<Result<SharedBlock>> HostTier::GetMany(std::span<const BlockKey> keys,
                                                   std::span<const std::span<std::byte>> dsts) {
  if (!dsts.empty() && dsts.size() != keys.size()) {
    return std::vector<Result<SharedBlock>>(
        keys.size(),
        Status::InvalidArgument("HostTier::GetMany: " + std::to_string(keys.size()) + " keys but " +
                                std::to_string(dsts.size()) + " buffers"));
  }
  return arena().GetMany(owner_.get(), keys, dsts);
}

bool HostTier::Contains(const BlockKey& key) const { return arena().Contains(owner_.get(), key); }

bool HostTier::MarkClean(const BlockKey& key) { return arena().MarkClean(owner_.get(), key); }

bool HostTier::Erase(const BlockKey& key) { return arena().Erase(owner_.get(), key); }

uint64_t HostTier::ShrinkTo(uint64_t target_bytes, std::span<const BlockKey> protected_keys) {
  return arena().ShrinkTo(owner_.get(), target_bytes, ToSet(protected_keys));
}

uint64_t HostTier::Clear() { return arena().Clear(owner_.get()); }

Result<HostTier::Reservation> HostTier::Reserve(uint64_t bytes) {
  if (bytes == 0) return Status::InvalidArgument("HostTier::Reserve: bytes must be > 0");
  KVTIER_RETURN_IF_ERROR(arena().Reserve(owner_.get(), bytes));
  Reservation r;
  r.arena_ = budget_->arena_;
  r.owner_ = owner_;
  r.bytes_ = bytes;
  return r;
}

std::vector<HostTier::DirtyEntry> HostTier::DirtyEntries(size_t limit) const {
  return arena().DirtyEntries(owner_.get(), limit);
}

std::vector<BlockKey> HostTier::Keys() const { return arena().Keys(owner_.get()); }

HostTierStats HostTier::Stats() const { return arena().OwnerStats(owner_.get()); }

}  // namespace kvtier
