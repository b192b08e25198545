// ops/attention_decode (split-KV decode attention with the split reduction in the same kernel) against
// cpu::attention on random data: GQA groups 1..8, head dims 64 and 128, contexts from 1 to several thousand,
// split counts from 1 to 64, shuffled paged blocks, poisoned outputs, and back-to-back launches that reuse the
// arrival counters (PDL on, eager and in a CUDA graph). Output is bf16: relative error bound 1e-2.
// Run: test_gpu --gtest_filter='Ops.DecodeAttention*'
#include <algorithm>
#include <memory>
#include <numeric>
#include <tuple>

#include "cpu/ops.h"
#include "cuda/ops/attention_decode.h"
#include "gpu_test_util.h"

namespace mk::gpu_test {
namespace {

using bf16 = __nv_bfloat16;

struct AttnShape {
  int n_head, n_kv, D, kv_len;
  int n_blocks() const { return (kv_len + 63) / 64 + 1; }
};

// Reference for q (bf16-rounded floats) over the first kv_len positions of the paged cache.
std::vector<float> reference(const AttnShape& c, const std::vector<float>& q, const std::vector<float>& kf,
                             const std::vector<float>& vf, const std::vector<int32_t>& table) {
  std::vector<float> k, v;  // contiguous [kv_len, n_kv, D]
  for (int p = 0; p < c.kv_len; ++p)
    for (int h = 0; h < c.n_kv; ++h) {
      const size_t row = ((size_t(table[size_t(p / 64)]) * 64 + p % 64) * c.n_kv + h) * c.D;
      k.insert(k.end(), kf.begin() + row, kf.begin() + row + c.D);
      v.insert(v.end(), vf.begin() + row, vf.begin() + row + c.D);
    }
  std::vector<float> want(q.size());
  cpu::attention(want.data(), q.data(), k.data(), v.data(), c.kv_len, c.n_head, c.n_kv, c.D);
  return want;
}

TEST(Ops, DecodeAttentionMatchesCpuAttention) {
  uint32_t seed = 1;
  for (auto [n_head, n_kv, D, kv_len] : {std::tuple{32, 8, 64, 33}, {4, 4, 64, 1}, {8, 1, 128, 129}, {6, 2, 64, 700},
                                         {16, 8, 128, 4096}, {12, 2, 128, 3001}, {7, 7, 64, 64}, {24, 8, 64, 65}}) {
    const AttnShape c{n_head, n_kv, D, kv_len};
    std::mt19937 rng(seed++);
    std::vector<int32_t> table(static_cast<size_t>(c.n_blocks()));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const size_t cache = size_t(c.n_blocks()) * 64 * n_kv * D;
    Bf16Data kc = to_bf16(randn(cache, rng)), vc = to_bf16(randn(cache, rng));
    DeviceArray<uint16_t> dk(kc.bits), dv(vc.bits), out(size_t(n_head) * D);
    DeviceArray<int32_t> dtable(table), dlen(std::vector<int32_t>{kv_len});
    const int capacity = c.n_blocks() * 64;
    for (int n_split : {cuda::decode_attention_splits(n_kv, capacity), 1, 3, 64}) {
      SCOPED_TRACE(cat(n_head, "/", n_kv, " D ", D, " kv_len ", kv_len, " splits ", n_split));
      DeviceArray<uint8_t> ws(cuda::decode_attention_workspace_bytes(n_head, n_kv, D, n_split));
      CUDA_CHECK(cudaMemset(ws.p, 0, ws.n));
      for (int rep = 0; rep < 2; ++rep) {  // the second launch reuses the arrival counters the first reset
        Bf16Data q = to_bf16(randn(size_t(n_head) * D, rng));
        DeviceArray<uint16_t> dq(q.bits);
        out.poison();
        cuda::DecodeAttentionArgs a;
        a.out = reinterpret_cast<bf16*>(out.p);
        a.q = reinterpret_cast<const bf16*>(dq.p);
        a.kv = {reinterpret_cast<bf16*>(dk.p), reinterpret_cast<bf16*>(dv.p), c.n_blocks(), 64, n_kv, D};
        a.block_table = dtable.p;
        a.seq_len = dlen.p;
        a.max_positions = capacity;
        a.n_head = n_head;
        a.n_split = n_split;
        a.workspace = ws.p;
        cuda::decode_attention(cuda::Stream(nullptr, true), a);
        CUDA_CHECK_LAUNCH();
        const double err = rel_err(bf16_bits_to_f32(out.download()), reference(c, q.f, kc.f, vc.f, table));
        EXPECT_LT(err, 1e-2) << "rep " << rep << " rel err " << err;
      }
    }
  }
}

// Several launches in one PDL chain over different layers' caches (as in the decode graph): each must see its
// own inputs and leave the counters ready for the next.
TEST(Ops, DecodeAttentionChainedLaunchesInAGraph) {
  const AttnShape c{16, 4, 128, 1500};
  std::mt19937 rng(5);
  std::vector<int32_t> table(static_cast<size_t>(c.n_blocks()));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const size_t cache = size_t(c.n_blocks()) * 64 * c.n_kv * c.D;
  const int layers = 4, n_split = cuda::decode_attention_splits(c.n_kv, c.n_blocks() * 64);
  std::vector<Bf16Data> kc, vc, q;
  std::vector<std::unique_ptr<DeviceArray<uint16_t>>> dk, dv, dq, dout;
  for (int l = 0; l < layers; ++l) {
    kc.push_back(to_bf16(randn(cache, rng)));
    vc.push_back(to_bf16(randn(cache, rng)));
    q.push_back(to_bf16(randn(size_t(c.n_head) * c.D, rng)));
    dk.push_back(std::make_unique<DeviceArray<uint16_t>>(kc.back().bits));
    dv.push_back(std::make_unique<DeviceArray<uint16_t>>(vc.back().bits));
    dq.push_back(std::make_unique<DeviceArray<uint16_t>>(q.back().bits));
    dout.push_back(std::make_unique<DeviceArray<uint16_t>>(size_t(c.n_head) * c.D));
  }
  DeviceArray<int32_t> dtable(table), dlen(std::vector<int32_t>{c.kv_len});
  DeviceArray<uint8_t> ws(cuda::decode_attention_workspace_bytes(c.n_head, c.n_kv, c.D, n_split));
  CUDA_CHECK(cudaMemset(ws.p, 0, ws.n));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  for (int l = 0; l < layers; ++l) {
    cuda::DecodeAttentionArgs a;
    a.out = reinterpret_cast<bf16*>(dout[size_t(l)]->p);
    a.q = reinterpret_cast<const bf16*>(dq[size_t(l)]->p);
    a.kv = {reinterpret_cast<bf16*>(dk[size_t(l)]->p), reinterpret_cast<bf16*>(dv[size_t(l)]->p), c.n_blocks(), 64,
            c.n_kv, c.D};
    a.block_table = dtable.p;
    a.seq_len = dlen.p;
    a.max_positions = c.n_blocks() * 64;
    a.n_head = c.n_head;
    a.n_split = n_split;
    a.workspace = ws.p;
    cuda::decode_attention(cuda::Stream(s, true), a);
  }
  CUDA_CHECK(cudaStreamEndCapture(s, &g));
  CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
  for (int rep = 0; rep < 3; ++rep) {
    for (auto& o : dout) o->poison();
    CUDA_CHECK(cudaGraphLaunch(ge, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    for (int l = 0; l < layers; ++l) {
      const double err = rel_err(bf16_bits_to_f32(dout[size_t(l)]->download()),
                                 reference(c, q[size_t(l)].f, kc[size_t(l)].f, vc[size_t(l)].f, table));
      EXPECT_LT(err, 1e-2) << "rep " << rep << " layer " << l << " rel err " << err;
    }
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

}  // namespace
}  // namespace mk::gpu_test
