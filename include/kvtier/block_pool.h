// BlockPool and DensePool: the engine's working KV memory, per sequence.
//
// BlockPool (paged) keeps K/V in slots of one block each, shares full blocks
// between sequences by BlockKey, loads and offloads them through a
// BlockBackingStore and evicts inactive sequences. DensePool keeps each
// sequence in growable per-layer tensors: no slots, sharing, tiers or
// eviction. What both do (sequences, appends, commits, packed views) is
// KvPool. docs/pool.md explains the modes, tensor shapes, positions and loads.
//
// Ownership: a pool owns its slots, tensors and views' bytes; the store and
// Env in its options are the caller's and must outlive it. Thread safety:
// every method may be called from any thread; calls for one sequence are
// serialized by the caller, except WaitLoaded and WaitTokensLoaded. No
// BlockBackingStore call runs under a pool's lock.
#ifndef KVTIER_BLOCK_POOL_H_
#define KVTIER_BLOCK_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/block_buffer.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "kvtier/slot_memory.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"

namespace kvtier {

class Env;

// Receives block `index` of a BlockBackingStore::Load: the block file of
// keys[index], or null for a miss.
using BlockArrivalCallback = std::function<void(size_t index, SharedBlock block)>;

// The lower tiers as the pool sees them (TieredBackingStore over a
// TieredCache; tests use MapBackingStore). Blocks cross as block files
// (block_file.h). Implementations are thread-safe: the pool calls them from
// the engine's threads, never under its lock.
class BlockBackingStore {
 public:
  virtual ~BlockBackingStore() = default;
  // How many of `keys`, from the first, the store holds now. A hint: a later
  // Load may still miss.
  virtual size_t Match(std::span<const BlockKey> keys) = 0;
  // Stores the block file `block` under `key`. The store may keep `block`.
  virtual Status Store(const BlockKey& key, SharedBlock block) = 0;
  // Starts loading `keys` and returns. Calls on_block(i, file) exactly once
  // for each i in [0, keys.size()): before Load returns or later, from any
  // thread, several at once, in any order. `file` is keys[i]'s block file,
  // verified by the store where its bytes entered the process (structure,
  // key, checksums: DESIGN.md §4), or null for a miss. The pool checks only
  // the header and copies the data section into its slot inside the
  // callback, so those copies run on the store's threads while later
  // blocks are still being read. The store must outlive the calls.
  virtual void Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) = 0;
  // Like Load, but block i need only hold verified bytes for the tensors
  // masks[i] selects (block_file.h TensorMask; empty = all, and masks may be
  // empty = all for every key): the file's header and offsets are whole, the
  // bytes of unselected tensors unspecified. The pool copies only the
  // selected tensors. The default reads whole blocks, a valid superset.
  virtual void LoadTensors(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                           BlockArrivalCallback on_block) {
    (void)masks;
    Load(keys, std::move(on_block));
  }
};

// Which pool a PoolStats describes.
enum class PoolMode : uint8_t { kPaged, kDense };

enum class EvictionPolicy : uint8_t {
  kNone,      // never evict: out of slots is kResourceExhausted
  kLru,       // least recently used inactive sequence first
  kFifo,      // earliest allocated inactive sequence first
  kPriority,  // lowest SetPriority() first, then least recently used
};

// When full blocks are stored to the BlockBackingStore. Evicted sequences are
// always offloaded through it (when there is one), whatever the policy.
enum class StorePolicy : uint8_t {
  kOnFill,         // as soon as a block fills (Advance)
  kOnSequenceEnd,  // when the sequence is removed
  kNever,
};

std::string_view PoolModeName(PoolMode mode);           // "paged", "dense"
std::string_view EvictionPolicyName(EvictionPolicy p);  // "none", "lru", "fifo", "priority"
std::string_view StorePolicyName(StorePolicy p);        // "on_fill", "on_sequence_end", "never"

// A BlockPool's options.
struct PoolOptions {
  // What a block holds. Required. Full-attention, sliding-window
  // (LayerSpec::window) and recurrent (LayerSpec::IsRecurrent) layers, a
  // per-token state's token axis anywhere (docs/pool.md, "Layer kinds").
  ModelLayout layout;
  // Key namespace. model_id is required; layout_signature and block_tokens
  // may be left empty / 0 (filled from `layout`), else must equal it.
  NamespaceOptions key_namespace;

