// The decode step's MLP in one kernel (see matvec.h, matvec_mlp): h = silu(Wg n) * (Wu n) with n = rmsnorm(x), then
// x += Wd h. Both are the split-K block program (matvec_splitk.cuh), run one after the other by a grid whose blocks
// are all resident at once (blocks = SMs x the kernel's occupancy); between them a grid barrier takes the place of a
// kernel boundary. Each block issues its first down weights before it waits there, so they stream while the last
// blocks finish h; across a kernel boundary the down kernel's blocks could only start as the gate/up blocks retired.
// The barrier is a monotonic 64-bit arrival counter, never reset: the arrivals of one launch are all counted before
// any arrival of the next launch on the same counter (the next launch starts after this one's dependents, whose
// PDL waits follow this kernel's completion), so launch k waits for the count k * gridDim.x.
#include <algorithm>
#include <map>

#include "cuda/ops/matvec_splitk.cuh"

namespace mk::cuda {
namespace {

using namespace splitk;
constexpr int MINB = 3;  // the register-capped build (see matvec.cu)
constexpr int SLICE_COLS = mv_ks(MINB) * 32 * 8;

// Grid barrier, first half: the block's stores of h are issued (bar.sync) and made visible at gpu scope (thread 0's
// fence, cumulative over the block as in cooperative_groups' grid sync) before its arrival. Done before the block
// issues its down weights: a fence also waits for the thread's outstanding loads. Returns the count to wait for.
__device__ __forceinline__ unsigned long long grid_arrive(unsigned long long* count) {
  __syncthreads();
  unsigned long long target = 0;
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long n = gridDim.x;
    target = (atomicAdd(count, 1ull) / n + 1) * n;
  }
  return target;  // meaningful in thread 0 only
}

// Second half: thread 0 waits for every block's arrival; its acquire then orders the block's reads of h (they
// bypass L1: __ldcg) through the bar.sync.
__device__ __forceinline__ void grid_wait(const unsigned long long* count, unsigned long long target) {
  if (threadIdx.x == 0) {
    unsigned long long v;
    do {
      asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(count) : "memory");
    } while (v < target);
  }
  __syncthreads();
}

template <class XT>
__global__ void __launch_bounds__(MAX_THREADS, MINB) mlp_kernel(Params gate_up, Params down, unsigned long long* barrier) {
  extern __shared__ float s_x[];  // [max(n_embd, n_ff)]: x (* norm weight), then h
  block_matvec<MatvecOut::SWIGLU, true, false, float, MINB>(gate_up, s_x, [] { pdl_wait(); }, [] {});
  const unsigned long long target = grid_arrive(barrier);  // its bar.sync also frees s_x for the restaging below
  block_matvec<MatvecOut::ADD, false, false, XT, MINB>(down, s_x, [&] { grid_wait(barrier, target); },
                                                       [] { pdl_launch_dependents(); });
}

int slices(int n_cols) { return (n_cols + SLICE_COLS - 1) / SLICE_COLS; }

Params params(const MatvecArgs& a) {
  Params p{a, slices(a.n_cols), 1, (a.n_rows + 1) / 2, 0, 1};
  p.P = 8 / p.S;  // 8 warps in both phases
  p.n_groups = (p.n_pairs + p.P - 1) / p.P;
  return p;
}

template <class XT>
void launch_mlp(const Stream& s, const MatvecArgs& gate_up, const MatvecArgs& down, unsigned long long* barrier) {
  auto kernel = mlp_kernel<XT>;
  const size_t smem = size_t(std::max(gate_up.n_cols, down.n_cols)) * sizeof(float);
  static bool attr = [&] {  // the largest smem any supported shape asks for (8 slices of 1024 floats)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 8 * SLICE_COLS * 4));
    return true;
  }();
  (void)attr;
  static std::map<size_t, int> occupancy;  // smem -> resident blocks per SM
  auto it = occupancy.find(smem);
  if (it == occupancy.end()) {
    int n = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, MAX_THREADS, smem));
    MK_CHECK(n >= 1);
    it = occupancy.emplace(smem, n).first;
  }
  // Every block resident at once (the barrier waits for all of them): the previous kernel's blocks retire
  // independently of ours, and the next kernel launches only after every block has passed the barrier.
  launch(s, dim3(unsigned(device_sm_count() * it->second)), dim3(MAX_THREADS), smem, kernel, params(gate_up),
         params(down), barrier);
}

}  // namespace

bool matvec_mlp_supported(const MatvecArgs& gate_up, const MatvecArgs& down) {
  auto fills_block = [](int n_cols) { const int s = slices(n_cols); return s == 1 || s == 2 || s == 4 || s == 8; };
  const bool h_f32 = gate_up.out && down.x == gate_up.out && !gate_up.out_bf16;
  const bool h_bf16 = gate_up.out_bf16 && down.x_bf16 == gate_up.out_bf16 && !gate_up.out;
  return gate_up.mode == MatvecOut::SWIGLU && gate_up.norm_w && gate_up.x && !gate_up.argmax &&
         down.mode == MatvecOut::ADD && !down.norm_w && !down.argmax && down.out == gate_up.x &&
         down.n_rows == gate_up.n_cols && down.n_cols * 2 == gate_up.n_rows && (h_f32 || h_bf16) &&
         gate_up.n_cols % 8 == 0 && down.n_cols % 8 == 0 && fills_block(gate_up.n_cols) && fills_block(down.n_cols) &&
         reinterpret_cast<uintptr_t>(gate_up.w) % 16 == 0 && reinterpret_cast<uintptr_t>(down.w) % 16 == 0;
}

void matvec_mlp(const Stream& s, const MatvecArgs& gate_up, const MatvecArgs& down, unsigned long long* barrier) {
  MK_CHECK(barrier && matvec_mlp_supported(gate_up, down));
  if (down.x_bf16) launch_mlp<bf16>(s, gate_up, down, barrier);
  else launch_mlp<float>(s, gate_up, down, barrier);
}

}  // namespace mk::cuda
