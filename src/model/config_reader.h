// ConfigReader: typed access to the fields of a JSON config object, with errors that name the file,
// the field (with its path, e.g. "rope_scaling.factor") and what was expected. Used by config.cpp and
// the family files.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace mk {

class ConfigReader {
 public:
  // `file` starts every message; `prefix` is prepended to field names ("rope_scaling.").
  ConfigReader(const nlohmann::json& j, std::string file, std::string prefix = "");

  // Present and not null.
  bool has(std::string_view key) const;
  const nlohmann::json& json() const { return j_; }
  const std::string& file() const { return file_; }
  // A reader for the object in field `key` (which must be an object).
  Expected<ConfigReader> object(std::string_view key) const;

  // Required fields.
  Expected<int> positive_int(std::string_view key) const;
  Expected<double> positive_number(std::string_view key) const;
  Expected<std::string> string(std::string_view key) const;
  // Optional fields: `fallback` when absent or null.
  Expected<int> positive_int_or(std::string_view key, int fallback) const;
  Expected<double> positive_number_or(std::string_view key, double fallback) const;
  Expected<bool> bool_or(std::string_view key, bool fallback) const;
  Expected<std::string> string_or(std::string_view key, std::string fallback) const;

  // "<file>: field '<prefix><key>' <what>"
  Error error(std::string_view key, const std::string& what) const;
  // "<file>: field '<prefix><key>' must be <expected>, got <value>"
  Error expected(std::string_view key, const std::string& expected) const;

 private:
  const nlohmann::json& j_;
  std::string file_, prefix_;
};

}  // namespace mk