  // Number of slots (blocks). Validate refuses a number whose slots (host
  // slot memory) and bookkeeping would not fit in this machine's RAM, so
  // Create fails before allocating anything. Default 2048.
  uint32_t total_blocks = 2048;
  // Slots allocated together when storage grows. Default 64.
  uint32_t chunk_blocks = 64;
  // Which inactive sequence to evict when slots run out. Default LRU.
  EvictionPolicy eviction = EvictionPolicy::kLru;
  // When full blocks go to `store`. Default on fill.
  StorePolicy store_policy = StorePolicy::kOnFill;
  // Keep freed full blocks in the prefix index until their slot is needed
  // (they count as free). Off: a block leaves the index when its last user
  // does. Default on.
  bool retain_freed_blocks = true;
  // The lower tiers; not owned, must outlive the pool. Null: no tiers
  // (evicted sequences are then kept whole in host memory).
  BlockBackingStore* store = nullptr;
  // Where slots live. Null: host RAM.
  std::shared_ptr<SlotMemory> memory;
  // Allocate every slot in Create and write host memory once, so that no
  // Allocate, load or append pays page faults (an engine's KV memory,
  // sized at startup). Off: chunks of chunk_blocks slots are allocated as
  // slots are first used. Default off.
  bool prefault_slots = false;
  // Clock and threads. Null: Env::Default(). Not owned.
  Env* env = nullptr;

  // OK, or kInvalidArgument naming the bad field.
  Status Validate() const;
};

// A DensePool's options.
struct DensePoolOptions {
  // What a sequence holds. Required; full-attention and sliding-window
  // layers (no recurrent layer: the dense pool keeps no per-block
  // snapshots, so could not roll one back; docs/pool.md, "Layer kinds").
  // No blocks are formed.
  ModelLayout layout;
  // Tokens each sequence's tensors hold at first. Default 256.
  uint32_t dense_initial_tokens = 256;
  // Most tokens one sequence may hold. Default 131072.
  uint32_t dense_max_tokens = 131072;
  // Finished sequences' tensors kept for reuse. Default 32.
  uint32_t dense_free_list_cap = 32;

  // OK, or kInvalidArgument naming the bad field.
  Status Validate() const;
};

// PoolStats's numbers, declared once: X(name, kind, help), kind kCounter
// (only grows) or kGauge (a current value). The struct follows from it, and
// so can anything that lists or renders the numbers.
#define KVTIER_POOL_STATS(X)                                                         \
  X(bytes_used, kGauge, "bytes of slots (dense: tensors) in use")                    \
  X(bytes_capacity, kGauge, "bytes of slot memory (dense: tensors) allocated")       \
  X(blocks_total, kGauge, "slots of the pool (dense: 0)")                            \
  X(blocks_free, kGauge, "free slots, blocks_cached included")                       \
  X(blocks_cached, kGauge, "free slots still holding an indexed block")              \
  X(sequences, kGauge, "live sequences")                                             \
  X(evicted_blocks, kCounter, "block references released by eviction")               \
  X(evicted_sequences, kCounter, "sequences evicted")                                \
  X(packed_layers, kGauge, "cached packed views")                                    \
  X(offloaded_blocks, kGauge, "blocks of evicted sequences awaiting restore")        \
  X(offloaded_sequences, kGauge, "evicted sequences awaiting restore")               \
  X(restored_sequences, kCounter, "evicted sequences restored by Allocate")          \
  X(prefix_hit_blocks_pool, kCounter, "blocks reused from the pool by Allocate")     \
  X(prefix_hit_blocks_tier, kCounter, "blocks loaded into the pool by Allocate")     \
  X(copy_on_write_blocks, kCounter, "shared blocks copied before a write")           \
  X(stored_blocks, kCounter, "blocks stored to the lower tiers")                     \
  X(stored_bytes, kCounter, "block file bytes stored to the lower tiers")            \
  X(store_errors, kCounter, "blocks not stored: copy, encoding or the store failed") \
  X(loaded_blocks, kCounter, "blocks loaded from the lower tiers")                   \
  X(loaded_bytes, kCounter, "block file bytes loaded from the lower tiers")          \
  X(load_misses, kCounter, "blocks promised by Match but missing or invalid on Load")     \
  X(load_tensor_bytes, kCounter, "bytes of the tensors loads asked the lower tiers for")  \
  X(window_freed_blocks, kCounter, "block references released: out of every sliding window")

struct PoolStats {
  PoolMode mode = PoolMode::kPaged;
  KVTIER_POOL_STATS(KVTIER_STATS_FIELD)
  KVTIER_STATS_FOR_EACH(KVTIER_POOL_STATS)
};

// What AllocateAsync reports.
struct AllocateInfo {
  // Tokens reused: at most tokens.size() - 1 (at least one token is left to
  // compute). Final when no load is pending; WaitLoaded() gives the final
  // value otherwise (it can only shrink, if a load fails).
  size_t matched_tokens = 0;
  size_t pool_blocks = 0;     // full blocks shared from the pool
  size_t tier_blocks = 0;     // full blocks being loaded from the lower tiers
  bool restored = false;      // an evicted sequence with this id was restored
  bool load_pending = false;  // call WaitLoaded before using the sequence
};

