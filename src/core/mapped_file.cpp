// MappedFile: mmap of a whole file, read-only (see mapped_file.h).
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mk {

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

Expected<std::shared_ptr<const MappedFile>> MappedFile::open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(path.string(), ": cannot open: ", std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return make_error(path.string(), ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return make_error(path.string(), ": not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = size_t(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return make_error(path.string(), ": mmap of ", f->size_, " bytes failed: ", std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid after close
  return std::shared_ptr<const MappedFile>(std::move(f));
}

void MappedFile::will_need(size_t offset, size_t n) const {
  if (data_ == nullptr || offset >= size_) return;
  if (n > size_ - offset) n = size_ - offset;
  // madvise wants a page-aligned start.
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_t begin = offset / page * page;
  madvise(const_cast<uint8_t*>(data_) + begin, n + (offset - begin), MADV_WILLNEED);
}

}  // namespace mk
