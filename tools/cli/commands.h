// tools/cli/commands.h — the `kiln` commands. Each tools/cli/cmd_*.cpp adds one subcommand (or a few
// that share their options) to the app: its options and their help texts, bound to an object that
// lives as long as the returned Command; main.cpp parses the command line and runs the command it
// chose. No CLI11 here: only the command files and main.cpp include it.
#pragma once

#include <functional>
#include <memory>
#include <utility>

namespace CLI {
class App;
class Validator;
}  // namespace CLI

namespace kiln_cli {

// One subcommand: its CLI11 app, and what runs (the exit status) when the command line chose it.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// A command object C: its options as members, `CLI::App* add_to(CLI::App&, ...)` adds the subcommand
// and binds them, `int execute()` runs it once the command line is parsed.
template <class C, class... Args>
Command make_command(CLI::App& app, Args&&... args) {
  auto c = std::make_shared<C>();
  CLI::App* sub = c->add_to(app, std::forward<Args>(args)...);
  return {sub, [c] { return c->execute(); }};
}

// `precisions`: the --precision names of the run-side commands (build has its own list, with fp8).
Command add_info_command(CLI::App& app);     // cmd_inspect.cpp
Command add_build_command(CLI::App& app);    // cmd_build.cpp
Command add_cache_command(CLI::App& app);    // cmd_cache.cpp: cache merge, cache info
struct RunCommands {
  Command run, bench, profile;
};
RunCommands add_run_commands(CLI::App& app, const CLI::Validator& precisions);  // cmd_run.cpp (+ bench, profile)
Command add_inspect_command(CLI::App& app);  // cmd_inspect.cpp
Command add_compare_command(CLI::App& app, const CLI::Validator& precisions);  // cmd_compare.cpp
Command add_conform_command(CLI::App& app, const CLI::Validator& precisions);  // cmd_conform.cpp
Command add_serve_command(CLI::App& app);    // cmd_serve.cpp

}  // namespace kiln_cli
