// Backend factory: picks the Backend for `--device cpu|cuda` and `--backend <kind>` from a table of
// registered factories. The CPU reference is built in; CUDA backends add one register_backend() line in
// backend_factory.cpp (under MK_HAVE_CUDA) and nothing else changes. Test: tests/runtime/test_backend_factory.cpp.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "runtime/backend.h"

namespace mk {

struct Model;

struct BackendOptions {
  std::string device = "cpu";  // "cpu" | "cuda"
  std::string kind;            // e.g. "reference", "layered", "megakernel"; "" = the device's first registered
  int max_context = 0;         // KV cache positions; <= 0: the backend's default for the model
};

using BackendFactory = std::function<Expected<std::unique_ptr<Backend>>(const Model&, const BackendOptions&)>;

// Adds (or replaces) the factory for (device, kind). The first kind registered for a device is its default.
void register_backend(const std::string& device, const std::string& kind, BackendFactory factory);

// Builds the backend `options` names. Errors: an unknown device, a device with nothing registered
// ("CUDA backend not built/available ..."), an unknown kind (listing the available ones).
Expected<std::unique_ptr<Backend>> make_backend(const Model& model, const BackendOptions& options);

// "device/kind" of every registered factory, in registration order.
std::vector<std::string> registered_backends();

}  // namespace mk
