// Device KV cache of one sequence (see kv_cache.h).
#include "cuda/backend/kv_cache.h"

#include <numeric>

#include "cuda/common/cuda_check.h"

namespace mk::cuda {
namespace {

__global__ void fill_random_kernel(uint32_t* p, size_t n_words, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t x = (seed + i) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    // Two bf16 in [-1, 1): sign, exponent 126 or below, random mantissa.
    uint32_t lo = 0x3c00u | (uint32_t(x) & 0x83ffu), hi = 0x3c00u | (uint32_t(x >> 16) & 0x83ffu);
    p[i] = lo | (hi << 16);
  }
}

}  // namespace

DeviceKvCache::~DeviceKvCache() {
  if (arena_) cudaFree(arena_);
}

size_t DeviceKvCache::bytes_for(const ModelConfig& c, int max_context) {
  size_t n_blocks = (size_t(max_context) + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE;
  size_t per_pool = n_blocks * KV_BLOCK_SIZE * size_t(c.kv_dim()) * 2;
  return 2 * per_pool * size_t(c.n_layer) + n_blocks * 4 + 256;
}

void DeviceKvCache::alias(const DeviceKvCache& owner) {
  MK_CHECK(!arena_);
  bytes_ = owner.bytes_;
  block_table_ = owner.block_table_;
  n_blocks_ = owner.n_blocks_;
  layers_ = owner.layers_;
}

Status DeviceKvCache::init(const ModelConfig& c, int max_context) {
  MK_CHECK(!arena_ && max_context > 0);
  n_blocks_ = (max_context + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE;
  bytes_ = bytes_for(c, max_context);
  size_t free_b = 0, total_b = 0;
  MK_TRY(cuda_status(cudaMemGetInfo(&free_b, &total_b), "querying GPU memory"));
  if (bytes_ > free_b)
    return make_error("the KV cache for ", max_context, " positions needs ", bytes_ >> 20, " MiB of GPU memory but only ",
                      free_b >> 20, " MiB are free; lower the context length");
  MK_TRY(cuda_status(cudaMalloc(&arena_, bytes_), "allocating the KV cache"));
  MK_TRY(cuda_status(cudaMemset(arena_, 0, bytes_), "clearing the KV cache"));
  size_t per_pool = size_t(n_blocks_) * KV_BLOCK_SIZE * size_t(c.kv_dim());  // elements
  bf16* base = static_cast<bf16*>(arena_);
  layers_.resize(size_t(c.n_layer));
  for (int i = 0; i < c.n_layer; ++i) {
    KvCacheView& v = layers_[size_t(i)];
    v.k = base + (2 * size_t(i)) * per_pool;
    v.v = base + (2 * size_t(i) + 1) * per_pool;
    v.kv_n_blocks = n_blocks_;
    v.kv_block_size = KV_BLOCK_SIZE;
    v.n_kv_head = c.n_kv_head;
    v.head_dim = c.head_dim;
  }
  block_table_ = reinterpret_cast<int32_t*>(base + 2 * size_t(c.n_layer) * per_pool);
  std::vector<int32_t> bt(static_cast<size_t>(n_blocks_));
  std::iota(bt.begin(), bt.end(), 0);
  return cuda_status(cudaMemcpy(block_table_, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice),
                     "uploading the block table");
}

void DeviceKvCache::fill_random(uint64_t seed, cudaStream_t stream) {
  MK_CHECK(arena_);  // the owner of the cache, not an alias
  size_t words = (reinterpret_cast<char*>(block_table_) - static_cast<char*>(arena_)) / 4;
  fill_random_kernel<<<1024, 256, 0, stream>>>(static_cast<uint32_t*>(arena_), words, seed);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mk::cuda
