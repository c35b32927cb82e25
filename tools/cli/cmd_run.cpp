// tools/cli/cmd_run.cpp — `kiln run`: a model or an engine file run once, its outputs printed (and
// written as .npy); also the options `kiln bench` and `kiln profile` share with it and how the three
// open a model (run_command.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>

#include "commands.h"
#include "common.h"
#include "kiln/kiln.h"
#include "run_command.h"
#include "util/utf8.h"

namespace kiln_cli {

namespace {

// A file name for an output: the model names its outputs, so the name is untrusted — any character
// outside [A-Za-z0-9._-] becomes '_' (no '/', no '..' component, nothing absolute), a leading '.'
// gets a '_' in front, and a name already taken gets a numeric suffix. Every file stays in the folder.
std::string output_file_stem(const std::string& name, std::set<std::string>& taken) {
  std::string stem;
  for (char c : name.substr(0, 200)) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    stem += ok ? c : '_';
  }
  if (stem.empty() || stem[0] == '.') stem = "_" + stem;
  std::string unique = stem;
  for (int k = 2; !taken.insert(unique).second; ++k) unique = stem + "_" + std::to_string(k);
  return unique;
}

void print_tensor_summary(const std::string& name, const kiln::Tensor& t) {
  std::printf("  %s: %s %s", name.c_str(), kiln::dtype_name(t.dtype()), kiln::shape_to_string(t.shape()).c_str());
  if (t.dtype() == kiln::DataType::kFloat32 && t.numel() > 0) {
    const float* p = t.data<float>();
    double sum = 0, mn = p[0], mx = p[0];
    for (int64_t i = 0; i < t.numel(); ++i) { sum += p[i]; mn = std::min<double>(mn, p[i]); mx = std::max<double>(mx, p[i]); }
    std::printf("  min %.6g max %.6g mean %.6g  first:", mn, mx, sum / t.numel());
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 5); ++i) std::printf(" %.6g", p[i]);
  } else if (t.dtype() == kiln::DataType::kInt64 && t.numel() > 0) {
    std::printf("  first:");
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 8); ++i) std::printf(" %lld", static_cast<long long>(t.data<int64_t>()[i]));
  }
  std::printf("\n");
}

}  // namespace

void RunCommand::add_to(CLI::App& app, const CLI::Validator& precisions) {
  run = app.add_subcommand("run", "Run an engine (or an ONNX model) once and print its outputs");
  bench = app.add_subcommand("bench", "Time repeated runs (median, min, max)");
  profile = app.add_subcommand("profile", "Time every layer: a Chrome trace (PREFIX.json) and an HTML report (PREFIX.html)");
  add_profile_options();
  for (auto* sc : {run, bench, profile}) {
    sc->add_option("model", run_path, "model.kiln or model.onnx")->required();
    sc->add_option("--input,-i", inputs.specs, "name=file.npy (repeatable), name=file.npz (its array of that name, or its only one) or file.npz (all its arrays, by their names); missing inputs get random data");
    sc->add_option("--device", run_device, "cpu or cuda (for .onnx files)")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
    sc->add_option("--precision", run_precision, "fp32, tf32, fp16, bf16 or best (for .onnx files on cuda)")->check(precisions);
    sc->add_option("--seed", inputs.seed, "seed for random inputs");
    sc->add_option("--timeout", run_timeout, "stop any run that takes longer than this many seconds (an error)")
        ->check(CLI::NonNegativeNumber);
    sc->add_flag("--no-cuda-graphs", no_cuda_graphs, "launch every GPU step on its own instead of replaying CUDA graphs");
    sc->add_option("--threads", run_threads,
                   "CPU threads per run (ONNX Runtime's intra_op_num_threads; 0: all cores or OMP_NUM_THREADS)")
        ->check(CLI::Range(0, 1024));
    plugins.add_to(*sc);
    cache.add_to(*sc);
  }
  run->add_option("--output-dir", out_dir, "write each output as <name>.npy here");
  add_bench_options();
}

