// tools/cli/cmd_compare.cpp — `kiln compare`: a model run two ways (devices, precisions or engine
// files), or against ONNX Runtime (tools/ort_reference.py), on the same inputs; outputs compared.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <sys/wait.h>
#include <system_error>
#include <unistd.h>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "common.h"
#include "kiln/kiln.h"
#include "util/utf8.h"

namespace kiln_cli {

namespace {

// `kiln compare --against onnxruntime`: the script (tools/ort_reference.py) that runs the reference.
constexpr const char kOrtReferencePy[] =
#include "ort_reference.inc"
    ;

// Runs `argv` (argv[0] looked up on PATH) and waits; its exit status, or -1 when it could not start.
int run_process(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ONNX Runtime's outputs for `model` on `feed` (by output name), through tools/ort_reference.py run
// with $KILN_PYTHON (else python3) in a temporary folder.
kiln::Status onnxruntime_reference(const std::string& model, const std::map<std::string, kiln::Value>& feed,
                                   std::vector<std::string>& names, std::vector<kiln::Value>& outputs, std::string& version) {
  const TempDir temp("kiln-compare");
  if (temp.path().empty()) return kiln::io_error("cannot make a temporary folder for onnxruntime's inputs");
  const std::filesystem::path dir = temp.path();
  std::filesystem::create_directories(dir / "out");
  nlohmann::json files = nlohmann::json::object();
  int k = 0;
  for (const auto& [name, v] : feed) {
    if (v.kind != kiln::Value::Kind::kTensor)
      return kiln::unsupported("--against onnxruntime: input '" + name + "' is not a tensor");
    const std::string file = std::to_string(k++) + ".npy";
    KILN_RETURN_IF_ERROR(kiln::write_npy((dir / file).string(), v.tensor));
    files[name] = file;
  }
  KILN_RETURN_IF_ERROR(write_text((dir / "inputs.json").string(), files.dump()));
  KILN_RETURN_IF_ERROR(write_text((dir / "ort_reference.py").string(), kOrtReferencePy));
  const char* py = std::getenv("KILN_PYTHON");
  const std::string python = py && *py ? py : "python3";
  const int rc = run_process({python, (dir / "ort_reference.py").string(), std::filesystem::absolute(model).string(),
                              dir.string(), (dir / "out").string()});
  if (rc == 3) return kiln::unsupported("--against onnxruntime: onnxruntime is not importable (see above)");
  if (rc != 0)
    return kiln::runtime_error("--against onnxruntime: " + python + " ort_reference.py failed (exit " + std::to_string(rc) +
                               (rc == 127 ? ": no such program; set KILN_PYTHON" : "") + ")");
  std::FILE* f = std::fopen((dir / "out" / "outputs.json").string().c_str(), "rb");
  if (!f) return kiln::io_error("--against onnxruntime: no outputs.json");
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  const nlohmann::json listing = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!listing.is_object() || !listing.contains("outputs") || !listing["outputs"].is_array()) return kiln::io_error("--against onnxruntime: bad outputs.json");
  version = listing.value("onnxruntime", "");
  for (const auto& item : listing["outputs"]) {
    if (!item.is_array() || item.size() != 2 || !item[0].is_string() || !item[1].is_string())
      return kiln::io_error("--against onnxruntime: bad outputs.json");
    names.push_back(item[0].get<std::string>());
    KILN_ASSIGN_OR_RETURN(kiln::Tensor t, kiln::read_npy((dir / "out" / item[1].get<std::string>()).string()));
    outputs.push_back(kiln::Value::of(std::move(t)));
  }
  return kiln::Status::Ok();
}

struct CompareCommand {
  std::string cmp_a, cmp_b, cmp_device_a = "cpu", cmp_device_b = "cuda";
  Inputs cmp_inputs;
  double cmp_rtol = 1e-4;
  int cmp_runs = 1;
  std::string cmp_precision_a = "fp32", cmp_precision_b = "fp32";
  std::string cmp_against;
  double cmp_atol = -1, cmp_rtol_given = -1;
  CLI::Option* device_b_opt = nullptr;
  PluginArgs plugins;
  CacheArgs cache;

