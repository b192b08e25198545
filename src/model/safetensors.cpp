// safetensors reader: header validation, file mapping and sharded checkpoints (see safetensors.h).
#include "model/safetensors.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace mk {
namespace {

using json = nlohmann::json;

struct DTypeInfo {
  const char* name;
  size_t size;
};
constexpr DTypeInfo DTYPES[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2},
    {"U16", 2},  {"F16", 2}, {"BF16", 2}, {"I32", 4},     {"U32", 4},     {"F32", 4},
    {"F64", 8},  {"I64", 8}, {"U64", 8},
};

std::optional<DType> weight_dtype(const std::string& s) {
  if (s == "BF16") return DType::BF16;
  if (s == "F16") return DType::F16;
  if (s == "F32") return DType::F32;
  return std::nullopt;
}

// Reads a JSON value as a non-negative integer that fits in uint64.
bool as_u64(const json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = uint64_t(v.get<int64_t>());
    return true;
  }
  return false;
}

// Parses one tensor entry; `ctx` is "<file>: tensor '<name>'".
Expected<SafetensorsTensor> parse_entry(const std::string& name, const json& e, uint64_t data_size,
                                        const std::string& ctx) {
  if (!e.is_object()) return make_error(ctx, ": entry must be an object, got ", e.type_name());
  SafetensorsTensor t;
  t.name = name;
  auto it = e.find("dtype");
  if (it == e.end() || !it->is_string()) return make_error(ctx, ": missing string field 'dtype'");
  t.dtype_name = it->get<std::string>();
  const size_t esize = safetensors_dtype_size(t.dtype_name);
  if (esize == 0)
    return make_error(ctx, ": unknown dtype '", t.dtype_name,
                      "' (expected a safetensors dtype such as BF16, F16, F32)");
  t.dtype = weight_dtype(t.dtype_name);

  it = e.find("shape");
  if (it == e.end() || !it->is_array())
    return make_error(ctx, ": missing field 'shape' (expected an array of dimensions)");
  const std::string shape_str = it->dump();
  uint64_t numel = 1;
  for (const auto& d : *it) {
    uint64_t v;
    if (!as_u64(d, v) || v > uint64_t(INT64_MAX))
      return make_error(ctx, ": shape ", shape_str, " must hold non-negative integers");
    if (__builtin_mul_overflow(numel, v, &numel))
      return make_error(ctx, ": shape ", shape_str, " has too many elements");
    t.shape.push_back(int64_t(v));
  }
  uint64_t expect_bytes;
  if (__builtin_mul_overflow(numel, uint64_t(esize), &expect_bytes))
    return make_error(ctx, ": shape ", shape_str, " has too many bytes");

  it = e.find("data_offsets");
  uint64_t begin = 0, end = 0;
  if (it == e.end() || !it->is_array() || it->size() != 2 || !as_u64((*it)[0], begin) ||
      !as_u64((*it)[1], end))
    return make_error(ctx, ": 'data_offsets' must be [begin, end] with non-negative integers, got ",
                      it == e.end() ? std::string("nothing") : it->dump());
  if (begin > end)
    return make_error(ctx, ": data_offsets [", begin, ", ", end, "] has begin > end");
  if (end > data_size)
    return make_error(ctx, ": data_offsets [", begin, ", ", end,
                      "] reach past the end of the data section (", data_size,
                      " bytes; is the file truncated?)");
  if (end - begin != expect_bytes)
    return make_error(ctx, ": shape ", shape_str, " x ", t.dtype_name,
                      " (", esize, " bytes) needs ", expect_bytes, " bytes but data_offsets [", begin,
                      ", ", end, "] span ", end - begin);
  t.offset = begin;  // made absolute by the caller
  t.nbytes = end - begin;
  return t;
}

// No two non-empty tensors may share a byte.
Status check_overlaps(const std::map<std::string, SafetensorsTensor>& tensors,
                      const std::string& origin) {
  std::vector<const SafetensorsTensor*> v;
  for (const auto& [_, t] : tensors)
    if (t.nbytes > 0) v.push_back(&t);
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < v.size(); ++i) {
    const auto* a = v[i - 1];
    const auto* b = v[i];
    if (b->offset < a->offset + a->nbytes)
      return make_error(origin, ": tensors '", a->name, "' [", a->offset, ", ",
                        a->offset + a->nbytes, ") and '", b->name, "' [", b->offset, ", ",
                        b->offset + b->nbytes, ") overlap (data_offsets must be disjoint)");
  }
  return {};
}

}  // namespace

size_t safetensors_dtype_size(const std::string& name) {
  for (const auto& d : DTYPES)
    if (name == d.name) return d.size;
  return 0;
}

Expected<SafetensorsHeader> parse_safetensors_header(const uint8_t* bytes, size_t size,
                                                     const std::string& origin) {
  if (size < 8)
    return make_error(origin, ": file is ", size,
                      " bytes, too short for a safetensors header (expected at least 8)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  if (n > size - 8)
    return make_error(origin, ": header length ", n, " reaches past the end of the file (",
                      size, " bytes; is the file truncated or not safetensors?)");
  if (n > SAFETENSORS_MAX_HEADER)
    return make_error(origin, ": header length ", n, " exceeds the limit of ",
                      SAFETENSORS_MAX_HEADER, " bytes");
  json j;
  try {
    j = json::parse(bytes + 8, bytes + 8 + n);
  } catch (const json::exception& e) {
    return make_error(origin, ": header is not valid JSON: ", e.what());
  }
  if (!j.is_object())
    return make_error(origin, ": header must be a JSON object, got ", j.type_name());

  SafetensorsHeader h;
  h.data_start = 8 + n;
  const uint64_t data_size = size - h.data_start;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (entry.is_object())
        for (const auto& [k, v] : entry.items())
          if (v.is_string()) h.metadata[k] = v.get<std::string>();
      continue;
    }
    auto t = parse_entry(name, entry, data_size, cat(origin, ": tensor '", name, "'"));
    if (!t) return t.error();
    t->offset += h.data_start;
    h.tensors.emplace(name, std::move(*t));
  }
  MK_TRY(check_overlaps(h.tensors, origin));
  return h;
}

Expected<SafetensorsFile> open_safetensors(const std::filesystem::path& path) {
  auto f = MappedFile::open(path);
  if (!f) return f.error();
  SafetensorsFile out;
  out.file = *f;
  auto h = parse_safetensors_header(out.file->data(), out.file->size(), path.string());
  if (!h) return h.error();
  out.header = std::move(*h);
  for (auto& [_, t] : out.header.tensors) {
    t.data = out.file->data() + t.offset;
    t.file = out.file.get();
  }
  return out;
}

}  // namespace mk
