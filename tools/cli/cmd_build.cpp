// tools/cli/cmd_build.cpp — `kiln build`: an engine file from an ONNX model (precision, 8-bit
// calibration, tuning, shape profiles), then a reduced-precision engine's accuracy against float32.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "commands.h"
#include "common.h"
#include "conform.h"  // format_placement
#include "builder/precision.h"
#include "kiln/kiln.h"
#include "util/file.h"

namespace kiln_cli {

namespace {

// "name:1x3x224x224,mask:1x128" (trtexec's form) into `out`; false with `why` when malformed.
bool parse_shapes(const std::string& spec, std::map<std::string, std::vector<int64_t>>& out, std::string& why) {
  size_t b = 0;
  while (b <= spec.size()) {
    size_t e = spec.find(',', b);
    if (e == std::string::npos) e = spec.size();
    const std::string item = spec.substr(b, e - b);
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size()) {
      why = "'" + item + "' is not name:dims (dims like 1x3x224x224)";
      return false;
    }
    std::vector<int64_t> dims;
    const std::string d = item.substr(colon + 1);
    size_t k = 0;
    while (k <= d.size()) {
      size_t x = d.find('x', k);
      if (x == std::string::npos) x = d.size();
      const std::string num = d.substr(k, x - k);
      if (num.empty() || num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos) {
        why = "'" + item + "': dims must be non-negative integers separated by 'x'";
        return false;
      }
      dims.push_back(std::stoll(num));
      k = x + 1;
    }
    out[item.substr(0, colon)] = dims;
    b = e + 1;
  }
  return true;
}

// Build progress on stderr: one line rewritten in place on a terminal, plain lines otherwise (for
// tuning, one every tenth of the layers).
std::function<void(const kiln::BuildProgress&)> progress_printer() {
  const bool tty = isatty(2);
  auto last_tenth = std::make_shared<int>(-1);
  return [tty, last_tenth](const kiln::BuildProgress& p) {
    if (p.stage == "tune" && p.total > 0) {
      const double eta = p.done > 0 ? p.seconds / p.done * (p.total - p.done) : 0;  // rough: time so far includes earlier stages
      if (tty) {
        std::fprintf(stderr, "\r\033[K[%6.1fs] tune %d/%d %s (eta %.0fs)", p.seconds, p.done, p.total, p.detail.c_str(), eta);
      } else if (p.done * 10 / p.total != *last_tenth) {
        *last_tenth = p.done * 10 / p.total;
        std::fprintf(stderr, "[%6.1fs] tune %d/%d %s\n", p.seconds, p.done, p.total, p.detail.c_str());
      }
      return;
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (p.stage == "done") {
      std::fprintf(stderr, "[%6.1fs] built\n", p.seconds);
      return;
    }
    std::fprintf(stderr, tty ? "[%6.1fs] %s" : "[%6.1fs] %s\n", p.seconds, p.stage.c_str());
  };
}

struct BuildCommand {
  std::string build_path, build_out, build_device = "cpu";
  int opt_level = 2;
  bool verbose = false, build_no_check = false;
  double build_check_rtol = 5e-2;
  bool build_tune = false, build_no_tune = false, build_quiet = false;
  std::string timing_cache, shapes_spec;
  std::vector<std::string> min_shapes, opt_shapes, max_shapes;
  double tune_layer_seconds = 2.0;
  double tune_budget = kiln::BuildOptions{}.tune_budget_seconds;
  double build_timeout = 0;
  std::vector<std::string> build_disabled;
  bool build_placement_only = false;
  std::string build_precision = "fp32", rest_precision;
  bool build_int8 = false, half_outputs = false;
  std::string calib_dir, calib_method = "minmax", calib_cache;
  double calib_percentile = 99.99;
  double accuracy_budget = 0;
  std::string accuracy_metric = "rel_l2";
  PluginArgs plugins;

  CLI::App* add_to(CLI::App& app);
  int execute();
};

CLI::App* BuildCommand::add_to(CLI::App& app) {
  auto* build = app.add_subcommand("build", "Build an engine file from an ONNX model");
  build->add_option("model", build_path, "model.onnx")->required();
  build->add_option("-o,--output", build_out, "engine file to write (default: model.kiln)");
  build->add_option("--device", build_device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  build->add_option("--opt-level", opt_level, "0 none, 1 folding/cleanup, 2 + fusions (default), 3 + aggressive")->check(CLI::Range(0, 3));
  build->add_flag("-v,--verbose", verbose, "log optimizer and planner decisions");
  build->add_flag("--no-accuracy-check", build_no_check,
                  "skip running a reduced-precision engine against a float32 engine after the build");
  build->add_option("--accuracy-rtol", build_check_rtol, "relative L2 above which the accuracy check flags an output");
  build->add_flag("--tune", build_tune, "time every layer's candidate kernels (tactics) on the device and keep the fastest "
                                        "(default for cuda engines)");
  build->add_flag("--no-tune", build_no_tune, "no tuning: every kernel runs its own choice");
  build->add_option("--timing-cache", timing_cache,
                    "read measured tactic times from FILE and add this build's to it (a folder: one file per device in it)");
  build->add_option("--tune-layer-seconds", tune_layer_seconds, "time limit for tuning one layer")->check(CLI::PositiveNumber);
  build->add_option("--tune-budget", tune_budget,
                    "seconds the whole build may spend tuning (0: no limit); layers reached later keep their kernels' "
                    "own choices, and a later build with --timing-cache times them")
      ->check(CLI::NonNegativeNumber);
  build->add_option("--timeout", build_timeout, "stop the build (an error) once it has taken this many seconds")
      ->check(CLI::PositiveNumber);
  build->add_option("--shapes", shapes_spec, "fixed input shapes, e.g. input:1x3x224x224,mask:1x128 (one profile, min = opt = max)");
  build->add_option("--min-shapes", min_shapes, "smallest input shapes of a profile (repeat --min/--opt/--max-shapes for more profiles)");
  build->add_option("--opt-shapes", opt_shapes, "the shapes a profile is tuned for");
  build->add_option("--max-shapes", max_shapes, "largest input shapes of a profile");
  build->add_flag("-q,--quiet", build_quiet, "no progress lines and no placement table");
  build->add_option("--disable-pass", build_disabled,
                    "skip a pass by name (repeatable): one of the optimizer's (kiln inspect lists them) or a target "
                    "stage: channels-last, channels-last-float-convs, fold-pools-into-convs, fuse-conv-max-pool, "
                    "fuse-qconv-residual, signed-activations, quantize-half-directly, products-write-half, products-write-float");
  build->add_flag("--placement-only", build_placement_only,
                  "import and optimize, then print where each node would run and why (no engine is written; needs no GPU)");
  build->add_option("--precision", build_precision,
                    "fp32, or for cuda engines tf32 (TF32 tensor cores for float32 convolutions/GEMMs), fp16/bf16 "
                    "(float32 accumulation; inputs and outputs keep their dtypes) or best (fp16 + tf32); or 8 bits from "
                    "--calibration data, the rest in --rest-precision: int8 (Conv/MatMul/Gemm with constant weights, int8 "
                    "weights with a scale per output channel; cpu: uint8 activations; cuda: MatMul/Gemm on int8 tensor "
                    "cores, convolutions with 16+ input channels through cuDNN with int8 activations, residual adds fused) "
                    "or fp8 (MatMul/Gemm with constant weights, and on cuda the convolutions, in FP8 E4M3 on Hopper; a cpu "
                    "engine emulates the FP8 products, to measure their accuracy)")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "best", "fp8", "int8"}));
  build->add_option("--rest-precision", rest_precision,
                    "--precision int8/fp8: the precision of what does not run in 8 bits (default: fp16 on cuda, fp32 on "
                    "cpu; int8 takes fp32, tf32, fp16, bf16 or best, fp8 only its default)")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "best"}));

  build->add_flag("--half-outputs", half_outputs,
                  "a reduced-precision engine gives the outputs it computes in float16/bfloat16 in that type instead of "
                  "casting them back to float32 (half the bytes; as ONNX Runtime's keep_io_types=False, TensorRT's half "
                  "output formats and torch's model.half())");
  build->add_flag("--int8", build_int8,
                  "deprecated, the older spelling of --precision int8: --int8 --precision P is --precision int8 "
                  "--rest-precision P (so --int8 alone keeps the rest fp32 on cuda)");
  build->add_option("--calibration", calib_dir,
                    "folder of calibration input sets: one subfolder per set with <input name>.npy, or one .npy per set "
                    "for a one-input model");
  build->add_option("--calibration-method", calib_method, "minmax, entropy (least KL divergence) or percentile")
      ->check(CLI::IsMember({"minmax", "entropy", "percentile"}));
  build->add_option("--percentile", calib_percentile, "the percentile of |x| kept by --calibration-method percentile")
      ->check(CLI::Range(0.0, 100.0));
  build->add_option("--accuracy-budget", accuracy_budget,
                    "--precision int8/fp8: keep the products whose 8-bit error costs most in the rest's precision, as few as hold the engine within "
                    "this error against float32 on the calibration data")
      ->check(CLI::NonNegativeNumber);
  build->add_option("--accuracy-metric", accuracy_metric, "the budget's metric: rel_l2 (outputs) or top1 (share of changed argmax)")
      ->check(CLI::IsMember({"rel_l2", "top1"}));
  build->add_option("--calibration-cache", calib_cache,
                    "read the ranges from FILE when it was written for this model and method, else write them to it");
  plugins.add_to(*build);
  return build;
}