  CLI::App* add_to(CLI::App& app, const CLI::Validator& precisions);
  int execute();
};

CLI::App* CompareCommand::add_to(CLI::App& app, const CLI::Validator& precisions) {
  auto* compare = app.add_subcommand("compare", "Run a model two ways (devices or engine files) on the same inputs and compare outputs");
  compare->add_option("model", cmp_a, "model.onnx or model.kiln (side A)")->required();
  compare->add_option("other", cmp_b, "a second model/engine (side B; default: the same model on --device-b)");
  compare->add_option("--device-a", cmp_device_a, "device for side A when it is an .onnx")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  device_b_opt =
      compare->add_option("--device-b", cmp_device_b,
                          "device for side B when it is an .onnx (default: cuda for one model, side A's device for two)")
          ->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  compare->add_option("--precision-a", cmp_precision_a, "precision of side A when it is an .onnx")->check(precisions);
  compare->add_option("--precision-b", cmp_precision_b, "precision of side B when it is an .onnx")->check(precisions);
  compare->add_option("--input,-i", cmp_inputs.specs, "name=file.npy (repeatable), name=file.npz (its array of that name, or its only one) or file.npz (all its arrays, by their names); missing inputs get random data");
  compare->add_option("--seed", cmp_inputs.seed, "seed for random inputs");
  compare->add_option("--against", cmp_against,
                      "compare side A with another runtime instead: onnxruntime (its CPU provider, run by $KILN_PYTHON or "
                      "python3; elementwise check)")
      ->check(CLI::IsMember({"onnxruntime"}));
  compare->add_option("--rtol", cmp_rtol_given,
                      "relative tolerance: of an output's relative L2 error (default 1e-4), or per element with --atol or "
                      "--against (default 1e-4)");
  compare->add_option("--atol", cmp_atol,
                      "check every element: |a - b| <= atol + rtol * |b|, b the reference (default with --against: 1e-5)");
  compare->add_option("--runs", cmp_runs, "run each side this many times and compare the last outputs")
      ->check(CLI::PositiveNumber);
  plugins.add_to(*compare);
  cache.add_to(*compare);
  return compare;
}

int CompareCommand::execute() {
  if (cmp_rtol_given >= 0) cmp_rtol = cmp_rtol_given;
  Tolerance tol{cmp_rtol, std::max(cmp_atol, 0.0), cmp_atol >= 0};
  const bool against = !cmp_against.empty();
  if (against) {
    if (!cmp_b.empty()) return fail(kiln::invalid_argument("give either a second model or --against, not both"));
    if (is_engine_file(cmp_a)) return fail(kiln::invalid_argument("--against onnxruntime needs an .onnx model, not an engine file"));
    tol.elementwise = true;
    if (cmp_atol < 0) tol.atol = 1e-5;
  }
  kiln::BuildOptions oa;
  plugins.apply(oa);
  oa.device = parse_device(cmp_device_a);
  oa.precision = parse_precision(cmp_precision_a);
  cache.apply(oa, cmp_a);
  auto a = kiln::Engine::open(cmp_a, oa, cache.load_options());
  if (!a.ok()) return fail(a.status());
  auto feed = load_inputs(**a, cmp_inputs);
  if (!feed.ok()) return fail(feed.status());
  // With --runs N each side runs N times on one context and the last outputs are compared: the
  // steady state (replayed CUDA graphs from the third run of a GPU engine), not only the first run.
  auto run_side = [&](const kiln::Engine& e) -> kiln::Expected<std::vector<kiln::Value>> {
    KILN_ASSIGN_OR_RETURN(auto ctx, e.create_context());
    auto r = ctx->run(*feed);
    for (int k = 1; k < cmp_runs && r.ok(); ++k) r = ctx->run(*feed);
    return r;
  };
  auto ra = run_side(**a);
  if (!ra.ok()) return fail(ra.status());
  if (against) {
    // onnxruntime's Python API takes and gives names as str: a name that is not UTF-8 cannot cross
    // it (nor the JSON that lists the inputs for it), so say so rather than fail inside either.
    for (const auto* infos : {&(*a)->inputs(), &(*a)->outputs()})
      for (const kiln::TensorInfo& i : *infos)
        if (kiln::utf8_length(i.name) == SIZE_MAX)
          return fail(kiln::unsupported("--against onnxruntime: the name '" + kiln::escape_invalid_utf8(i.name) +
                                        "' is not valid UTF-8, and onnxruntime's Python API takes names as str only; "
                                        "compare two kiln sides instead (kiln compare MODEL --device-b cpu)"));
    std::vector<std::string> ref_names;
    std::vector<kiln::Value> ref;
    std::string ort_version;
    if (kiln::Status st = onnxruntime_reference(cmp_a, *feed, ref_names, ref, ort_version); !st.ok()) return fail(st);
    std::printf("A: %s (kiln, %s)\nB: onnxruntime %s (CPUExecutionProvider)\n", cmp_a.c_str(),
                (*a)->metadata()["device"].c_str(), ort_version.c_str());
    const bool ok = print_comparison(output_names(**a), *ra, ref_names, ref, tol);
    std::printf("%s\n", ok ? "PASSED" : "FAILED");
    return ok ? 0 : 2;
  }
  // Two models are compared on one device unless told otherwise; one model, across devices.
  if (!cmp_b.empty() && device_b_opt->count() == 0) cmp_device_b = cmp_device_a;
  kiln::BuildOptions ob;
  plugins.apply(ob);
  ob.device = parse_device(cmp_device_b);
  ob.precision = parse_precision(cmp_precision_b);
  cache.apply(ob, cmp_b.empty() ? cmp_a : cmp_b);
  auto b = kiln::Engine::open(cmp_b.empty() ? cmp_a : cmp_b, ob, cache.load_options());
  if (!b.ok()) return fail(b.status());
  auto rb = run_side(**b);
  if (!rb.ok()) return fail(rb.status());
  if (ra->size() != rb->size())
    std::printf("note: A has %zu outputs, B %zu; each of A's is compared with B's of the same name\n", ra->size(), rb->size());
  std::printf("A: %s (%s)\nB: %s (%s)\n", cmp_a.c_str(), (*a)->metadata()["device"].c_str(),
              (cmp_b.empty() ? cmp_a : cmp_b).c_str(), (*b)->metadata()["device"].c_str());
  const bool ok = print_comparison(output_names(**a), *ra, output_names(**b), *rb, tol);
  return ok ? 0 : 2;
}

}  // namespace

Command add_compare_command(CLI::App& app, const CLI::Validator& precisions) {
  return make_command<CompareCommand>(app, precisions);
}

}  // namespace kiln_cli