// One state tensor of a packed view, contiguous, host memory.
struct PackedTensor {
  DType dtype = DType::kF16;
  // The layout's per-block shape with `length` on the token axis (for
  // [A, block_tokens, B]: {A, length, B}); a recurrent state's own shape.
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;  // exactly the shape's elements
};

// A layer's K/V for tokens [0, length), contiguous per state, or (from
// RecurrentState) a recurrent layer's state after tokens [0, length). The
// view owns its bytes (`storage`, possibly larger than the data); when the
// last shared_ptr to it goes, the pool reuses them for a later view.
struct PackedLayerView {
  uint32_t layer = 0;
  size_t length = 0;
  std::vector<PackedTensor> states;
  std::vector<BlockBuffer> storage;  // behind states[k].data
};

// Where a state tensor of a layer lies in a slot (for paged-attention
// kernels): bytes [offset, offset + bytes) of each slot, shape [A, T, B].
struct SlotTensorGeometry {
  uint64_t offset = 0;
  uint64_t bytes = 0;
  DType dtype = DType::kF16;
  uint64_t a = 0, b = 0;
};

// What both pools do. Appends write K/V at positions >= Length(seq); Advance
// commits them (docs/pool.md, "Positions"). All byte spans are raw elements
// of the state's dtype.
class KvPool {
 public:
  virtual ~KvPool() = default;

  // Sequences.
  //
  // Makes sequence `seq` hold the longest reusable prefix of `tokens`, capped
  // to leave at least one token to compute, and returns its length. A live
  // id is rolled back to its common prefix with `tokens`; what a new id
  // reuses depends on the pool (BlockPool: shared and lower-tier blocks;
  // DensePool: nothing).
  virtual Result<size_t> Allocate(uint64_t seq, std::span<const uint32_t> tokens) = 0;

  // K/V appends at positions >= Length(seq); storage is taken as needed
  // (kResourceExhausted when there is none).
  // One token, all heads: per state, A × B elements ([A, B]).
  virtual Status AppendToken(uint64_t seq, uint32_t layer, size_t pos,
                             std::span<const std::span<const std::byte>> states) = 0;
  // One head, consecutive positions from `pos`: per state, [n, B] elements.
  virtual Status AppendHeadRange(uint64_t seq, uint32_t layer, uint32_t head, size_t pos,
                                 std::span<const std::span<const std::byte>> states) = 0;
  // All heads, `count` positions from `pos`: per state, [A, count, B].
  virtual Status AppendLayer(uint64_t seq, uint32_t layer, size_t pos, size_t count,
                             std::span<const std::span<const std::byte>> states) = 0;
  // A recurrent layer's state (LayerSpec::IsRecurrent: SSM, linear
  // attention, convolution window) after the first `pos` tokens, pos >
  // Length(seq): per state, exactly its bytes. Appends take no recurrent
  // layer. The pool keeps the latest state per layer (the live state); a
  // `pos` that ends a block (pos % block_tokens == 0) is also that block's
  // snapshot, which the block keeps, is stored with it and is what a
  // restore of a prefix ending there resumes from (docs/pool.md,
  // "Recurrent layers"). kInvalidArgument for a layer that is not
  // recurrent, wrong sizes or pos <= Length(seq).
  virtual Status SetRecurrentState(uint64_t seq, uint32_t layer, size_t pos,
                                   std::span<const std::span<const std::byte>> states) = 0;
  // Commits the next tokens.size() positions with these token ids.
  // REQUIRES every per-token layer to have K/V written for them and every
  // recurrent layer its state after the new length and after each block
  // boundary on the way (else kFailedPrecondition naming what is missing).
  virtual Status Advance(uint64_t seq, std::span<const uint32_t> tokens) = 0;
  // Shortens `seq` to `length` tokens. kInvalidArgument if length >
  // Length(seq); kFailedPrecondition if the pool no longer holds what that
  // length needs: a recurrent layer's state after `length` tokens (held only
  // at block boundaries with a snapshot, at 0 and at Length(seq)), or the
  // window of a sliding layer whose blocks were freed or not loaded.
  virtual Status Rollback(uint64_t seq, size_t length) = 0;
  // Removes a sequence (kNotFound if unknown).
  virtual Status Remove(uint64_t seq) = 0;

