// The `parallax` command. Exit codes: 0 done, 1 failed while running, 2 bad input (scenario,
// schedule, flags). With --json, stdout carries one JSON object and nothing else; human text
// and progress go to stderr. The commands are a table (commands.hpp); without one, the main job.
#include <CLI/CLI.hpp>
#include <iostream>
#include <string>

#include "cli/commands.hpp"
#include "cli/main_job.hpp"
#include "plan/error.hpp"
#include "plan/time.hpp"

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitBadInput = 2;

}  // namespace

int main(int argc, char** argv) {
  using namespace parallax;
  CLI::App app{
      "Parallax: predict, run and compare distributed training plans.\n"
      "Without a command, runs the main job on the built-in default scenario."};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", "parallax 0.1.0");
  const auto runners = cli::define_commands(app);
  // CLI11 takes a word that names no command for a stray argument ("The following arguments were not
  // expected: whatif"); say it is not a command, and which are.
  if (argc > 1 && argv[1][0] != '-' && !runners.count(argv[1])) {
    std::string names;
    for (const CLI::App* command : app.get_subcommands([](CLI::App*) { return true; }))
      names += (names.empty() ? "" : ", ") + command->get_name();
    // "whatif" and "what-if" are what a user of other tools types for what calibrate --from-trace does.
    const bool what_if = std::string(argv[1]).find("what") != std::string::npos;
    std::cerr << "parallax: '" << argv[1] << "' is not a command; the commands: " << names << " (see parallax --help"
              << (what_if ? "; what if another plan, from a measured run: parallax calibrate --from-trace" : "") << ")\n";
    return kExitBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : kExitBadInput;
  }

  try {
    for (const CLI::App* command : app.get_subcommands()) return runners.at(command->get_name())();
    return cli::main_job();
  } catch (const plan::InputError& e) {
    std::cerr << e.what() << "\n";
    return kExitBadInput;
  } catch (const plan::OutOfScale& e) {
    std::cerr << "parallax: " << e.what() << "\n";
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    std::cerr << "parallax: failed: out of memory (a plan of very many ranks or micro-batches can need more than this machine has)\n";
    return kExitFailed;
  } catch (const std::exception& e) {
    std::cerr << "parallax: failed: " << e.what() << "\n";
    return kExitFailed;
  }
}
