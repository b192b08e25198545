// Placeholder until the 'tokenize' command lands.
#include <cstdio>
#include "cli/commands.h"

namespace mk::cli {
Command add_tokenize_command(CLI::App& parent) {
  auto* sub = parent.add_subcommand("tokenize", "(not yet available)");
  return {sub, [] { std::fprintf(stderr, "megakernel: 'tokenize' is not available yet\n"); return 2; }};
}
}  // namespace mk::cli
