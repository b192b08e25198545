// The `megakernel` subcommands. Each lives in its own file (cmd_<name>.cpp), adds itself to the parent
// app, and returns the function main() runs when it is chosen (its return value is the exit code).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>

namespace mk::cli {

struct Command {
  CLI::App* app;
  std::function<int()> run;
};

Command add_generate_command(CLI::App& parent);
Command add_chat_command(CLI::App& parent);
Command add_tokenize_command(CLI::App& parent);
Command add_inspect_command(CLI::App& parent);
Command add_bench_command(CLI::App& parent);

}  // namespace mk::cli