int BuildCommand::execute() {
  kiln::BuildOptions o;
  plugins.apply(o);
  o.device = parse_device(build_device);
  o.precision = parse_precision(build_precision);
  if (!rest_precision.empty()) o.rest_precision = parse_precision(rest_precision);
  o.half_outputs = half_outputs;
  o.opt_level = opt_level;
  o.verbose = verbose;
  o.tune = build_no_tune ? 0 : build_tune ? 1 : -1;
  o.timing_cache = timing_cache;
  o.tune_layer_seconds = tune_layer_seconds;
  o.tune_budget_seconds = tune_budget;
  o.timeout_s = build_timeout;
  o.int8 = build_int8;
  o.calibration_dir = calib_dir;
  o.calibration_method = calib_method;
  o.calibration_percentile = calib_percentile;
  o.calibration_cache = calib_cache;
  o.accuracy_budget = accuracy_budget;
  o.accuracy_metric = accuracy_metric;
  o.disabled_passes = build_disabled;
  const bool eight_bit = build_int8 || kiln::precision_row(o.precision).is_8bit();
  if (!eight_bit && accuracy_budget > 0) return fail(kiln::invalid_argument("--accuracy-budget is for --precision int8 and fp8 builds"));
  if (!eight_bit && (!calib_dir.empty() || !calib_cache.empty()))
    return fail(kiln::invalid_argument("--calibration and --calibration-cache are for --precision int8 and fp8 builds"));
  if (!build_quiet) o.progress = progress_printer();
  if (!timing_cache.empty() && !o.tunes())
    std::fprintf(stderr, "kiln: --timing-cache %s: this build tunes nothing (%s), so the cache is neither read nor "
                 "written; add --tune to time the kernels' tactics\n", timing_cache.c_str(),
                 build_no_tune ? "--no-tune" : "a cpu engine tunes only with --tune");
  std::string why;
  if (!shapes_spec.empty()) {
    if (!min_shapes.empty() || !opt_shapes.empty() || !max_shapes.empty())
      return fail(kiln::invalid_argument("give either --shapes or --min/--opt/--max-shapes"));
    kiln::ShapeProfile p;
    if (!parse_shapes(shapes_spec, p.opt, why)) return fail(kiln::invalid_argument("--shapes: " + why));
    p.min = p.max = p.opt;
    o.profiles.push_back(p);
  }
  if (min_shapes.size() != opt_shapes.size() || max_shapes.size() != opt_shapes.size())
    return fail(kiln::invalid_argument("each profile needs --min-shapes, --opt-shapes and --max-shapes (got " +
                                       std::to_string(min_shapes.size()) + ", " + std::to_string(opt_shapes.size()) + ", " +
                                       std::to_string(max_shapes.size()) + ")"));
  for (size_t k = 0; k < opt_shapes.size(); ++k) {
    kiln::ShapeProfile p;
    if (!parse_shapes(min_shapes[k], p.min, why) || !parse_shapes(opt_shapes[k], p.opt, why) ||
        !parse_shapes(max_shapes[k], p.max, why))
      return fail(kiln::invalid_argument("profile " + std::to_string(k) + ": " + why));
    for (const auto* m : {&p.min, &p.max})
      for (const auto& [name, dims] : *m)
        if (!p.opt.count(name))
          return fail(kiln::invalid_argument("profile " + std::to_string(k) + ": '" + name + "' has min/max shapes but no opt shape"));
    for (const auto& [name, dims] : p.opt)
      if (!p.min.count(name) || !p.max.count(name))
        return fail(kiln::invalid_argument("profile " + std::to_string(k) + ": '" + name + "' needs min, opt and max shapes"));
    o.profiles.push_back(p);
  }
  if (build_placement_only) {
    auto placed = kiln::Engine::plan_placement(build_path, o);
    if (!placed.ok()) return fail(placed.status());
    std::printf("%s", format_placement(*placed).c_str());
    return 0;
  }
  if (build_out.empty()) build_out = std::filesystem::path(build_path).replace_extension(".kiln").string();
  // Refused before the build rather than after it: writing into a FIFO would wait for a reader.
  // /dev/null takes the engine (Engine::save), to time a build without keeping it.
  if (kiln::Status st = kiln::check_writable_file(build_out, "engine file"); !st.ok() && !kiln::is_null_device(build_out))
    return fail(st);
  // A reduced-precision engine (8-bit ones too) is checked against a float32 engine of the same model
  // on random inputs (dynamic dims 1), steady-state runs (third, a replayed CUDA graph), output by output.
  const bool check_accuracy = (eight_bit || o.precision != kiln::Precision::kFloat32) && !build_no_check;
  kiln::BuildOptions o32 = o;
  o32.precision = kiln::Precision::kFloat32;
  o32.rest_precision.reset();
  o32.half_outputs = false;
  o32.int8 = false;
  o32.calibration_dir.clear();
  o32.calibration_cache.clear();
  o32.accuracy_budget = 0;
  o32.verbose = false;
  o32.tune = 0;
  o32.timing_cache.clear();
  o32.progress = nullptr;
  // For a CUDA engine the float32 reference is built on a thread of its own while the engine builds:
  // it is host work (import, optimize, plan) and an untimed upload, and a warm build of GPT-2 waited
  // 1.3 s for it afterwards (#41). A CPU engine's reference is built after it: both would share the
  // cores, and a CPU build's tuning times kernels on them.
  std::future<kiln::Expected<std::shared_ptr<kiln::Engine>>> reference;
  if (check_accuracy && o.device == kiln::DeviceType::kCUDA)
    reference = std::async(std::launch::async, [&] { return kiln::Engine::build(build_path, o32); });
  const auto t0 = std::chrono::steady_clock::now();
  auto e = kiln::Engine::build(build_path, o);
  if (!e.ok()) return fail(e.status());
  const double build_ms = ms_since(t0);
  if (!build_quiet) std::printf("placement:\n%s", (*e)->placement_report().c_str());
  kiln::Status st = (*e)->save(build_out);
  if (!st.ok()) return fail(st);
  if (eight_bit) {
    const auto meta = (*e)->metadata();
    const std::string tag = meta.at("precision");  // "int8" or "fp8": the report's keys
    const char* t = tag.c_str();
    auto get = [&meta, &tag](const std::string& k) {
      auto it = meta.find(tag + "." + k);
      return it == meta.end() ? std::string("?") : it->second;
    };
    std::printf("%s: %s products in 8 bits; activation ranges from %s\n", t, get("products").c_str(), get("calibration").c_str());
    if (meta.count(tag + ".layers")) {
      std::printf("%s: per product (precision, the metric with only it in 8 bits):\n", t);
      std::istringstream lines(meta.at(tag + ".layers"));
      std::string name, op, prec, sens;
      while (lines >> name >> op >> prec >> sens) std::printf("  %-40s %-8s %-5s %s\n", name.c_str(), op.c_str(), prec.c_str(), sens.c_str());
      std::printf("%s: measured on the calibration data: %s\n", t, get("error").c_str());
    }
    const std::string rel = tag + ".rel_l2.";
    for (const auto& [k, v] : meta)
      if (k.rfind(rel, 0) == 0)
        std::printf("%s: output '%s' relative L2 against the float32 engine %s (first calibration set)\n", t, k.substr(rel.size()).c_str(),
                    v.c_str());
  }
  if (check_accuracy) {
    auto check = [&]() -> kiln::Status {
      KILN_ASSIGN_OR_RETURN(auto ref, reference.valid() ? reference.get() : kiln::Engine::build(build_path, o32));
      KILN_ASSIGN_OR_RETURN(auto feed, load_inputs(*ref, Inputs{}));
      KILN_ASSIGN_OR_RETURN(auto c32, ref->create_context());
      KILN_ASSIGN_OR_RETURN(auto c16, (*e)->create_context());
      std::vector<kiln::Value> r32, r16;
      for (int r = 0; r < 3; ++r) {
        KILN_ASSIGN_OR_RETURN(r32, c32->run(feed));
        KILN_ASSIGN_OR_RETURN(r16, c16->run(feed));
      }
      std::printf("accuracy against a float32 engine (random inputs, dynamic dims 1; relative L2 > %.0e is flagged):\n",
                  build_check_rtol);
      print_comparison(output_names(*ref), r32, output_names(**e), r16, Tolerance{build_check_rtol, 0, false});
      return kiln::Status::Ok();
    };
    if (kiln::Status cs = check(); !cs.ok())
      std::printf("accuracy check against a float32 engine: not run (%s)\n", cs.to_string().c_str());
  }
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(build_out, ec);  // none for /dev/null
  std::printf("built %s for %s in %.1f ms -> %s (%s)\n", build_path.c_str(), build_device.c_str(), build_ms,
              build_out.c_str(), ec ? "a device: nothing kept" : (std::to_string(size) + " bytes").c_str());
  return 0;
}

}  // namespace

Command add_build_command(CLI::App& app) { return make_command<BuildCommand>(app); }

}  // namespace kiln_cli
