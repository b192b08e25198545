// Prefill projections through cuBLASLt: y[M, N] = x[M, K] . w[N, K]^T (+ beta * y), x and w bf16 row-major (w in the
// HF [out, in] layout), y f32 (beta = 1 accumulates a residual) or bf16, fp32 accumulation.
// CPU reference: cpu::matvec on each row. Test: tests/gpu/test_ops.cu. Also times the bf16 matrix rate (bench).
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "core/dtype.h"
#include "core/status.h"

namespace mk::cuda {

class Gemm {
 public:
  // Creates the cuBLASLt handle and a device workspace; fails with a message when cuBLASLt cannot start.
  static Expected<std::unique_ptr<Gemm>> create(size_t workspace_bytes = size_t(32) << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y: [M, N] of y_type (F32 or BF16); x: [M, K] bf16; w: [N, K] bf16. Asynchronous on stream.
  void run(cudaStream_t stream, void* y, DType y_type, const __nv_bfloat16* x, const __nv_bfloat16* w, int M, int N,
           int K, float beta = 0.f);

 private:
  Gemm() = default;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(DType y_type, int M, int N, int K, bool accumulate);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int, int, int, int, bool>, Plan> plans_;
};

}  // namespace mk::cuda
