// Decode matvec, split-K (see matvec.h; the kernel is in matvec_splitk.cuh, its shape and launch here).
// Work item = (row pair, slice of 2048 columns). A block holds P pairs x S slices (S = ceil(n_cols / 2048));
// warp w works on pair w / S, slice w % S, with its 16 16-byte weight loads per
// lane issued before the kernel waits on the producer of x (PDL). The S partial dot products of a pair are summed
// in a fixed order in shared memory (deterministic). Blocks grid-stride over groups of P pairs, so that all SMs read
// one neighbourhood of W at a time (equal contiguous ranges per block measured 5-18% slower on the H200, RESULTS.md
// "balanced pair ranges").
// Pipelined (default; MK_MATVEC_RING=0 turns it off): the loads of a warp's next group are issued half by half as
// soon as the matching half of the current group is consumed, so every warp keeps 8-16 loads in flight all the
// time instead of draining to zero between groups (all warps would otherwise drain together: a DRAM bubble).
// x is staged once per block in shared memory (times the RMSNorm weight, which is staged before the wait); the
// RMS scale is applied to the finished dot product (y = inv_rms * W (x * g)).
// Default build (MK_MATVEC_LB=3): fitted to 3 blocks of 256 threads per SM (<= 80 registers, no spills), so with
// 8 (not 16) loads per lane, 1024-column slices (S = ceil(n_cols / 1024)); the register file is then not full and
// the next PDL kernel's blocks can become resident early. MK_MATVEC_LB=1: the 16-load, 2048-column build above.
// ROPE_QKV_NORM (Qwen3's per-head q/k RMSNorm before RoPE): the norm needs a whole head's sum of squares, so the grid
// is launched in clusters of C blocks, one cluster per head of q | k | v; block rank k works on the head's groups
// k, k + C, ... (G of them, G * P pairs) and keeps its finished pairs in shared memory; after a cluster barrier each
// block adds up the C blocks' partial sums of squares in rank order (the same bits in every block, deterministic),
// then normalises, rotates and stores its own pairs. The weight streaming is the same as in the other modes.
// H200, Qwen3 decode (bench/RESULTS.md, "Qwen3 q/k norm fused"): 8 blocks per head beat 4 and 16 (16 x 4 pairs).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>

#include "cuda/common/sm_count.h"
#include "cuda/ops/matvec_splitk.cuh"

