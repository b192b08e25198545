// UploadStaging: host-to-device row copies through a ring of pinned (page-locked) staging buffers, for the weight
// upload (device_weights.cu). Pageable copies (cudaMemcpy from the memory-mapped checkpoint) run at ~8.5 GB/s on the
// H200 machine whatever the number of host threads: the driver stages them itself. Here the host threads of
// ThreadPool::global() fill a pinned buffer (the caller's fill function: plain copies, row permutations, dtype
// conversion), one cudaMemcpy2DAsync per buffer takes it up on the staging stream, and the host fills the next
// buffer meanwhile; an event per buffer says when it may be filled again.
// Tested by tests/gpu/test_upload.cu (tiny buffers: many chunks per tensor, one row per chunk).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace mk::cuda {

class UploadStaging {
 public:
  // n_buffers pinned buffers of buffer_bytes each; null when pinned memory (or a stream) cannot be had, so that the
  // caller can fall back to pageable copies.
  static std::unique_ptr<UploadStaging> create(int n_buffers, size_t buffer_bytes);
  ~UploadStaging();  // waits for the copies in flight, then frees the buffers, events and stream
  UploadStaging(const UploadStaging&) = delete;
  UploadStaging& operator=(const UploadStaging&) = delete;

  size_t buffer_bytes() const { return bytes_; }

  // Writes the destination rows [r0, r1), row_bytes each and contiguous, to `out` (host memory). Called from several
  // threads at once for disjoint row ranges.
  using FillRows = std::function<void(int64_t r0, int64_t r1, void* out)>;

  // Copies n_rows rows of row_bytes bytes to dst, dst_pitch bytes apart, filling the staging buffers with `fill`.
  // row_bytes must be <= buffer_bytes(). Returns once the last copy is queued (not done): finish() waits. `what`
  // names the tensor in errors.
  Status upload_rows(void* dst, size_t dst_pitch, size_t row_bytes, int64_t n_rows, const FillRows& fill,
                     const std::string& what);

  // Waits for every queued copy; a copy that failed is reported here.
  Status finish();

 private:
  UploadStaging() = default;

  char* host_ = nullptr;              // [n_buffers * bytes_] pinned
  size_t bytes_ = 0;                  // bytes per buffer
  std::vector<cudaEvent_t> done_;     // [n_buffers] recorded after the copy that reads the buffer
  cudaStream_t stream_ = nullptr;
  int next_ = 0;                      // the buffer to fill next
};

}  // namespace mk::cuda
