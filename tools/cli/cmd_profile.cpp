// tools/cli/cmd_profile.cpp — `kiln profile`: every layer timed over profiled runs, written as a
// Chrome trace and an HTML report (tools/profile_report.html), the slowest layers printed.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common.h"
#include "kiln/kiln.h"
#include "run_command.h"

namespace kiln_cli {

namespace {

// `kiln profile`: the report template (tools/profile_report.html) with one placeholder line.
constexpr const char kReportHtml[] =
#include "profile_report.inc"
    ;

}  // namespace

void RunCommand::add_profile_options() {
  profile->add_option("--runs", profile_args.runs, "profiled runs")->check(CLI::PositiveNumber);
  profile->add_option("--warmup", profile_args.warmup, "unprofiled runs first")->check(CLI::NonNegativeNumber);
  profile->add_option("-o,--output", profile_args.out, "prefix of the files to write (default: <model>_profile)");
  profile->footer("Example:\n  kiln profile model.onnx --runs 50 -o prof   # writes prof.json and prof.html");
}

int run_profile(const std::string& model_path, const kiln::Engine& e, kiln::ExecutionContext& ctx,
                const std::map<std::string, kiln::Value>& feed, const ProfileArgs& pa, const std::string& precision) {
  for (int i = 0; i < pa.warmup; ++i)
    if (auto r = ctx.run(feed); !r.ok()) return fail(r.status());
  std::vector<double> run_ms;
  ctx.set_profiling(true);
  for (int i = 0; i < pa.runs; ++i)
    if (auto r = ctx.run(feed); !r.ok()) return fail(r.status());
  const std::vector<kiln::ProfileEvent> events = ctx.take_profile();
  ctx.set_profiling(false);

  // Per step, in execution order: the first run's description, every run's time.
  struct Layer {
    const kiln::ProfileEvent* first = nullptr;
    int64_t calls = 0;
    double total_us = 0;
  };
  std::map<int, Layer> layers;
  for (const kiln::ProfileEvent& ev : events) {
    if (ev.step < 0) {
      run_ms.push_back(ev.dur_us / 1e3);
      continue;
    }
    Layer& l = layers[ev.step];
    if (!l.first) l.first = &ev;
    ++l.calls;
    l.total_us += ev.dur_us;
  }
  std::sort(run_ms.begin(), run_ms.end());
  const double median_ms = run_ms.empty() ? 0 : run_ms[run_ms.size() / 2];
  const int nruns = std::max(1, pa.runs);

  using nlohmann::json;
  json data;
  auto meta = e.metadata();
  data["kiln_version"] = kiln::version();
  data["model"] = std::filesystem::path(model_path).filename().string();
  data["device"] = meta["device"];
  data["device_name"] = meta["fingerprint"];
  data["precision"] = meta.count("precision") ? meta["precision"] : precision;
  data["runs"] = pa.runs;
  data["wall_ms_per_run"] = median_ms;
  data["arena_bytes"] = {{"cpu", ctx.arena_bytes(kiln::DeviceType::kCPU)}, {"cuda", ctx.arena_bytes(kiln::DeviceType::kCUDA)}};
  json rows = json::array();
  std::vector<std::pair<double, const Layer*>> slowest;
  for (const auto& [step, l] : layers) {
    const kiln::ProfileEvent& ev = *l.first;
    std::string prec;
    if (!ev.outputs.empty()) prec = ev.outputs[0].substr(0, ev.outputs[0].find('['));
    const double mean_ms = l.total_us / 1e3 / static_cast<double>(nruns);
    rows.push_back({{"step", step}, {"name", ev.name}, {"op", ev.op}, {"kernel", ev.kernel}, {"device", ev.device},
                    {"precision", prec}, {"tactic", ev.tactic}, {"inputs", ev.inputs}, {"outputs", ev.outputs},
                    {"output_bytes", ev.output_bytes}, {"calls", l.calls}, {"total_ms", l.total_us / 1e3}, {"mean_ms", mean_ms}});
    slowest.push_back({mean_ms, &l});
  }
  data["layers"] = std::move(rows);

  std::string prefix = pa.out.empty() ? std::filesystem::path(model_path).replace_extension("").string() + "_profile" : pa.out;
  std::string trace = kiln::profile_to_chrome_trace(events, "kiln " + data["model"].get<std::string>());
  // The data goes inside a <script> element: every '<' becomes \u003c (it can only stand in strings).
  std::string blob = data.dump(-1, ' ', false, json::error_handler_t::replace), safe;
  for (char c : blob) {
    if (c == '<') safe += "\\u003c";
    else safe += c;
  }
  std::string html = kReportHtml;
  const std::string mark = "__KILN_PROFILE_DATA__";
  const size_t at = html.find(mark);
  if (at == std::string::npos) return fail(kiln::internal_error("the report template has no data placeholder"));
  html.replace(at, mark.size(), safe);
  if (kiln::Status st = write_text(prefix + ".json", trace); !st.ok()) return fail(st);
  if (kiln::Status st = write_text(prefix + ".html", html); !st.ok()) return fail(st);

  std::sort(slowest.begin(), slowest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  double sum = 0;
  for (const auto& [ms, l] : slowest) sum += ms;
  std::printf("profiled %d runs (after %d warm-up): median %.3f ms per run, %.3f ms in %zu steps\n", pa.runs, pa.warmup,
              median_ms, sum, layers.size());
  std::printf("  %-32s %-22s %-28s %-5s %10s %6s\n", "layer", "op", "kernel", "dev", "ms/run", "%");
  for (size_t i = 0; i < std::min<size_t>(10, slowest.size()); ++i) {
    const kiln::ProfileEvent& ev = *slowest[i].second->first;
    std::printf("  %-32.32s %-22.22s %-28.28s %-5s %10.4f %6.1f\n", ev.name.c_str(), ev.op.c_str(), ev.kernel.c_str(),
                ev.device.c_str(), slowest[i].first, sum > 0 ? 100 * slowest[i].first / sum : 0.0);
  }
  std::printf("trace: %s.json (chrome://tracing, ui.perfetto.dev)\nreport: %s.html\n", prefix.c_str(), prefix.c_str());
  return 0;
}

}  // namespace kiln_cli
