// Fused short-context decode attention + O projection + residual add (see attn_oproj.h).
// Block (g, r), 256 threads: before the PDL wait each warp loads its first RPW rows of slice r (g's CH x 256
// columns of W_o) into registers. After it: thread p copies K and V of position p (kv head g) into shared memory
// (cp.async), scores s[h][p] = q_h . k_p for the group's HG q heads, softmax per head (warp h), O_h = sum_p P V
// (warp w over positions p = w mod 8, reduced across warps in a fixed order), rounded to bf16 like the unfused
// attention's output; then each warp's rows are dotted with it and the partial sums written.
#include <algorithm>

#include "cuda/attention/attn_common.cuh"
#include "cuda/common/device.cuh"
#include "cuda/ops/attn_oproj.h"

namespace mk::cuda {
namespace {

constexpr int NT = 256, NW = NT / 32;
constexpr int HG_MAX = 8;

// Shared memory: q [HG_MAX*D] f32, o [HG_MAX*D] f32, p [HG_MAX][max_len] f32, acc [NW][HG_MAX*D] f32,
// k and v [max_len][D] bf16.
size_t smem_bytes(int D, int max_len) {
  return size_t(HG_MAX * D * 2 + HG_MAX * max_len + NW * HG_MAX * D) * 4 + size_t(max_len) * D * 2 * 2;
}

template <int D, int CH>
__global__ void __launch_bounds__(NT, 1) attn_oproj_kernel(AttnOprojArgs a, int rows_per_block) {
  constexpr int RPW = 16 / CH;  // rows per warp per batch: 16 uint4 of weights per lane
  extern __shared__ __align__(16) float smem[];
  float* s_q = smem;
  float* s_o = s_q + HG_MAX * D;
  float* s_p = s_o + HG_MAX * D;
  float* s_acc = s_p + HG_MAX * a.max_len;
  bf16* s_k = reinterpret_cast<bf16*>(s_acc + NW * HG_MAX * D);
  bf16* s_v = s_k + size_t(a.max_len) * D;
  __shared__ float s_l[HG_MAX];
  __shared__ int s_last;

  const int g = blockIdx.x, r = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n_kv = a.kv.n_kv_head, HG = a.n_head / n_kv, chunks = HG * D / 8, ld_w = a.n_head * D;
  const int row0 = r * rows_per_block, row1 = min(row0 + rows_per_block, a.n_embd);
  const bf16* wg = a.wo + size_t(g) * HG * D;

  uint4 w[RPW][CH];
  auto load_batch = [&](int b0) {
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int row = b0 + warp * RPW + i;
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int ch = c * 32 + lane;
        w[i][c] = row < row1 && ch < chunks ? ld_stream(wg + size_t(row) * ld_w + ch * 8) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  load_batch(row0);  // weights do not depend on earlier kernels

  pdl_wait();
  pdl_launch_dependents();  // after our wait: the next kernel's early reads may rely on everything before us
  const int L = min(*a.seq_len, a.max_len);
  // K and V of position tid into shared memory (never read before this step's writes: after the wait).
  if (tid < L) {
    const int blk = a.block_table[tid / a.kv.kv_block_size];
    const size_t off = ((size_t(blk) * a.kv.kv_block_size + tid % a.kv.kv_block_size) * n_kv + g) * D;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
      attn::cp_async16(s_k + size_t(tid) * D + c * 8, a.kv.k + off + c * 8, 16);
      attn::cp_async16(s_v + size_t(tid) * D + c * 8, a.kv.v + off + c * 8, 16);
    }
  }
  attn::cp_async_commit();
  for (int i = tid; i < HG * D; i += NT) s_q[i] = __bfloat162float(a.q[size_t(g) * HG * D + i]);
  attn::cp_async_wait<0>();
  __syncthreads();

  // Scores (log2 units): thread tid = position; chunk order rotated by position so a warp's 16-byte reads of
  // its 32 rows spread over the banks.
  const float scale_log2 = attn::LOG2E / sqrtf(float(D));
  if (tid < L) {
    float s[HG_MAX] = {};
#pragma unroll
    for (int c0 = 0; c0 < D / 8; ++c0) {
      const int c = (c0 + tid) % (D / 8);
      float k[8];
      unpack8(*reinterpret_cast<const uint4*>(s_k + size_t(tid) * D + c * 8), k);
#pragma unroll
      for (int h = 0; h < HG_MAX; ++h)
        if (h < HG)
#pragma unroll
          for (int e = 0; e < 8; ++e) s[h] += s_q[h * D + c * 8 + e] * k[e];
    }
#pragma unroll
    for (int h = 0; h < HG_MAX; ++h)
      if (h < HG) s_p[h * a.max_len + tid] = s[h] * scale_log2;
  }
  __syncthreads();
  if (warp < HG) {  // softmax of head `warp`: probabilities in place, their sum in s_l
    float* sp = s_p + warp * a.max_len;
    float m = -INFINITY;
    for (int p = lane; p < L; p += 32) m = fmaxf(m, sp[p]);
    m = warp_max(m);
    float l = 0.f;
    for (int p = lane; p < L; p += 32) {
      const float e = exp2f(sp[p] - m);
      sp[p] = e;
      l += e;
    }
    l = warp_sum(l);
    if (lane == 0) s_l[warp] = l;
  }
  __syncthreads();
  // P V: warp over positions warp, warp + NW, ...; lane over D / 32 dims.
  constexpr int DL = D / 32;
  float acc[HG_MAX][DL] = {};
  for (int p = warp; p < L; p += NW) {
    float v[DL];
#pragma unroll
    for (int j = 0; j < DL; ++j) v[j] = __bfloat162float(s_v[size_t(p) * D + lane * DL + j]);
#pragma unroll
    for (int h = 0; h < HG_MAX; ++h)
      if (h < HG) {
        const float pr = s_p[h * a.max_len + p];
#pragma unroll
        for (int j = 0; j < DL; ++j) acc[h][j] += pr * v[j];
      }
  }
#pragma unroll
  for (int h = 0; h < HG_MAX; ++h)
    if (h < HG)
#pragma unroll
      for (int j = 0; j < DL; ++j) s_acc[warp * HG_MAX * D + h * D + lane * DL + j] = acc[h][j];
  __syncthreads();
  for (int i = tid; i < HG * D; i += NT) {
    float o = 0.f;
    for (int k = 0; k < NW; ++k) o += s_acc[k * HG_MAX * D + i];
    s_o[i] = __bfloat162float(__float2bfloat16(o / s_l[i / D]));  // bf16, as the unfused attention stores it
  }
  __syncthreads();

  // Partial O rows of group g: y[row] = W_o[row, g's columns] . o.
  for (int b0 = row0; b0 < row1; b0 += NW * RPW) {
    if (b0 != row0) load_batch(b0);
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int row = b0 + warp * RPW + i;
      float y = 0.f;
#pragma unroll
      for (int c = 0; c < CH; ++c) {
        const int ch = c * 32 + lane;
        if (ch < chunks) {
          float f[8];
          unpack8(w[i][c], f);
#pragma unroll
          for (int e = 0; e < 8; ++e) y += f[e] * s_o[ch * 8 + e];
        }
      }
      y = warp_sum(y);
      if (lane == 0 && row < row1) a.partial[size_t(g) * a.n_embd + row] = y;
    }
  }
  // The last block of slice r adds the groups' partials in group order (threadfence reduction).
  __syncthreads();
  if (tid == 0) {
    __threadfence();
    s_last = atomicAdd(a.counters + r, 1) == n_kv - 1;
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  for (int row = row0 + tid; row < row1; row += NT) {
    float y = 0.f;
    for (int k = 0; k < n_kv; ++k) y += __ldcg(a.partial + size_t(k) * a.n_embd + row);
    a.x[row] += y;
  }
  if (tid == 0) a.counters[r] = 0;  // for the next call (which starts after this kernel has finished)
}

int sm_count() {
  static int n = [] {
    int dev = 0, v = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

template <int D, int CH>
void launch_d(const Stream& s, const AttnOprojArgs& a) {
  auto kernel = attn_oproj_kernel<D, CH>;
  const size_t smem = smem_bytes(D, a.max_len);
  static bool attr = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem_bytes(D, ATTN_OPROJ_MAX_LEN))));
    return true;
  }();
  (void)attr;
  const int n_kv = a.kv.n_kv_head, slices = attn_oproj_slices(n_kv);
  const int rows_per_block = (a.n_embd + slices - 1) / slices;
  launch(s, dim3(n_kv, slices), dim3(NT), smem, kernel, a, rows_per_block);
}

