// Placeholder until the 'inspect' command lands.
#include <cstdio>
#include "cli/commands.h"

namespace mk::cli {
Command add_inspect_command(CLI::App& parent) {
  auto* sub = parent.add_subcommand("inspect", "(not yet available)");
  return {sub, [] { std::fprintf(stderr, "megakernel: 'inspect' is not available yet\n"); return 2; }};
}
}  // namespace mk::cli
