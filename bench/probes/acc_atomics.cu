// Measurement probe (not built by CMake): what the L2 accumulator of the megakernel (isa.h mid_acc_word) costs when
// many SMs add to the same words -- the question before a fused MLP adds its 132 split-K down partials of n_embd per
// layer to one accumulator instead of publishing them. One block per SM; each "layer" every block contributes to a
// fresh target vector of P words (as the megakernel's per-layer buffers), L layers per launch, the launch timed with
// events (median of 20 after warm-up), per layer reported:
//   store:  each block stores its own partial of P floats (no reduction: what a reader would then have to sum);
//   acc8:   the P words split over 8 groups of blocks, each word receiving 8 adds (the mid residual's O projection);
//   accAll: every block adds a whole partial: each word receives one add per block (the fused MLP's down partials);
//   f32All: as accAll with red.add.f32 (order-dependent sums: for scale only).
// Measured (H200, session 26, bench/RESULTS.md session 25 call 6): µs per layer at P = 2048 store 0.70, acc8 0.78,
// accAll 1.43, f32All 1.08 -- every SM adding to every word costs ~0.65 µs per layer more than the mid residual's
// pattern at 1B's n_embd, ~1.2 at 8B's.
// Build here, run on the GPU machine:
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++20 -DMK_HAVE_CUDA=1 -Iinclude -Isrc bench/probes/acc_atomics.cu -o acc_atomics
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "megakernel/device/poll.cuh"  // red_acc: the megakernel's own contribution

#define CK(x)                                                                    \
  do {                                                                           \
    cudaError_t e = (x);                                                         \
    if (e != cudaSuccess) {                                                      \
      std::printf("CUDA %s at line %d\n", cudaGetErrorString(e), __LINE__);      \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

using u64 = unsigned long long;
using mk::megakernel::device::red_acc;
enum Mode { STORE, ACC8, ACC_ALL, F32_ALL };

__global__ void contribute(Mode mode, u64* words, float* floats, int P, int L) {
  const int b = blockIdx.x, nb = gridDim.x;
  for (int l = 0; l < L; ++l) {
    u64* w = words + size_t(l) * P;
    if (mode == STORE) {
      float* out = floats + (size_t(l) * nb + b) * P;
      for (int i = threadIdx.x; i < P; i += blockDim.x) out[i] = float(i + b);
    } else if (mode == ACC8) {  // block b of group g = b % 8 adds rows [r0, r1) of the group's slice split
      const int g = b % 8, k = b / 8, per = (nb + 7 - g) / 8;  // blocks in group g
      const int r0 = int(int64_t(P) * k / per), r1 = int(int64_t(P) * (k + 1) / per);
      for (int i = r0 + threadIdx.x; i < r1; i += blockDim.x) red_acc(w + i, float(i));
    } else if (mode == ACC_ALL) {
      for (int i = threadIdx.x; i < P; i += blockDim.x) red_acc(w + i, float(i));
    } else {
      float* f = floats + size_t(l) * P;
      for (int i = threadIdx.x; i < P; i += blockDim.x) atomicAdd(f + i, float(i));
    }
  }
}

int main() {
  int n_sm = 0;
  CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
  const int L = 16;
  const char* names[] = {"store", "acc8", "accAll", "f32All"};
  std::printf("%d blocks of 512 threads, %d layers per launch; us per layer (median of 20 launches)\n", n_sm, L);
  std::printf("%8s %10s %10s %10s %10s\n", "P", names[0], names[1], names[2], names[3]);
  for (int P : {1024, 2048, 4096}) {
    u64* words = nullptr;
    float* floats = nullptr;
    CK(cudaMalloc(&words, size_t(L) * P * 8));
    CK(cudaMalloc(&floats, size_t(L) * n_sm * P * 4));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::printf("%8d", P);
    for (Mode m : {STORE, ACC8, ACC_ALL, F32_ALL}) {
      std::vector<float> t;
      for (int r = 0; r < 25; ++r) {
        CK(cudaMemset(words, 0, size_t(L) * P * 8));
        CK(cudaEventRecord(e0));
        contribute<<<n_sm, 512>>>(m, words, floats, P, L);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms = 0.f;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 5) t.push_back(ms * 1e3f / float(L));
      }
      std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
      std::printf(" %10.3f", double(t[t.size() / 2]));
    }
    std::printf("\n");
    CK(cudaFree(words));
    CK(cudaFree(floats));
  }
  return 0;
}
