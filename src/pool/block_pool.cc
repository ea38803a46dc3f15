#include "kvtier/block_pool.h"

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

Status PoolOptions::Validate() const {
  if (mode != PoolMode::kPaged && mode != PoolMode::kDense) {
    return Status::InvalidArgument("mode: unknown value");
  }
  if (eviction > EvictionPolicy::kPriority) {
    return Status::InvalidArgument("eviction: unknown value");
  }
  if (store_policy > StorePolicy::kNever) {
    return Status::InvalidArgument("store_policy: unknown value");
  }
  KVTIER_ASSIGN_OR_RETURN(pool_internal::PoolGeometry geo,
                          pool_internal::PoolGeometry::Create(layout));
  (void)geo;
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
  if (chunk_blocks == 0) return Status::InvalidArgument("chunk_blocks must be > 0");
  if (dense_initial_tokens == 0) {
    return Status::InvalidArgument("dense_initial_tokens must be > 0");
  }
  if (dense_max_tokens < dense_initial_tokens) {
    return Status::InvalidArgument("dense_max_tokens must be >= dense_initial_tokens");
  }
  return Status::Ok();
}

Result<std::unique_ptr<BlockPool>> BlockPool::Create(PoolOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate().WithContext("pool options"));
  KVTIER_ASSIGN_OR_RETURN(pool_internal::PoolGeometry geo,
                          pool_internal::PoolGeometry::Create(options.layout));
  if (options.mode == PoolMode::kDense) {
    return std::unique_ptr<BlockPool>(
        std::make_unique<pool_internal::DensePool>(std::move(options), std::move(geo)));
  }
  NamespaceOptions ns = options.key_namespace;
  ns.layout_signature = options.layout.Signature();
  ns.block_tokens = options.layout.block_tokens;
  KVTIER_ASSIGN_OR_RETURN(KeyChain chain, KeyChain::Create(ns));
  return std::unique_ptr<BlockPool>(std::make_unique<pool_internal::PagedPool>(
      std::move(options), std::move(geo), std::move(chain)));
}

}  // namespace kvtier
