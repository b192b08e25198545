// Placeholder until the 'generate' command lands.
#include <cstdio>
#include "cli/commands.h"

namespace mk::cli {
Command add_generate_command(CLI::App& parent) {
  auto* sub = parent.add_subcommand("generate", "(not yet available)");
  return {sub, [] { std::fprintf(stderr, "megakernel: 'generate' is not available yet\n"); return 2; }};
}
}  // namespace mk::cli
