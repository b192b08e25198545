// The KV cache of one sequence on the device, in the paged layout of cuda/attention/attention.h:
//   per layer  k, v  [kv_n_blocks, kv_block_size, n_kv_head, head_dim] bf16
//   block_table      [kv_n_blocks] int32 = 0, 1, 2, ... (one sequence owns every block, in order)
// The megakernel reuses this layout.
#pragma once
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "cuda/attention/attention.h"
#include "megakernel/config.h"

namespace mk::cuda {

constexpr int KV_BLOCK_SIZE = 64;  // positions per block (multiple of KV_BLOCK_ALIGN)

class DeviceKvCache {
 public:
  DeviceKvCache() = default;
  ~DeviceKvCache();
  DeviceKvCache(const DeviceKvCache&) = delete;
  DeviceKvCache& operator=(const DeviceKvCache&) = delete;

  // Bytes needed for max_context positions of this configuration.
  static size_t bytes_for(const ModelConfig& c, int max_context);
  // Allocates (fails with a message when GPU memory is short) and zero-fills.
  Status init(const ModelConfig& c, int max_context);
  // Makes this a non-owning view of `owner`'s cache (same memory and block table; `owner` must outlive it): two
  // backends writing one cache, e.g. the megakernel's decode and the layered prefill.
  void alias(const DeviceKvCache& owner);

  const KvCacheView& layer(int i) const { return layers_[size_t(i)]; }
  BlockTableView block_table() const { return {block_table_, n_blocks_}; }
  const int32_t* block_table_data() const { return block_table_; }
  int capacity() const { return n_blocks_ * KV_BLOCK_SIZE; }  // positions
  // Fills every K/V element with random bf16 values (benchmarks of long contexts without a long prefill).
  void fill_random(uint64_t seed, cudaStream_t stream);

 private:
  void* arena_ = nullptr;
  size_t bytes_ = 0;
  int32_t* block_table_ = nullptr;
  int n_blocks_ = 0;
  std::vector<KvCacheView> layers_;
};

}  // namespace mk::cuda
