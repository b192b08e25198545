// The weight upload through pinned staging buffers (src/cuda/backend/upload_staging.h) against the pageable copies
// (UploadOptions::n_staging = 0, the path the Backend tests compare with the CPU): the same device bytes, tensor by
// tensor, for Llama / Qwen2 / Qwen3, bf16 / f16 / f32 checkpoints (conversion), HF and rope-pair row order, and
// staging buffers so small that every tensor spans many buffers (1 to 3 rows per buffer, the gate/up pitch copies
// and the permuted head rows split across buffers), rows longer than a buffer (pageable fallback), and a vocabulary
// large enough that several host threads fill one buffer. Plus the layout itself, checked on the host for the
// interleaved gate/up rows and the rope-pair q rows.
// Run: test_gpu --gtest_filter='Upload*'
#include <cstring>

#include "cuda/backend/device_weights.h"
#include "gpu_test_util.h"
#include "megakernel/model.h"
#include "../megakernel/mk_test_util.h"

namespace mk::gpu_test {
namespace {

// n_embd 136: rows of 272 bytes, odd row counts per staging buffer.
ModelConfig upload_config(Family f, int D, int n_head, int n_kv, bool tied, int vocab) {
  return megakernel::test::tiny_config(f, n_head, n_kv, D, /*n_embd=*/136, /*n_ff=*/344, /*n_layer=*/2, vocab, tied);
}

struct Region {
  std::string name;
  const void* p;
  size_t bytes;
};

// Every tensor of d with its size in bytes (the padding between them is never written).
std::vector<Region> regions(const ModelConfig& c, const cuda::DeviceWeights& d) {
  const size_t E = c.n_embd, F = c.n_ff, Q = c.q_dim(), KV = c.kv_dim(), V = c.n_vocab, D = c.head_dim;
  std::vector<Region> r{{"tok_embd", d.tok_embd, V * E * 2}, {"lm_head", d.lm_head, V * E * 2},
                        {"final_norm", d.final_norm, E * 4}};
  for (size_t i = 0; i < d.layers.size(); ++i) {
    const cuda::DeviceLayer& l = d.layers[i];
    auto add = [&](const char* n, const void* p, size_t b) {
      if (p) r.push_back({cat("layer ", i, " ", n), p, b});
    };
    add("attn_norm", l.attn_norm, E * 4);
    add("wqkv", l.wqkv, (Q + 2 * KV) * E * 2);
    add("bqkv", l.bqkv, (Q + 2 * KV) * 4);
    add("q_norm", l.q_norm, D * 4);
    add("k_norm", l.k_norm, D * 4);
    add("wo", l.wo, E * Q * 2);
    add("mlp_norm", l.mlp_norm, E * 4);
    add("w_gate_up", l.w_gate_up, 2 * F * E * 2);
    add("w_down", l.w_down, E * F * 2);
  }
  return r;
}

std::vector<uint8_t> download(const void* p, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  CUDA_CHECK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
  return h;
}

cuda::DeviceWeights upload(const Model& m, bool pair, int n_staging, size_t staging_bytes) {
  auto w = cuda::upload_weights(m.config, m.weights, pair, cuda::UploadOptions{n_staging, staging_bytes});
  EXPECT_TRUE(w) << w.message();
  return w ? std::move(*w) : cuda::DeviceWeights{};
}

// bf16 bits of element i of a host tensor, as the upload converts it.
uint16_t host_bf16(const TensorView& t, size_t i) {
  return t.dtype == DType::BF16 ? static_cast<const uint16_t*>(t.data)[i] : f32_to_bf16(t.at(i));
}

// The staged layout checked on the host: w_gate_up rows interleaved, wq rows in rope-pair order when asked.
void expect_layout(const Model& m, const cuda::DeviceWeights& d, bool pair) {
  const ModelConfig& c = m.config;
  const int64_t E = c.n_embd, F = c.n_ff, D = c.head_dim;
  const LayerWeights& s = m.weights.layers[1];
  auto gu = download(d.layers[1].w_gate_up, size_t(2 * F * E * 2));
  auto q = download(d.layers[1].wqkv, size_t(c.q_dim() * E * 2));
  const uint16_t* g = reinterpret_cast<const uint16_t*>(gu.data());
  const uint16_t* qq = reinterpret_cast<const uint16_t*>(q.data());
  int bad = 0;
  for (int64_t r = 0; r < F; ++r)
    for (int64_t j = 0; j < E; ++j) {
      bad += g[(2 * r) * E + j] != host_bf16(s.w_gate, size_t(r * E + j));
      bad += g[(2 * r + 1) * E + j] != host_bf16(s.w_up, size_t(r * E + j));
    }
  EXPECT_EQ(bad, 0) << "w_gate_up elements not where the interleave puts them";
  bad = 0;
  for (int64_t r = 0; r < c.q_dim(); ++r) {
    const int64_t k = r % D, src = pair ? r - k + (k % 2 ? D / 2 + k / 2 : k / 2) : r;
    for (int64_t j = 0; j < E; ++j) bad += qq[r * E + j] != host_bf16(s.wq, size_t(src * E + j));
  }
  EXPECT_EQ(bad, 0) << "wq rows not in " << (pair ? "rope-pair" : "HF") << " order";
}

TEST(Upload, StagedEqualsPageable) {
  struct Ring {
    int n;
    size_t bytes;
  };
  for (const ModelCase& k : {ModelCase{Family::Llama, 64, 4, 2, true, 1001, DType::BF16},
                             ModelCase{Family::Llama, 32, 6, 2, false, 515, DType::F16},
                             ModelCase{Family::Qwen2, 64, 6, 2, false, 999, DType::F32},
                             ModelCase{Family::Qwen3, 128, 4, 1, true, 768, DType::BF16},
                             ModelCase{Family::Llama, 64, 4, 2, false, 40000, DType::BF16}}) {
    ModelConfig cfg = upload_config(k.f, k.D, k.n_head, k.n_kv, k.tied, k.vocab);
    Model m = make_random_model(cfg, k.dtype, 7 + k.vocab);
    for (bool pair : {false, true}) {
      cuda::DeviceWeights ref = upload(m, pair, 0, 0);
      // 1 buffer of 1 row (E = 136: 272 bytes; w_down rows of 688 bytes and q rows of D x heads x 2 bytes > 300 go
      // pageable), 2 of 2 rows + a bit, 3 of 3 rows of w_down (gate/up: 7 rows each), 2 of 1 MiB (large vocab:
      // several host threads per buffer), the default ring.
      for (Ring ring : {Ring{1, 300}, Ring{2, 600}, Ring{3, 3 * 688}, Ring{2, 1 << 20}, Ring{4, 16 << 20}}) {
        SCOPED_TRACE(cat(cfg.architecture, " D ", k.D, " vocab ", k.vocab, " ", dtype_name(k.dtype),
                         pair ? " rope-pair rows" : "", ", ", ring.n, " staging buffers of ", ring.bytes, " bytes"));
        cuda::DeviceWeights got = upload(m, pair, ring.n, ring.bytes);
        ASSERT_TRUE(ref.arena && got.arena);
        auto want = regions(cfg, ref), have = regions(cfg, got);
        ASSERT_EQ(want.size(), have.size());
        for (size_t i = 0; i < want.size(); ++i) {
          auto a = download(want[i].p, want[i].bytes), b = download(have[i].p, have[i].bytes);
          EXPECT_TRUE(a == b) << want[i].name << " differs from the pageable upload";
        }
        if (k.vocab < 2000) expect_layout(m, got, pair);
      }
    }
  }
}

TEST(Upload, WrongShapeNamesTheTensor) {
  ModelConfig cfg = upload_config(Family::Llama, 64, 4, 2, false, 300);
  Model m = make_random_model(cfg, DType::BF16, 3);
  m.weights.layers[1].w_up.shape = {cfg.n_ff - 1, cfg.n_embd};
  for (int n_staging : {0, 4}) {
    auto w = cuda::upload_weights(cfg, m.weights, true, cuda::UploadOptions{n_staging, 1 << 20});
    ASSERT_FALSE(w);
    EXPECT_NE(w.message().find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << w.message();
  }
}

}  // namespace
}  // namespace mk::gpu_test