namespace mk::cuda {
namespace {

using namespace splitk;

// Tuning knobs read once from the environment (for measurements; defaults are the measured best).
int env_int(const char* name, int dflt) {
  static std::map<std::string, int> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const char* e = std::getenv(name);
  const int v = e && *e ? std::atoi(e) : dflt;
  cache.emplace(name, v);
  return v;
}

// ROPE_QKV_NORM: one cluster of C blocks per head (see matvec_splitk_kernel); p.S and the widest p.P are set.
void launch_heads(const Stream& s, void (*kernel)(Params), Params& p) {
  const MatvecRope& r = p.a.rope;
  const int half = r.head_dim / 2;  // pairs per head
  // Measurement knobs: MK_MATVEC_HEAD_PAIRS caps P (narrower blocks), MK_MATVEC_HEAD_CLUSTER the blocks per head
  // (16: non-portable clusters).
  const int max_p = std::max(1, env_int("MK_MATVEC_HEAD_PAIRS", 8));
  while (p.P > 1 && (half % p.P || p.P > max_p)) p.P /= 2;
  // Blocks per head: up to 8 (MK_MATVEC_HEAD_CLUSTER), a power of two dividing the head's groups, and enough that a
  // block keeps at most MAX_PAIRS_PER_BLOCK pairs.
  const int want = std::max(1, env_int("MK_MATVEC_HEAD_CLUSTER", MAX_HEAD_CLUSTER));
  const int max_c = want > MAX_HEAD_CLUSTER ? 2 * MAX_HEAD_CLUSTER : MAX_HEAD_CLUSTER;
  p.C = 1;
  while (2 * p.C <= max_c && (half / p.P) % (2 * p.C) == 0 &&
         (2 * p.C <= want || half / (p.P * p.C) > MAX_PAIRS_PER_BLOCK / p.P))
    p.C *= 2;
  p.G = half / (p.P * p.C);
  MK_CHECK(p.C * p.G * p.P == half && p.G * p.P <= MAX_PAIRS_PER_BLOCK);
  p.n_groups = (p.n_pairs + p.P - 1) / p.P;
  const int n_heads = r.n_head + 2 * r.n_kv_head;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(n_heads * p.C));
  cfg.blockDim = dim3(unsigned(32 * p.S * p.P));
  cfg.dynamicSmemBytes = size_t(p.a.n_cols) * sizeof(float);
  cfg.stream = s.stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = s.pdl ? 1 : 0;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = unsigned(p.C);
  attr[1].val.clusterDim.y = attr[1].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

// Widest rows of the register-capped build: 8 warps of 1024-column slices.
constexpr int MAX_COLS_LB3 = (MAX_THREADS / 32) * mv_ks(3) * 32 * 8;

int& loop_form() {
  static int v = env_int("MK_MATVEC_TWO_WAITS", -1);
  return v;
}

// The group loop's form (matvec_splitk_kernel TWO_WAITS). The one-wait loop pipelines a block's next group better:
// PDL graph of one kernel, H200: 8192x2048 82 -> 86%, 2048x8192 77 -> 82%, 16384x2048 85 -> 91%; decode (session 16,
// ABBA against the two-wait loop everywhere): 1B -3.5%, Qwen3-1.7B -3.0%, Qwen3-0.6B -0.9%, 8B -0.1%, 1B ctx 4096*
// +0.4%. Two waits stay in the 8B step's unconstrained build (rows wider than 8192 columns: the down projection, +1.3%
// per step with one wait) and in the SwiGLU projection before it (+2.0%), although both stream faster alone. Not
// explained; the guess: the two-wait loop's blocks end staggered, which lets in earlier the next kernel's blocks --
// and the unconstrained build needs two of a 3-block kernel's blocks' room (bench/RESULTS.md, sessions 15-16).
bool two_waits(const MatvecArgs& a, bool lb3) {
  if (loop_form() >= 0) return loop_form() == 1;
  return !lb3 || (a.mode == MatvecOut::SWIGLU && a.n_rows / 2 > MAX_COLS_LB3);
}

template <MatvecOut MODE, bool NORM, bool ARGMAX, class XT, int MINB>
void launch_splitk(const Stream& s, const MatvecArgs& a) {
  auto one = matvec_splitk_kernel<MODE, NORM, ARGMAX, XT, MINB, false>;
  auto two = matvec_splitk_kernel<MODE, NORM, ARGMAX, XT, MINB, true>;
  static bool attr = [&] {
    for (auto kernel : {one, two}) {
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
      if constexpr (MODE == MatvecOut::ROPE_QKV_NORM)  // clusters of 16 blocks when asked (MK_MATVEC_HEAD_CLUSTER)
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    }
    return true;
  }();
  (void)attr;
  const int sms = sm_count();
  const int n_chunks = a.n_cols / 8;
  constexpr int slice = mv_ks(MINB) * 32;
  Params p{a, (n_chunks + slice - 1) / slice, 1, (a.n_rows + 1) / 2, 0, env_int("MK_MATVEC_RING", 1) != 0};
  MK_CHECK(p.S <= MAX_THREADS / 32);
  p.P = std::max(1, 8 / p.S);
  if constexpr (MODE == MatvecOut::ROPE_QKV_NORM) {
    launch_heads(s, two_waits(a, MINB == 3) ? two : one, p);
  } else {
    while (p.P > 1 && (p.n_pairs + p.P - 1) / p.P < 2 * sms) p.P /= 2;
    p.n_groups = (p.n_pairs + p.P - 1) / p.P;
    const int threads = 32 * p.S * p.P;
    const size_t smem = size_t(a.n_cols) * sizeof(float);
    static std::map<std::pair<int, size_t>, int> occupancy;  // (threads, smem) -> resident blocks per SM
    auto it = occupancy.find({threads, smem});
    if (it == occupancy.end()) {
      int n = 0;
      // Of the two-wait form: the forms' registers differ by at most 4 in the 3-block build (the same occupancy), and
      // the unconstrained build runs one wait only when set_matvec_loop_form asks (a grid-stride loop either way).
      CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, two, threads, smem));
      it = occupancy.emplace(std::make_pair(threads, smem), std::max(1, n)).first;
    }
    // MK_MATVEC_BPS caps resident blocks per SM (fewer: room for the next kernel's blocks to start under PDL).
    const int bps = env_int("MK_MATVEC_BPS", 0);
    const int blocks = std::min(p.n_groups, sms * (bps > 0 ? std::min(bps, it->second) : it->second));
    launch(s, dim3(blocks), dim3(threads), smem, two_waits(a, MINB == 3) ? two : one, p);
  }
}

