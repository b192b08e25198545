// Placeholder until the 'bench' command lands.
#include <cstdio>
#include "cli/commands.h"

namespace mk::cli {
Command add_bench_command(CLI::App& parent) {
  auto* sub = parent.add_subcommand("bench", "(not yet available)");
  return {sub, [] { std::fprintf(stderr, "megakernel: 'bench' is not available yet\n"); return 2; }};
}
}  // namespace mk::cli
