// Placeholder until the 'chat' command lands.
#include <cstdio>
#include "cli/commands.h"

namespace mk::cli {
Command add_chat_command(CLI::App& parent) {
  auto* sub = parent.add_subcommand("chat", "(not yet available)");
  return {sub, [] { std::fprintf(stderr, "megakernel: 'chat' is not available yet\n"); return 2; }};
}
}  // namespace mk::cli
