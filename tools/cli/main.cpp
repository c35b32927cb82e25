// tools/cli/main.cpp — the `kiln` command: the app and its common options; each subcommand is a
// tools/cli/cmd_*.cpp (commands.h), and the one the command line chose runs.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

#include "commands.h"
#include "kiln/kiln.h"

namespace kiln_cli {
namespace {

// Levenshtein distance between two short words.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The candidate closest to `word` when it is close enough to be a typo (or `word` starts it): "" otherwise.
std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates) {
    const size_t d = c.rfind(word, 0) == 0 && word.size() >= 3 ? 1 : edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

// "did you mean" lines for a command line CLI11 refused: a word where a command was expected that is
// close to a command's name, and options the chosen command does not have that are close to one it has.
std::string did_you_mean(CLI::App& app, int argc, char** argv) {
  CLI::App* cmd = &app;
  std::string hints;
  bool expect_command = true, past_options = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") past_options = true;
    if (past_options) continue;
    if (arg.size() > 1 && arg[0] == '-' && !(std::isdigit(static_cast<unsigned char>(arg[1])) || arg[1] == '.')) {
      const std::string name = arg.substr(0, arg.find('='));
      std::vector<std::string> known;
      bool found = false;
      for (CLI::App* scope : {cmd, &app})
        for (const CLI::Option* o : scope->get_options()) {
          for (const std::string& l : o->get_lnames()) {
            known.push_back("--" + l);
            found |= name == "--" + l;
          }
          for (const std::string& sn : o->get_snames()) found |= name == "-" + sn || (name.size() > 2 && name[1] != '-' && name[1] == sn[0]);
        }
      if (found) continue;
      if (std::string c = closest(name, known); !c.empty())
        hints += "kiln: unknown option '" + name + "'" + (cmd != &app ? " for 'kiln " + cmd->get_name() + "'" : std::string()) +
                 ": did you mean '" + c + "'?\n";
      continue;
    }
    if (!expect_command) continue;
    std::vector<std::string> names;
    CLI::App* next = nullptr;
    for (CLI::App* sub : cmd->get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
      if (sub->get_name() == arg) next = sub;
    }
    if (names.empty()) { expect_command = false; continue; }  // a command's own arguments from here
    if (next) { cmd = next; continue; }
    if (std::string c = closest(arg, names); !c.empty())
      hints += "kiln: '" + arg + "' is not a " + (cmd == &app ? std::string("command") : "'" + cmd->get_name() + "' command") +
               ": did you mean '" + c + "'?\n";
    expect_command = false;
  }
  return hints;
}

int kiln_main(int argc, char** argv) {
  // libgomp reads OMP_WAIT_POLICY when it loads, before main: re-exec once with passive waiting after
  // a short spin unless the user chose a policy (libgomp's default spinning on busy cores slowed
  // 2-thread runs 5-70x; passive alone pays a wake-up per parallel region: python/kiln/__init__.py).
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && !std::getenv("KILN_NO_REEXEC")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("GOMP_SPINCOUNT", "10000", 1);
    setenv("KILN_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
  }
  CLI::App app{"kiln: an inference compiler and runtime for ONNX models"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::version());
  app.require_subcommand(1);
  // --help shows every option's default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  app.footer(
      "Examples:\n"
      "  kiln info model.onnx\n"
      "  kiln build model.onnx -o model.kiln --device cuda --precision fp16\n"
      "  kiln run model.kiln -i input=x.npy --output-dir out/\n"
      "  kiln bench model.kiln --streams 2 --json bench.json\n"
      "  kiln compare model.onnx --against onnxruntime\n"
      "  kiln profile model.onnx -o prof   # prof.json (Chrome trace) and prof.html\n"
      "  kiln serve --model-repository models/ --http-port 8000\n"
      "Run 'kiln <command> --help' for a command's options.");

  const auto precisions = CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "best"});
  const Command info = add_info_command(app);
  const Command build = add_build_command(app);
  const Command cache = add_cache_command(app);
  const RunCommands run_group = add_run_commands(app, precisions);  // run, bench, profile
  const Command inspect = add_inspect_command(app);
  const Command compare = add_compare_command(app, precisions);
  const Command conform = add_conform_command(app, precisions);
  const Command serve = add_serve_command(app);

  size_t max_tensor_bytes = 0, max_memory = 0;
  for (auto* sc : {build.app, run_group.run.app, run_group.bench.app, compare.app, serve.app}) {
    sc->add_option("--max-tensor-bytes", max_tensor_bytes,
                   "refuse any tensor larger than this many bytes (default: physical memory; also KILN_MAX_TENSOR_BYTES)")
        ->check(CLI::PositiveNumber);
    sc->add_option("--max-memory", max_memory,
                   "stop with an error when kiln would hold more host memory than this many bytes at once (default: "
                   "physical memory; also KILN_MAX_MEMORY_BYTES)")
        ->check(CLI::PositiveNumber);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // CLI11's own message (or --help / --version, code 0)
    if (code != 0) std::cerr << did_you_mean(app, argc, argv);
    return code;
  }
  if (max_tensor_bytes) kiln::set_max_tensor_bytes(max_tensor_bytes);
  if (max_memory) kiln::set_max_memory_bytes(max_memory);

  for (const Command* c : {&info, &build, &cache, &run_group.run, &run_group.bench, &run_group.profile, &inspect,
                           &compare, &conform, &serve})
    if (*c->app) return c->run();
  return 1;  // not reached: the app requires one of its subcommands
}

}  // namespace
}  // namespace kiln_cli

// Nothing escapes as an abort: out-of-memory and any other exception become an error and exit 1.
int main(int argc, char** argv) {
  try {
    return kiln_cli::kiln_main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cerr << "kiln: error: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
  }
  return 1;
}