template <MatvecOut MODE, bool NORM, bool ARGMAX>
void dispatch_x(const Stream& s, const MatvecArgs& a) {
  // Default: the register-capped build (MINB 3, see matvec_splitk_kernel; H200 decode 0.881 vs 0.901 ms/token);
  // MK_MATVEC_LB=1: the unconstrained one. Rows wider than 8 of its 1024-column slices use the unconstrained one.
  static const bool lb3 = env_int("MK_MATVEC_LB", 3) == 3;
  if (lb3 && a.n_cols <= MAX_COLS_LB3) {
    if (a.x) launch_splitk<MODE, NORM, ARGMAX, float, 3>(s, a);
    else launch_splitk<MODE, NORM, ARGMAX, bf16, 3>(s, a);
  } else {
    if (a.x) launch_splitk<MODE, NORM, ARGMAX, float, 1>(s, a);
    else launch_splitk<MODE, NORM, ARGMAX, bf16, 1>(s, a);
  }
}

// 0 splitk (default), 1 rowpair.
int kernel_from_name(const char* e) {
  if (e && std::strcmp(e, "rowpair") == 0) return 1;
  return 0;
}
int& selected_kernel() {
  static int v = kernel_from_name(std::getenv("MK_MATVEC"));
  return v;
}

std::atomic<unsigned long long>& launch_counter(MatvecOut mode) {
  static std::atomic<unsigned long long> n[int(MatvecOut::ROPE_QKV_NORM) + 1];
  return n[int(mode)];
}

}  // namespace

void matvec_splitk(const Stream& s, const MatvecArgs& a) {
  dispatch_matvec(a, [&]<MatvecOut MODE, bool NORM, bool ARGMAX>() { dispatch_x<MODE, NORM, ARGMAX>(s, a); });
}

const char* matvec_kernel_name() {
  static const char* names[] = {"splitk", "rowpair"};
  return names[selected_kernel()];
}

void set_matvec_kernel(const char* name) { selected_kernel() = kernel_from_name(name); }

void set_matvec_loop_form(int form) { loop_form() = form; }

unsigned long long matvec_launch_count(MatvecOut mode) { return launch_counter(mode).load(); }

void matvec(const Stream& s, const MatvecArgs& a) {
  const bool rope = a.mode == MatvecOut::ROPE_QKV || a.mode == MatvecOut::ROPE_QKV_NORM;
  MK_CHECK(a.w && (a.out || (a.out_bf16 && a.mode == MatvecOut::SWIGLU)) && (a.x != nullptr) != (a.x_bf16 != nullptr));
  MK_CHECK(a.n_rows > 0 && a.n_cols > 0 && a.n_cols % 8 == 0);
  MK_CHECK((a.mode != MatvecOut::SWIGLU && !rope) || a.n_rows % 2 == 0);
  MK_CHECK(reinterpret_cast<uintptr_t>(a.w) % 16 == 0 && reinterpret_cast<uintptr_t>(a.x_bf16) % 16 == 0);
  MK_CHECK(!a.argmax || a.mode == MatvecOut::STORE);
  if (rope) {
    const MatvecRope& r = a.rope;
    MK_CHECK(r.inv_freq && r.pos && r.q_out && r.kv.k && r.kv.v && r.block_table && r.head_dim % 2 == 0);
    MK_CHECK(a.n_rows == (r.n_head + 2 * r.n_kv_head) * r.head_dim);
  }
  if (a.mode == MatvecOut::ROPE_QKV_NORM)  // a block keeps at most MAX_PAIRS_PER_BLOCK pairs of its head
    MK_CHECK(a.rope.q_norm && a.rope.k_norm && a.rope.head_dim <= 2 * MAX_PAIRS_PER_BLOCK * MAX_HEAD_CLUSTER);
  const bool too_wide = a.n_cols > (MAX_THREADS / 32) * SLICE * 8;
  MK_CHECK(!(too_wide && rope));
  launch_counter(a.mode) += 1;
  // The ROPE_QKV modes: split-K only. (A third kernel, a TMA ring, measured slower in decode on the H200 and was
  // removed: bench/RESULTS.md, layered rounds 3-5 and session 10.)
  if ((selected_kernel() == 1 || too_wide) && !rope) matvec_rowpair(s, a);
  else matvec_splitk(s, a);
}

}  // namespace mk::cuda
