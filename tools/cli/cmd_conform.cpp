// tools/cli/cmd_conform.cpp — `kiln conform`: its options; the runner is tools/conform.cpp.
#include <CLI/CLI.hpp>

#include <string>

#include "commands.h"
#include "common.h"
#include "conform.h"

namespace kiln_cli {

namespace {

struct ConformCommand {
  ConformOptions conform_opts;
  std::string conform_device = "cpu", conform_precision = "fp32";

  CLI::App* add_to(CLI::App& app, const CLI::Validator& precisions);
  int execute();
};

CLI::App* ConformCommand::add_to(CLI::App& app, const CLI::Validator& precisions) {
  auto* conform = app.add_subcommand(
      "conform", "Run onnx-style test folders (model.onnx + test_data_set_N/*.pb, as onnx's node tests) and compare outputs");
  conform->add_option("tests", conform_opts.paths, "test folders, or folders of them (e.g. onnx's backend/test/data/node)")
      ->required();
  conform->add_option("--device", conform_device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  conform->add_option("--precision", conform_precision, "fp32, tf32, fp16, bf16 or best (cuda)")->check(precisions);
  conform->add_option("--opt-level", conform_opts.build.opt_level, "0-3")->check(CLI::Range(0, 3));
  conform->add_option("--rtol", conform_opts.rtol, "relative tolerance for float outputs (default 1e-3)");
  conform->add_option("--atol", conform_opts.atol, "absolute tolerance for float outputs (default 1e-7)");
  conform->add_option("--filter", conform_opts.filter, "regex: run only tests whose name matches");
  conform->add_option("--json", conform_opts.json, "write one JSON line per test here");
  conform->add_flag("-v,--verbose", conform_opts.verbose, "print every test, not only failures");
  conform->add_flag("--placement-only", conform_opts.placement_only,
                    "plan placement only (no GPU needed): a test is 'placed' when every node would run on the device, "
                    "'placed-fallback' when some would run on the CPU; the CPU nodes are counted per op");
  return conform;
}

int ConformCommand::execute() {
  conform_opts.build.device = parse_device(conform_device);
  conform_opts.build.precision = parse_precision(conform_precision);
  return run_conform(conform_opts);
}

}  // namespace

Command add_conform_command(CLI::App& app, const CLI::Validator& precisions) {
  return make_command<ConformCommand>(app, precisions);
}

}  // namespace kiln_cli