int RunCommand::execute() {
  // Options that only apply when an .onnx is built are ignored for an engine file: say so.
  for (auto* sc : {run, bench, profile})
    if (*sc && is_engine_file(run_path))
      for (const char* opt : {"--device", "--precision"})
        if (sc->count(opt))
          std::fprintf(stderr, "kiln: warning: %s is ignored for an engine file (%s was built for its device and precision)\n",
                       opt, run_path.c_str());

  // run / bench
  kiln::BuildOptions o;
  plugins.apply(o);
  o.device = parse_device(run_device);
  o.precision = parse_precision(run_precision);
  o.threads = run_threads;  // an .onnx is built on the threads it will run on
  cache.apply(o, run_path);
  const auto t0 = std::chrono::steady_clock::now();
  auto e = kiln::Engine::open(run_path, o, cache.load_options());
  if (!e.ok()) return fail(e.status());
  const double load_ms = ms_since(t0);
  // A context as the options ask (bench --streams makes more of them).
  auto new_context = [&]() -> kiln::Expected<std::unique_ptr<kiln::ExecutionContext>> {
    KILN_ASSIGN_OR_RETURN(auto c, (*e)->create_context());
    c->set_run_timeout(run_timeout);
    if (run_threads > 0) c->set_num_threads(run_threads);
    if (no_cuda_graphs) c->set_cuda_graphs(false);
    return c;
  };
  auto ctx = new_context();
  if (!ctx.ok()) return fail(ctx.status());
  auto feed = load_inputs(**e, inputs);
  if (!feed.ok()) return fail(feed.status());
  std::printf("engine: %s (device %s, loaded/built in %.1f ms)\n", run_path.c_str(),
              (*e)->metadata()["device"].c_str(), load_ms);
  if (*profile) return run_profile(run_path, **e, **ctx, *feed, profile_args, run_precision);

  if (*run) {
    if (!out_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(out_dir, ec);
      if (ec || !std::filesystem::is_directory(out_dir))
        return fail(kiln::invalid_argument("--output-dir '" + out_dir + "': cannot create the folder" +
                                           (ec ? " (" + ec.message() + ")" : std::string(" (a file of that name exists)"))));
    }
    std::set<std::string> taken;
    const auto t1 = std::chrono::steady_clock::now();
    auto outs = (*ctx)->run(*feed);
    if (!outs.ok()) return fail(outs.status());
    const double first_ms = ms_since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    auto again = (*ctx)->run(*feed);
    if (!again.ok()) return fail(again.status());
    const double warm_ms = ms_since(t2);
    std::printf("outputs:\n");
    for (size_t i = 0; i < outs->size(); ++i) {
      const auto& name = (*e)->outputs()[i].name;
      const std::string shown = kiln::escape_invalid_utf8(name);  // a name is bytes; what is printed, text
      const kiln::Value& v = (*outs)[i];
      if (v.kind == kiln::Value::Kind::kTensor) {
        print_tensor_summary(shown, v.tensor);
        if (!out_dir.empty() && v.tensor.dtype() == kiln::DataType::kString) {
          std::printf("    (not written: .npy holds strings only as pickled objects)\n");
        } else if (!out_dir.empty()) {
          const std::string stem = output_file_stem(name, taken);
          kiln::Status st = kiln::write_npy((std::filesystem::path(out_dir) / (stem + ".npy")).string(), v.tensor);
          if (!st.ok()) return fail(st);
          if (stem != name) std::printf("    (written as %s.npy)\n", stem.c_str());
        }
      } else if (v.kind == kiln::Value::Kind::kSequence) {
        std::printf("  %s: sequence of %zu tensors\n", shown.c_str(), v.sequence.size());
      } else {
        std::printf("  %s: none\n", shown.c_str());
      }
    }
    std::printf("time: first run %.3f ms, second run %.3f ms\n", first_ms, warm_ms);
    if (!out_dir.empty()) std::printf("outputs written to %s\n", out_dir.c_str());
    return 0;
  }

  return bench_engine(**e, std::move(*ctx), *feed, new_context);
}

RunCommands add_run_commands(CLI::App& app, const CLI::Validator& precisions) {
  auto c = std::make_shared<RunCommand>();
  c->add_to(app, precisions);
  auto execute = [c] { return c->execute(); };
  return {{c->run, execute}, {c->bench, execute}, {c->profile, execute}};
}

}  // namespace kiln_cli
