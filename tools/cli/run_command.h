// tools/cli/run_command.h — `kiln run`, `kiln bench` and `kiln profile` share most of their options
// and open a model the same way, so one object holds the three commands' options: cmd_run.cpp adds the
// shared ones, opens the model and runs it once; cmd_bench.cpp and cmd_profile.cpp add their own
// options and do their own timing with the opened engine.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "commands.h"
#include "common.h"
#include "kiln/kiln.h"

namespace kiln_cli {

struct ProfileArgs {
  int runs = 20, warmup = 3;
  std::string out;  // prefix: PREFIX.json and PREFIX.html
};

// Runs the engine `warmup` times, then `runs` times with profiling on; writes the Chrome trace and
// the HTML report (per layer: op, kernel, device, precision, tactic, shapes, mean time) and prints
// the ten slowest layers.
int run_profile(const std::string& model_path, const kiln::Engine& e, kiln::ExecutionContext& ctx,
                const std::map<std::string, kiln::Value>& feed, const ProfileArgs& pa, const std::string& precision);

struct RunCommand {
  // run / bench share their options
  std::string run_path, run_device = "cpu", out_dir;
  Inputs inputs;
  int iterations = 50, warmup = 5;
  double run_timeout = 0;
  int run_threads = 0;
  bool no_cuda_graphs = false;
  std::string run_precision = "fp32";
  ProfileArgs profile_args;
  bool device_io = false;
  int streams = 1;
  double duration = 0;
  std::string bench_json;
  PluginArgs plugins;
  CacheArgs cache;
  CLI::App *run = nullptr, *bench = nullptr, *profile = nullptr;

  void add_to(CLI::App& app, const CLI::Validator& precisions);  // cmd_run.cpp: all three commands
  void add_profile_options();  // cmd_profile.cpp
  void add_bench_options();    // cmd_bench.cpp
  // Opens the model and its inputs, then runs it once (run), or hands it to run_profile or bench_engine.
  int execute();  // cmd_run.cpp

  // Makes one more context with the options' timeout, threads and CUDA graph switch.
  using NewContext = std::function<kiln::Expected<std::unique_ptr<kiln::ExecutionContext>>()>;
  int bench_engine(const kiln::Engine& e, std::unique_ptr<kiln::ExecutionContext> ctx,
                   const std::map<std::string, kiln::Value>& feed, const NewContext& new_context);  // cmd_bench.cpp
};

}  // namespace kiln_cli
