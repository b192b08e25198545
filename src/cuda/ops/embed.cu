// Embedding gather (see embed.h): one block per token, 8 elements per thread-step.
#include "cuda/ops/embed.h"

#include "cuda/common/device.cuh"

namespace mk::cuda {
namespace {

__global__ void embed_kernel(float* out, const bf16* tok_embd, const int32_t* tokens, int n_embd, int n_vocab,
                             unsigned long long* reset_argmax) {
  pdl_wait();
  pdl_launch_dependents();
  int t = blockIdx.x;
  int32_t tok = tokens[t];
  float* o = out + size_t(t) * size_t(n_embd);
  if (reset_argmax && t == 0 && threadIdx.x == 0) *reset_argmax = 0ull;
  if (tok < 0 || tok >= n_vocab) {
    for (int i = threadIdx.x; i < n_embd; i += blockDim.x) o[i] = __int_as_float(0x7fc00000);
    return;
  }
  const bf16* row = tok_embd + size_t(tok) * size_t(n_embd);
  for (int c = threadIdx.x; c < n_embd / 8; c += blockDim.x) {
    uint4 v = *reinterpret_cast<const uint4*>(row + c * 8);
    float f[8];
    unpack8(v, f);
    reinterpret_cast<float4*>(o + c * 8)[0] = make_float4(f[0], f[1], f[2], f[3]);
    reinterpret_cast<float4*>(o + c * 8)[1] = make_float4(f[4], f[5], f[6], f[7]);
  }
}

}  // namespace

void embed(const Stream& s, float* out, const bf16* tok_embd, const int32_t* tokens, int n_tokens, int n_embd,
           int n_vocab, unsigned long long* reset_argmax) {
  MK_CHECK(n_tokens > 0 && n_embd % 8 == 0);
  launch(s, dim3(n_tokens), dim3(256), 0, embed_kernel, out, tok_embd, tokens, n_embd, n_vocab, reset_argmax);
}

}  // namespace mk::cuda
