#pragma once
// The `parallax` commands as one table: each entry adds its subcommand, options, help and
// examples to the application and returns what runs it once the command line is parsed. main()
// dispatches through it; each runner calls its command's function (scenario_commands.hpp,
// run_command.hpp, ...), where the work is.
#include <CLI/CLI.hpp>
#include <functional>
#include <map>
#include <string>

namespace parallax::cli {

using Runner = std::function<int()>;

/// Adds every command to `app`; the runner of each, by its name.
std::map<std::string, Runner> define_commands(CLI::App& app);

}  // namespace parallax::cli
