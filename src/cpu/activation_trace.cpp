// ActivationTrace (see activation_trace.h).
#include "cpu/activation_trace.h"

#include <cmath>
#include <limits>

#include "core/status.h"

namespace mk::cpu {

ActivationHook ActivationTrace::hook() {
  return [this](std::string_view name, int layer, int pos, std::span<const float> v) {
    entries.push_back(Entry{std::string(name), layer, pos, std::vector<float>(v.begin(), v.end())});
  };
}

const ActivationTrace::Entry* ActivationTrace::find(std::string_view name, int layer, int pos) const {
  for (const Entry& e : entries)
    if (e.layer == layer && e.pos == pos && e.name == name) return &e;
  return nullptr;
}

std::string Divergence::describe() const {
  std::string where = cat("'", name, "'", layer >= 0 ? cat(" of layer ", layer) : std::string(), " at position ", pos);
  if (!reason.empty()) return cat("first divergence: ", where, ": ", reason);
  return cat("first divergence: ", where, ": relative error ", rel_err);
}

std::optional<Divergence> first_divergence(const ActivationTrace& got, const ActivationTrace& want,
                                           double max_rel_err) {
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& w : want.entries) {
    Divergence d{w.name, w.layer, w.pos, inf, ""};
    const auto* g = got.find(w.name, w.layer, w.pos);
    if (!g) {
      d.reason = "missing";
      return d;
    }
    if (g->values.size() != w.values.size()) {
      d.reason = cat("size mismatch (", g->values.size(), " values, expected ", w.values.size(), ")");
      return d;
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < w.values.size(); ++i) {
      if (std::isnan(g->values[i])) {
        d.reason = cat("NaN at index ", i);
        return d;
      }
      double diff = double(g->values[i]) - double(w.values[i]);
      num += diff * diff;
      den += double(w.values[i]) * double(w.values[i]);
    }
    d.rel_err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (!(d.rel_err <= max_rel_err)) return d;
  }
  return std::nullopt;
}

}  // namespace mk::cpu
