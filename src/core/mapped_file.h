// MappedFile: a read-only memory mapping of a whole file (mmap, MAP_PRIVATE). The weights of a
// checkpoint are used straight from the mapping: nothing is copied. Shared ownership keeps the
// mapping alive as long as any TensorView into it is in use (see Weights::storage).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "core/status.h"

namespace mk {

class MappedFile {
 public:
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path` read-only. Errors name the file and the failing system call. An empty file maps to
  // size() == 0 and data() == nullptr.
  static Expected<std::shared_ptr<const MappedFile>> open(const std::filesystem::path& path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Asks the kernel to start reading [offset, offset + n) from disk (madvise MADV_WILLNEED).
  void will_need(size_t offset, size_t n) const;

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace mk
