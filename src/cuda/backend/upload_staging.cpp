// Pinned staging ring for the weight upload (see upload_staging.h).
#include "cuda/backend/upload_staging.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "cuda/common/cuda_check.h"

namespace mk::cuda {

std::unique_ptr<UploadStaging> UploadStaging::create(int n_buffers, size_t buffer_bytes) {
  if (n_buffers < 1 || buffer_bytes == 0) return nullptr;
  std::unique_ptr<UploadStaging> s(new UploadStaging());
  s->bytes_ = buffer_bytes;
  // Failures here are not errors: the caller uploads with pageable copies instead. Clear the error they leave.
  if (cudaHostAlloc(reinterpret_cast<void**>(&s->host_), size_t(n_buffers) * buffer_bytes, cudaHostAllocDefault) !=
      cudaSuccess) {
    s->host_ = nullptr;
    cudaGetLastError();
    return nullptr;
  }
  if (cudaStreamCreateWithFlags(&s->stream_, cudaStreamNonBlocking) != cudaSuccess) {
    s->stream_ = nullptr;
    cudaGetLastError();
    return nullptr;
  }
  for (int i = 0; i < n_buffers; ++i) {
    cudaEvent_t e;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    s->done_.push_back(e);
  }
  return s;
}

UploadStaging::~UploadStaging() {
  // The copy engine may still read the buffers: wait before freeing them.
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
  if (stream_) cudaStreamDestroy(stream_);
  if (host_) cudaFreeHost(host_);
  cudaGetLastError();  // errors of the copies were reported by finish(); none may leak into later calls
}

Status UploadStaging::upload_rows(void* dst, size_t dst_pitch, size_t row_bytes, int64_t n_rows, const FillRows& fill,
                                  const std::string& what) {
  MK_CHECK(row_bytes > 0 && row_bytes <= bytes_);
  const int64_t rows_per_buffer = int64_t(bytes_ / row_bytes);
  // Each host thread copies at least ~256 KB: smaller pieces cost more in hand-offs than they gain.
  const int64_t min_rows = std::max<int64_t>(1, int64_t((256 << 10) / row_bytes));
  for (int64_t r0 = 0; r0 < n_rows; r0 += rows_per_buffer) {
    const int64_t r1 = std::min(n_rows, r0 + rows_per_buffer);
    char* buf = host_ + size_t(next_) * bytes_;
    // The copy queued from this buffer one lap ago must have read it before the host overwrites it.
    cudaError_t err = cudaEventSynchronize(done_[size_t(next_)]);
    if (err != cudaSuccess) return cuda_status(err, cat("uploading weights (before '", what, "')").c_str());
    ThreadPool::global().parallel_for(r1 - r0, min_rows, [&](int64_t b, int64_t e) {
      fill(r0 + b, r0 + e, buf + size_t(b) * row_bytes);
    });
    err = cudaMemcpy2DAsync(static_cast<char*>(dst) + size_t(r0) * dst_pitch, dst_pitch, buf, row_bytes, row_bytes,
                            size_t(r1 - r0), cudaMemcpyHostToDevice, stream_);
    if (err == cudaSuccess) err = cudaEventRecord(done_[size_t(next_)], stream_);
    if (err != cudaSuccess) return cuda_status(err, cat("uploading weights ('", what, "')").c_str());
    next_ = (next_ + 1) % int(done_.size());
  }
  return {};
}

Status UploadStaging::finish() {
  return cuda_status(cudaStreamSynchronize(stream_), "uploading weights (waiting for the staged copies)");
}

}  // namespace mk::cuda
