// open_checkpoint: finds the safetensors files of a model folder (single file or sharded through
// model.safetensors.index.json) and merges their tensors into one name -> tensor map.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "model/config.h"  // read_json_file
#include "model/safetensors.h"

namespace mk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

Expected<Checkpoint> open_sharded(const fs::path& dir, const fs::path& index_path) {
  auto j = read_json_file(index_path);
  if (!j) return j.error();
  const std::string origin = index_path.string();
  if (!j->is_object() || !j->contains("weight_map") || !(*j)["weight_map"].is_object())
    return make_error(origin, ": field 'weight_map' missing (expected an object tensor -> file)");
  const json& map = (*j)["weight_map"];
  if (map.empty()) return make_error(origin, ": 'weight_map' is empty (expected tensor -> file)");

  // Open every shard once, in a stable order.
  std::map<std::string, SafetensorsFile> shards;
  for (const auto& [name, file] : map.items()) {
    if (!file.is_string())
      return make_error(origin, ": weight_map entry '", name, "' must be a file name, got ",
                        file.dump());
    const std::string f = file.get<std::string>();
    const fs::path rel(f);
    bool escapes = f.empty() || rel.is_absolute();
    for (const auto& part : rel) escapes = escapes || part == "..";
    if (escapes)
      return make_error(origin, ": weight_map entry '", name, "' names '", f,
                        "' (expected a file name inside ", dir.string(), ")");
    if (shards.count(f)) continue;
    std::error_code ec;
    if (!fs::is_regular_file(dir / rel, ec))
      return make_error(origin, ": shard '", f, "' (holding tensor '", name,
                        "') does not exist in ", dir.string());
    auto st = open_safetensors(dir / rel);
    if (!st) return st.error();
    shards.emplace(f, std::move(*st));
  }
  Checkpoint ck;
  for (auto& [_, s] : shards) ck.files.push_back(s.file);
  for (const auto& [name, file] : map.items()) {
    const auto& shard = shards.at(file.get<std::string>());
    auto it = shard.header.tensors.find(name);
    if (it == shard.header.tensors.end())
      return make_error(origin, ": weight_map puts tensor '", name, "' in '", file.get<std::string>(),
                        "' but that file does not contain it");
    ck.tensors.emplace(name, it->second);
  }
  return ck;
}

}  // namespace

Expected<Checkpoint> open_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return make_error(dir.string(), ": model folder does not exist or is not a directory");
  // As transformers does: a single model.safetensors wins over an index.
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (!fs::exists(single, ec)) {
    if (fs::exists(index, ec)) return open_sharded(dir, index);
    return make_error(dir.string(),
                      ": no weights found (expected model.safetensors or "
                      "model.safetensors.index.json)");
  }
  auto st = open_safetensors(single);
  if (!st) return st.error();
  Checkpoint ck;
  ck.files.push_back(st->file);
  ck.tensors = std::move(st->header.tensors);
  return ck;
}

}  // namespace mk
