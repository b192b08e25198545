// ConfigReader: typed JSON field access with precise error messages (see config_reader.h).
#include "model/config_reader.h"

#include <cmath>
#include <limits>

namespace mk {

ConfigReader::ConfigReader(const nlohmann::json& j, std::string file, std::string prefix)
    : j_(j), file_(std::move(file)), prefix_(std::move(prefix)) {}

bool ConfigReader::has(std::string_view key) const {
  if (!j_.is_object()) return false;
  auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

Error ConfigReader::error(std::string_view key, const std::string& what) const {
  return make_error(file_, ": field '", prefix_, key, "' ", what);
}

Error ConfigReader::expected(std::string_view key, const std::string& expected) const {
  std::string got = "nothing";
  if (j_.is_object()) {
    auto it = j_.find(key);
    if (it != j_.end()) {
      got = it->dump();
      if (got.size() > 80) got = got.substr(0, 77) + "...";
    }
  }
  return error(key, cat("must be ", expected, ", got ", got));
}

Expected<ConfigReader> ConfigReader::object(std::string_view key) const {
  if (!has(key) || !j_.find(key)->is_object()) return expected(key, "an object");
  return ConfigReader(*j_.find(key), file_, cat(prefix_, key, "."));
}

Expected<int> ConfigReader::positive_int(std::string_view key) const {
  if (!has(key)) return error(key, "is missing (expected a positive integer)");
  const auto& v = *j_.find(key);
  if (!v.is_number_integer() || v.get<int64_t>() <= 0 ||
      v.get<int64_t>() > std::numeric_limits<int>::max())
    return expected(key, "a positive integer");
  return int(v.get<int64_t>());
}

Expected<double> ConfigReader::positive_number(std::string_view key) const {
  if (!has(key)) return error(key, "is missing (expected a positive number)");
  const auto& v = *j_.find(key);
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
    return expected(key, "a positive number");
  return v.get<double>();
}

Expected<std::string> ConfigReader::string(std::string_view key) const {
  if (!has(key)) return error(key, "is missing (expected a string)");
  const auto& v = *j_.find(key);
  if (!v.is_string()) return expected(key, "a string");
  return v.get<std::string>();
}

Expected<int> ConfigReader::positive_int_or(std::string_view key, int fallback) const {
  return has(key) ? positive_int(key) : Expected<int>(fallback);
}

Expected<double> ConfigReader::positive_number_or(std::string_view key, double fallback) const {
  return has(key) ? positive_number(key) : Expected<double>(fallback);
}

Expected<bool> ConfigReader::bool_or(std::string_view key, bool fallback) const {
  if (!has(key)) return fallback;
  const auto& v = *j_.find(key);
  if (!v.is_boolean()) return expected(key, "true or false");
  return v.get<bool>();
}

Expected<std::string> ConfigReader::string_or(std::string_view key, std::string fallback) const {
  return has(key) ? string(key) : Expected<std::string>(std::move(fallback));
}

}  // namespace mk
