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
  // Runs the product once for every power-of-two M up to max_m (and max_m itself) on the given buffers ([max_m]
  // rows), so that the algorithm queries and first launches of every prompt length happen now, not in a request.
  void prepare(cudaStream_t stream, void* y, DType y_type, const __nv_bfloat16* x, const __nv_bfloat16* w, int max_m,
               int N, int K, float beta = 0.f);

 private:
  Gemm() = default;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // Per exact M: its layouts, with the algorithm of M's power-of-two bucket (checked to fit M).
  const Plan& plan(DType y_type, int M, int N, int K, bool accumulate);
  const cublasLtMatmulAlgo_t& bucket_algo(DType y_type, int M, int N, int K, bool accumulate);
  static Plan make_layouts(DType y_type, int M, int N, int K);
  static void destroy(Plan& p);
  cublasLtMatmulAlgo_t heuristic(const Plan& p);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<std::tuple<int, int, int, int, bool>, Plan> plans_;                  // (M, N, K, y type, accumulate)
  std::map<std::tuple<int, int, int, int, bool>, cublasLtMatmulAlgo_t> algos_;  // (bucket M, N, K, ...)
};

}  // namespace mk::cuda
