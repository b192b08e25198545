// safetensors reader: memory-maps checkpoint files and validates their headers before any byte of
// tensor data is used. Format: [u64 little-endian N][N bytes of JSON header][data section]; the header
// maps tensor name -> {dtype, shape, data_offsets: [begin, end) relative to the data section}.
// Checks: N within the file and below a cap, JSON is an object, known dtype, shape product x dtype
// size == end - begin, ranges inside the data section, no two tensors overlap; "__metadata__" is
// tolerated. A model folder is one model.safetensors or shards listed by model.safetensors.index.json.
// Tests: tests/model/test_safetensors.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace mk {

// Largest JSON header we accept (the reference implementation uses the same bound).
inline constexpr uint64_t SAFETENSORS_MAX_HEADER = 100ull << 20;

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;         // as spelled in the header: "BF16", "F32", "I64", ...
  std::optional<DType> dtype;     // set for the dtypes weights may have (BF16, F16, F32)
  std::vector<int64_t> shape;
  uint64_t offset = 0;            // absolute byte offset in the file
  uint64_t nbytes = 0;
  const void* data = nullptr;     // into the mapping; null until the file is mapped
  const MappedFile* file = nullptr;  // owner of `data` (for messages and prefetching)
};

struct SafetensorsHeader {
  uint64_t data_start = 0;                          // 8 + header length
  std::map<std::string, SafetensorsTensor> tensors;  // by name
  std::map<std::string, std::string> metadata;      // "__metadata__" string entries
};

// Parses and validates the header of a safetensors image of `size` bytes. `origin` (usually the file
// path) starts every error message. Never reads outside [bytes, bytes + size).
Expected<SafetensorsHeader> parse_safetensors_header(const uint8_t* bytes, size_t size,
                                                     const std::string& origin);

// One mapped, validated safetensors file; tensor data pointers point into the mapping.
struct SafetensorsFile {
  std::shared_ptr<const MappedFile> file;
  SafetensorsHeader header;
};
Expected<SafetensorsFile> open_safetensors(const std::filesystem::path& path);

// All tensors of a model folder: model.safetensors, or every shard named by
// model.safetensors.index.json ("weight_map": tensor -> file; each named file must exist and hold
// the tensors the map assigns to it).
struct Checkpoint {
  std::vector<std::shared_ptr<const MappedFile>> files;
  std::map<std::string, SafetensorsTensor> tensors;
};
Expected<Checkpoint> open_checkpoint(const std::filesystem::path& dir);

// Size in bytes of one element of a safetensors dtype; 0 for a name we do not know.
size_t safetensors_dtype_size(const std::string& name);

}  // namespace mk
