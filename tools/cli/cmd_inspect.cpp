// tools/cli/cmd_inspect.cpp — `kiln info` (what a model declares and holds) and `kiln inspect` (what
// the optimizer does to it); given an engine file, both describe it and its plan.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "commands.h"
#include "common.h"
#include "kiln/kiln.h"

namespace kiln_cli {

namespace {

// `kiln inspect` on an engine file: what it was built for, its shape profiles, and per step the
// kernel and its tactic (the tuner's, or the kernel's own choice recorded at build).
int inspect_engine(const std::string& path) {
  auto e = kiln::Engine::load(path);
  if (!e.ok()) return fail(e.status());
  std::printf("engine: %s\n", path.c_str());
  for (const auto& [k, v] : (*e)->metadata()) std::printf("  %s: %s\n", k.c_str(), v.c_str());
  std::printf("inputs:\n");
  for (const auto& t : (*e)->inputs())
    std::printf("  %s: %s %s%s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str(),
                t.has_default ? "  (has a default: an initializer)" : "");
  std::printf("outputs:\n");
  for (const auto& t : (*e)->outputs()) std::printf("  %s: %s %s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str());
  const auto& profiles = (*e)->profiles();
  std::printf("shape profiles: %zu%s\n", profiles.size(), profiles.empty() ? " (the declared shapes)" : "");
  for (size_t p = 0; p < profiles.size(); ++p) {
    std::printf("  profile %zu:\n", p);
    for (const auto& [name, opt] : profiles[p].opt) {
      auto dims = [](const std::vector<int64_t>& d) {
        std::string s;
        for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
        return s;
      };
      std::printf("    %s: min %s opt %s max %s\n", name.c_str(), dims(profiles[p].min.at(name)).c_str(), dims(opt).c_str(),
                  dims(profiles[p].max.at(name)).c_str());
    }
  }
  std::printf("plan (kernel, and its tactic per profile: the tuner's with its time, or the kernel's own choice recorded at "
              "build, untuned):\n%s",
              (*e)->placement_report().c_str());
  return 0;
}

int run_inspect(const std::string& path, int level, bool verbose) {
  if (is_engine_file(path)) return inspect_engine(path);
  auto r = kiln::inspect_model(path, level);
  if (!r.ok()) return fail(r.status());
  std::printf("model: %s\nopt level: %d\nnodes: %d before, %d after\npasses (rewrites):\n", path.c_str(), r->opt_level,
              r->nodes_before, r->nodes_after);
  for (const auto& [name, n] : r->passes) std::printf("  %-24s %d\n", name.c_str(), n);
  std::printf("target stages (kiln build runs those its device and precision ask for; --disable-pass NAME skips one, "
              "as it does a pass):\n");
  for (const auto& [name, what] : r->target_stages) std::printf("  %-26s %s\n", name.c_str(), what.c_str());
  std::vector<std::pair<int, std::string>> hist;
  for (const auto& [op, n] : r->ops_after) hist.push_back({-n, op});
  std::sort(hist.begin(), hist.end());
  std::printf("ops after:\n");
  for (const auto& [n, op] : hist) {
    auto it = r->ops_before.find(op);
    std::printf("  %-28s %d (before %d)\n", op.c_str(), -n, it == r->ops_before.end() ? 0 : it->second);
  }
  if (verbose) {
    std::printf("rewrites (%zu):\n", r->rewrites.size());
    for (const auto& s : r->rewrites) std::printf("  %s\n", s.c_str());
    std::printf("near misses (%zu):\n", r->near_misses.size());
    for (const auto& s : r->near_misses) std::printf("  %s\n", s.c_str());
  } else if (!r->near_misses.empty()) {
    std::printf("near misses: %zu (see --verbose)\n", r->near_misses.size());
  }
  return 0;
}

struct InfoCommand {
  std::string info_path;
  PluginArgs plugins;

  CLI::App* add_to(CLI::App& app);
  int execute();
};

CLI::App* InfoCommand::add_to(CLI::App& app) {
  auto* info = app.add_subcommand("info", "Describe an ONNX model: inputs, outputs, opsets, ops, parameters, unsupported ops");
  info->add_option("model", info_path, "model.onnx, or an engine file (as kiln inspect)")->required();
  plugins.add_to(*info);
  return info;
}

int InfoCommand::execute() {
  if (kiln::Status st = plugins.load(); !st.ok()) return fail(st);
  if (is_engine_file(info_path)) return inspect_engine(info_path);
  auto s = kiln::summarize_model(info_path);
  if (!s.ok()) return fail(s.status());
  std::printf("model: %s\nproducer: %s\nir_version: %lld\nopsets:", s->path.c_str(), s->producer.c_str(),
              static_cast<long long>(s->ir_version));
  for (const auto& [d, v] : s->opsets) std::printf(" %s=%d", d.empty() ? "ai.onnx" : d.c_str(), v);
  std::printf("\ninputs:\n");
  for (const auto& t : s->inputs) std::printf("  %s: %s %s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str());
  std::printf("outputs:\n");
  for (const auto& t : s->outputs) std::printf("  %s: %s %s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str());
  std::printf("parameters: %lld (%.2f MB)\nnodes: %d\nops:\n", static_cast<long long>(s->num_parameters),
              s->parameter_bytes / 1e6, s->num_nodes);
  std::vector<std::pair<int, std::string>> hist;
  for (const auto& [op, n] : s->op_histogram) hist.push_back({-n, op});
  std::sort(hist.begin(), hist.end());
  for (const auto& [n, op] : hist) std::printf("  %-28s %d\n", op.c_str(), -n);
  if (s->unsupported.empty()) {
    std::printf("unsupported: none (every node has a CPU kernel, or is lowered to ops that have)\n");
  } else {
    std::printf("unsupported (%zu):\n", s->unsupported.size());
    for (const auto& u : s->unsupported) std::printf("  %s\n", u.c_str());
    std::printf("hint: an op kiln does not have can come from a plugin library: --plugin lib.so (docs/plugins.md)\n");
  }
  return 0;
}

struct InspectCommand {
  std::string inspect_path;
  int inspect_level = 2;
  bool inspect_verbose = false;
  PluginArgs plugins;

  CLI::App* add_to(CLI::App& app);
  int execute() {
    if (kiln::Status st = plugins.load(); !st.ok()) return fail(st);
    return run_inspect(inspect_path, inspect_level, inspect_verbose);
  }
};

CLI::App* InspectCommand::add_to(CLI::App& app) {
  auto* inspect = app.add_subcommand("inspect", "Show what the optimizer does to a model: rewrites per pass, node counts, near misses");
  inspect->add_option("model", inspect_path, "model.onnx, or an engine file (its plan and chosen tactics)")->required();
  inspect->add_option("--opt-level", inspect_level, "0 none, 1 folding/cleanup, 2 + fusions, 3 + aggressive")->check(CLI::Range(0, 3));
  inspect->add_flag("-v,--verbose", inspect_verbose, "list every rewrite and every near miss (partial match) with its reason");
  plugins.add_to(*inspect);
  return inspect;
}

}  // namespace

Command add_info_command(CLI::App& app) { return make_command<InfoCommand>(app); }

Command add_inspect_command(CLI::App& app) { return make_command<InspectCommand>(app); }

}  // namespace kiln_cli
