#include "kvtier/block_pool.h"

#include <unistd.h>

#include <new>
#include <string>

#include "pool/dense_pool.h"
#include "pool/paged_pool.h"
#include "pool/pool_geometry.h"

namespace kvtier {

std::string_view PoolModeName(PoolMode mode) {
  switch (mode) {
    case PoolMode::kPaged:
      return "paged";
    case PoolMode::kDense:
      return "dense";
  }
  return "unknown";
}

std::string_view EvictionPolicyName(EvictionPolicy p) {
  switch (p) {
    case EvictionPolicy::kNone:
      return "none";
    case EvictionPolicy::kLru:
      return "lru";
    case EvictionPolicy::kFifo:
      return "fifo";
    case EvictionPolicy::kPriority:
      return "priority";
  }
  return "unknown";
}

std::string_view StorePolicyName(StorePolicy p) {
  switch (p) {
    case StorePolicy::kOnFill:
      return "on_fill";
    case StorePolicy::kOnSequenceEnd:
      return "on_sequence_end";
    case StorePolicy::kNever:
      return "never";
  }
  return "unknown";
}

namespace {

uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;  // unknown: no bound
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

// A paged pool's slots and bookkeeping must fit in RAM, checked before any
// of it is allocated (the bookkeeping is sized by total_blocks at once).
Status CheckPagedSize(const PoolOptions& o, const pool_internal::PoolGeometry& geo) {
  const uint64_t n = o.total_blocks;
  const uint64_t stride = (geo.block_bytes() + pool_internal::SlotArena::kSlotAlignment - 1) /
                          pool_internal::SlotArena::kSlotAlignment *
                          pool_internal::SlotArena::kSlotAlignment;
  const bool host = o.memory == nullptr || o.memory->kind() == MemoryKind::kHost;
  const uint64_t per_slot = pool_internal::PagedPool::kBookkeepingBytesPerSlot +
                            pool_internal::BlockAllocator::kBytesPerSlot + (host ? stride : 0);
  const uint64_t ram = PhysicalMemoryBytes();
  if (per_slot != 0 && n > ram / per_slot) {
    return Status::InvalidArgument(
        "total_blocks " + std::to_string(n) + " would need " +
        (n > UINT64_MAX / per_slot ? std::string("more than 2^64") : std::to_string(n * per_slot)) +
        " bytes of RAM (" + std::to_string(per_slot) + " per slot), more than this machine's " +
        std::to_string(ram));
  }
  return Status::Ok();
}

}  // namespace

Status PoolOptions::Validate() const {
  if (eviction > EvictionPolicy::kPriority) {
    return Status::InvalidArgument("eviction: unknown value");
  }
  if (store_policy > StorePolicy::kNever) {
    return Status::InvalidArgument("store_policy: unknown value");
  }
  KVTIER_ASSIGN_OR_RETURN(pool_internal::PoolGeometry geo,
                          pool_internal::PoolGeometry::Create(layout));
  if (key_namespace.model_id.empty()) {
    return Status::InvalidArgument("key_namespace.model_id must not be empty");
  }
  if (!key_namespace.layout_signature.empty() &&
      key_namespace.layout_signature != layout.Signature()) {
    return Status::InvalidArgument(
        "key_namespace.layout_signature differs from layout.Signature()");
  }
  if (key_namespace.block_tokens != 0 && key_namespace.block_tokens != layout.block_tokens) {
    return Status::InvalidArgument(
        "key_namespace.block_tokens " + std::to_string(key_namespace.block_tokens) +
        " differs from layout.block_tokens " + std::to_string(layout.block_tokens));
  }
  if (total_blocks == 0) return Status::InvalidArgument("total_blocks must be > 0");
  KVTIER_RETURN_IF_ERROR(CheckPagedSize(*this, geo));
  if (chunk_blocks == 0) return Status::InvalidArgument("chunk_blocks must be > 0");
  return Status::Ok();
}

Status DensePoolOptions::Validate() const {
  KVTIER_ASSIGN_OR_RETURN(pool_internal::PoolGeometry geo,
                          pool_internal::PoolGeometry::Create(layout));
  for (uint32_t l = 0; l < geo.layers(); ++l) {
    if (geo.kind(l) == pool_internal::LayerKind::kRecurrent) {
      return Status::InvalidArgument(
          "layout.layers[" + std::to_string(l) +
          "] is recurrent: the dense pool keeps one live state per layer and no per-block "
          "snapshots, so it could not roll the layer back; use BlockPool");
    }
  }
  if (dense_initial_tokens == 0) {
    return Status::InvalidArgument("dense_initial_tokens must be > 0");
  }
  if (dense_max_tokens < dense_initial_tokens) {
    return Status::InvalidArgument("dense_max_tokens must be >= dense_initial_tokens");
  }
  return Status::Ok();
}

namespace {

Result<std::unique_ptr<BlockPool>> CreatePool(PoolOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate().WithContext("pool options"));
  KVTIER_ASSIGN_OR_RETURN(pool_internal::PoolGeometry geo,
                          pool_internal::PoolGeometry::Create(options.layout));
  NamespaceOptions ns = options.key_namespace;
  ns.layout_signature = options.layout.Signature();
  ns.block_tokens = options.layout.block_tokens;
  KVTIER_ASSIGN_OR_RETURN(KeyChain chain, KeyChain::Create(ns));
  const bool prefault = options.prefault_slots;
  auto pool = std::make_unique<pool_internal::PagedPool>(std::move(options), std::move(geo),
                                                         std::move(chain));
  if (prefault) KVTIER_RETURN_IF_ERROR(pool->PrefaultSlots().WithContext("prefault_slots"));
  return std::unique_ptr<BlockPool>(std::move(pool));
}

Result<std::unique_ptr<DensePool>> CreateDensePool(DensePoolOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate().WithContext("pool options"));
  KVTIER_ASSIGN_OR_RETURN(pool_internal::PoolGeometry geo,
                          pool_internal::PoolGeometry::Create(options.layout));
  return std::unique_ptr<DensePool>(
      std::make_unique<pool_internal::DensePoolImpl>(std::move(options), std::move(geo)));
}

}  // namespace

Result<std::unique_ptr<BlockPool>> BlockPool::Create(PoolOptions options) {
  try {
    return CreatePool(std::move(options));
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("pool options: out of memory creating the pool");
  }
}

Result<std::unique_ptr<DensePool>> DensePool::Create(DensePoolOptions options) {
  try {
    return CreateDensePool(std::move(options));
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("pool options: out of memory creating the pool");
  }
}

}  // namespace kvtier
