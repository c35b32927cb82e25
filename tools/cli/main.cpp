// tools/cli/main.cpp — the `kiln` command: the app and its common options; each subcommand is a
// tools/cli/cmd_*.cpp (commands.h), and the one the command line chose runs.
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <unistd.h>

#include "commands.h"
#include "kiln/kiln.h"

namespace kiln_cli {
namespace {

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

  CLI11_PARSE(app, argc, argv);
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