template <int D>
void launch_ch(const Stream& s, const AttnOprojArgs& a) {
  switch ((a.n_head / a.kv.n_kv_head * D / 8 + 31) / 32) {
    case 1: launch_d<D, 1>(s, a); break;
    case 2: launch_d<D, 2>(s, a); break;
    default: launch_d<D, 4>(s, a); break;  // 3 or 4 chunks per lane (guarded)
  }
}

}  // namespace

bool attn_oproj_supported(int n_head, int n_kv_head, int head_dim) {
  return (head_dim == 64 || head_dim == 128) && n_kv_head > 0 && n_head % n_kv_head == 0 &&
         n_head / n_kv_head <= HG_MAX;
}

int attn_oproj_slices(int n_kv_head) { return std::max(1, sm_count() / std::max(1, n_kv_head)); }

void attn_oproj(const Stream& s, const AttnOprojArgs& a) {
  MK_CHECK(attn_oproj_supported(a.n_head, a.kv.n_kv_head, a.kv.head_dim));
  MK_CHECK(a.max_len > 0 && a.max_len <= ATTN_OPROJ_MAX_LEN && a.q && a.wo && a.x && a.partial && a.counters);
  if (a.kv.head_dim == 64) launch_ch<64>(s, a);
  else launch_ch<128>(s, a);
}

}  // namespace mk::cuda
