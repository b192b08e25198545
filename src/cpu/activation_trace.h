// ActivationTrace: records the named activations of a forward pass (any path with an ActivationHook)
// and finds the first tensor where two traces disagree, so that a mismatch between the CPU reference
// and a GPU path names the layer and op where it starts instead of only "the logits differ".
//
//   cpu::ActivationTrace want, got;
//   cpu_backend.set_hook(want.hook());  gpu_backend.set_hook(got.hook());   ... run both ...
//   if (auto d = cpu::first_divergence(got, want, 1e-2)) ADD_FAILURE() << d->describe();
//
// Test: tests/cpu/test_activation_trace.cpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "cpu/forward.h"

namespace mk::cpu {

struct ActivationTrace {
  struct Entry {
    std::string name;
    int layer = -1;
    int pos = 0;
    std::vector<float> values;
  };
  std::vector<Entry> entries;  // in the order they were produced

  // A hook that appends to this trace (the trace must outlive the hook's use).
  ActivationHook hook();
  const Entry* find(std::string_view name, int layer, int pos) const;
};

struct Divergence {
  std::string name;
  int layer = -1;
  int pos = 0;
  double rel_err = 0;     // ||got - want|| / ||want||; infinity for NaN, missing or size mismatch
  std::string reason;     // "", "missing", "size mismatch", "NaN"
  std::string describe() const;
};

// Walks `want` in order and returns the first entry whose counterpart in `got` (same name, layer and
// position) is missing, has another size, holds a NaN, or differs by more than max_rel_err.
std::optional<Divergence> first_divergence(const ActivationTrace& got, const ActivationTrace& want,
                                           double max_rel_err);

}  // namespace mk::cpu