  // Views.
  virtual bool HasSequence(uint64_t seq) const = 0;
  virtual Result<size_t> Length(uint64_t seq) const = 0;
  // The layer's committed K/V, packed per state (PackedTensor::shape);
  // cached until the sequence's length changes. A sliding layer's tokens
  // outside what the pool holds (freed or not loaded, before its window)
  // read as zeros. kInvalidArgument for a recurrent layer.
  virtual Result<std::shared_ptr<const PackedLayerView>> PackedLayer(uint64_t seq,
                                                                     uint32_t layer) = 0;
  // A recurrent layer's latest state: the one SetRecurrentState wrote last
  // if it is past Length(seq), else the committed state after Length(seq)
  // tokens (`length` says which). kFailedPrecondition at length 0 with none
  // written; kInvalidArgument for a layer that is not recurrent.
  virtual Result<std::shared_ptr<const PackedLayerView>> RecurrentState(uint64_t seq,
                                                                        uint32_t layer) = 0;
  virtual PoolStats GetStats() const = 0;
};

// A BlockTable entry for a block the sequence no longer holds: it fell out
// of every sliding window (docs/pool.md, "Sliding windows").
inline constexpr uint32_t kFreedSlot = UINT32_MAX;

// The paged pool.
class BlockPool : public KvPool {
 public:
  // kInvalidArgument for bad options (see PoolOptions::Validate).
  static Result<std::unique_ptr<BlockPool>> Create(PoolOptions options);

  // Waits for pending loads. Nothing is stored on destruction.
  ~BlockPool() override = default;

  // Sequences. Allocate (KvPool) gives a new id shared pool blocks, then
  // lower-tier blocks, and restores an id evicted earlier first; it waits
  // for the loads.
  //
  // Allocate, returning while lower-tier blocks still load. Until WaitLoaded
  // returns, other calls on `seq` fail with kFailedPrecondition, except
  // BlockTable, SlotAddress and WaitTokensLoaded.
  virtual Result<AllocateInfo> AllocateAsync(uint64_t seq, std::span<const uint32_t> tokens) = 0;
  // Waits for `seq`'s loads; returns its length (kNotFound if unknown).
  virtual Result<size_t> WaitLoaded(uint64_t seq) = 0;
  // Waits until the first `tokens` tokens of `seq` are in its slots, or its
  // load has ended, and returns how many leading tokens are in place then:
  // at least min(tokens, the length WaitLoaded would return). Blocks land
  // in any order; the ready prefix grows as the gaps fill. 0 waits for
  // nothing (a progress probe). kNotFound if `seq` is unknown.
  virtual Result<size_t> WaitTokensLoaded(uint64_t seq, size_t tokens) = 0;

  // Appends (KvPool) take slots as needed, evicting if needed:
  // kResourceExhausted when nothing can be evicted. Advance keys, indexes and
  // (kOnFill) stores the blocks that fill. Rollback frees blocks past the
  // new length and drops their prefix entries where no one else holds them.
  // Remove also removes an evicted sequence (kOnSequenceEnd: stores its full
  // blocks).

  // Eviction. Only sequences not in the active set are evicted. Replaces the
  // active set (ids need not exist yet).
  virtual void SetActiveSequences(std::span<const uint64_t> seqs) = 0;
  // Lower priorities are evicted first under EvictionPolicy::kPriority.
  virtual Status SetPriority(uint64_t seq, uint8_t priority) = 0;
  // Evicts `seq` now, active or not (a scheduler preempting it): offloaded
  // exactly as under slot pressure.
  virtual Status Evict(uint64_t seq) = 0;
  // Ids evicted since the last call, in eviction order.
  virtual std::vector<uint64_t> DrainEvicted() = 0;

  // Slots.
  //
  // Slot ids of `seq`'s blocks, in order; kFreedSlot for a block that no
  // layer needs any more (out of every sliding window). A block restored
  // for a prefix holds only the tensors that prefix needs (docs/pool.md,
  // "Restores"). While a load is in flight, slots
  // past the prefix that WaitTokensLoaded reports hold no valid K/V yet, and
  // a load that falls short frees those past the blocks that landed: read
  // the table again after WaitLoaded.
  virtual Result<std::vector<uint32_t>> BlockTable(uint64_t seq) const = 0;
  // Address of a slot in use. Valid until the slot is freed.
  virtual Result<std::byte*> SlotAddress(uint32_t slot) const = 0;
  // Where state `state` of `layer` lies in every slot (all 0 if there is no
  // such state).
  virtual SlotTensorGeometry TensorGeometry(uint32_t layer, uint32_t state) const = 0;
  // Allocator introspection.
  virtual uint32_t RefCount(uint32_t slot) const = 0;
  virtual size_t FreeCount() const = 0;
};

// The dense pool. Allocate of a new id returns 0; Remove keeps the
// sequence's tensors for reuse (up to dense_free_list_cap). Stats have mode
// kDense and no block numbers.
class DensePool : public KvPool {
 public:
  // kInvalidArgument for bad options (see DensePoolOptions::Validate).
  static Result<std::unique_ptr<DensePool>> Create(DensePoolOptions options);

  ~DensePool() override = default;
};

}  // namespace kvtier

#endif  // KVTIER_BLOCK_POOL_H_
