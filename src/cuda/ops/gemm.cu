// cuBLASLt GEMM (see gemm.h). Row-major y = x w^T is column-major y^T = w x^T: A = w viewed as K x N column-major
// (transposed), B = x viewed as K x M column-major, D = y^T as N x M column-major.
#include "cuda/ops/gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cuda/common/cuda_check.h"

#define CUBLAS_CHECK(expr)                                                                                     \
  do {                                                                                                         \
    cublasStatus_t mk_st_ = (expr);                                                                            \
    if (mk_st_ != CUBLAS_STATUS_SUCCESS) {                                                                     \
      std::fprintf(stderr, "%s:%d: cuBLASLt error %d in %s\n", __FILE__, __LINE__, int(mk_st_), #expr);        \
      std::abort();                                                                                            \
    }                                                                                                          \
  } while (0)

namespace mk::cuda {

Expected<std::unique_ptr<Gemm>> Gemm::create(size_t workspace_bytes) {
  std::unique_ptr<Gemm> g(new Gemm());
  cublasStatus_t st = cublasLtCreate(&g->handle_);
  if (st != CUBLAS_STATUS_SUCCESS) return make_error("cuBLASLt failed to start (status ", int(st), ")");
  MK_TRY(cuda_status(cudaMalloc(&g->workspace_, workspace_bytes), "allocating the cuBLASLt workspace"));
  g->workspace_bytes_ = workspace_bytes;
  return std::move(g);
}

Gemm::~Gemm() {
  for (auto& [key, p] : plans_) destroy(p);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(handle_);
}

// The heuristic's choice for M rounded up to a power of two: a query costs about a millisecond, too much to pay for
// every new prompt length on the way to the first token; CudaBackend queries every bucket at start-up.
const cublasLtMatmulAlgo_t& Gemm::bucket_algo(DType y_type, int M, int N, int K, bool accumulate) {
  int bm = 1;
  while (bm < M) bm *= 2;
  auto key = std::make_tuple(bm, N, K, int(y_type), accumulate);
  auto it = algos_.find(key);
  if (it != algos_.end()) return it->second;
  Plan p = make_layouts(y_type, bm, N, K);
  cublasLtMatmulAlgo_t algo = heuristic(p);
  destroy(p);
  return algos_.emplace(key, algo).first->second;
}

Gemm::Plan Gemm::make_layouts(DType y_type, int M, int N, int K) {
  Plan p;
  cudaDataType_t yt = y_type == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, K, N, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, K, M, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.c, yt, N, M, N));
  return p;
}

void Gemm::destroy(Plan& p) {
  cublasLtMatrixLayoutDestroy(p.a);
  cublasLtMatrixLayoutDestroy(p.b);
  cublasLtMatrixLayoutDestroy(p.c);
  cublasLtMatmulDescDestroy(p.desc);
}

cublasLtMatmulAlgo_t Gemm::heuristic(const Plan& p) {
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                    sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t res{};
  int n_res = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &res, &n_res));
  cublasLtMatmulPreferenceDestroy(pref);
  MK_CHECK(n_res > 0);
  return res.algo;
}

const Gemm::Plan& Gemm::plan(DType y_type, int M, int N, int K, bool accumulate) {
  auto key = std::make_tuple(M, N, K, int(y_type), accumulate);
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  Plan p = make_layouts(y_type, M, N, K);
  p.algo = bucket_algo(y_type, M, N, K, accumulate);
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.c, p.c, &p.algo, &check) != CUBLAS_STATUS_SUCCESS ||
      check.workspaceSize > workspace_bytes_)
    p.algo = heuristic(p);  // the bucket's algorithm does not fit this M: ask for this M itself
  return plans_.emplace(key, p).first->second;
}

void Gemm::prepare(cudaStream_t stream, void* y, DType y_type, const __nv_bfloat16* x, const __nv_bfloat16* w,
                   int max_m, int N, int K, float beta) {
  for (int m = 1;; m *= 2) {
    run(stream, y, y_type, x, w, std::min(m, max_m), N, K, beta);
    if (m >= max_m) break;
  }
}

void Gemm::run(cudaStream_t stream, void* y, DType y_type, const __nv_bfloat16* x, const __nv_bfloat16* w, int M,
               int N, int K, float beta) {
  MK_CHECK(y_type == DType::F32 || y_type == DType::BF16);
  MK_CHECK(M > 0 && N > 0 && K > 0);
  const Plan& p = plan(y_type, M, N, K, beta != 0.f);
  float alpha = 1.f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &p.algo, workspace_,
                              workspace_bytes_, stream));
}

}  // namespace mk::cuda
