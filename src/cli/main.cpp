// `megakernel`: the command-line front end. Parses the subcommand and runs it; user errors print one
// message and exit non-zero.
#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"megakernel: low-latency LLM inference (Llama 3.x, Qwen2.x, Qwen3) with a persistent-kernel decode"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every subcommand");
  std::vector<mk::cli::Command> commands = {
      mk::cli::add_generate_command(app),
      mk::cli::add_chat_command(app),
      mk::cli::add_tokenize_command(app),
      mk::cli::add_inspect_command(app),
      mk::cli::add_bench_command(app),
  };
  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& c : commands)
      if (c.app->parsed()) return c.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "megakernel: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
