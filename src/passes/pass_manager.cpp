// passes/pass_manager.cpp — the named pipeline, run to a fixed point.

#include <atomic>
#include <chrono>

#include "ops/op_table.h"
#include "passes/passes.h"
#include "util/log.h"

namespace kiln::passes {

void PassContext::log(const std::string& pass, const std::string& what) {
  ++fired[pass];
  rewrites.push_back("[" + pass + "] " + what);
  if (options.verbose || log_enabled(LogLevel::kVerbose)) kiln::log(LogLevel::kVerbose, "[" + pass + "] " + what);
}

void PassContext::near_miss(const std::string& pass, const std::string& what) {
  std::string line = pass + ": " + what;
  if (!seen_near_misses.insert(line).second) return;
  near_misses.push_back(line);
}

// Lowerings first (level 0: what the graph means in kiln's ops), then cleanup, so fusions see canonical patterns; fusions from the largest pattern to the
// smallest (attention before the MatMul+Add it contains, GELU before activation fusion).
const std::vector<Pass>& pipeline() {
  static const std::vector<Pass> p = {
      {"lower-contrib-ops", 0, lower_contrib_ops},
      {"fold-constants", 1, fold_constants},
      {"fold-shapes", 1, fold_shapes},
      {"remove-noops", 1, remove_noops},
      {"spatial-mean", 1, spatial_mean_to_pool},
      {"cse", 1, eliminate_common_subexpressions},
      {"transposes", 1, simplify_transposes},
      {"dead-code", 1, eliminate_dead_code},
      {"fold-conv-bn", 2, fold_conv_batchnorm},
      {"fold-conv-affine", 2, fold_conv_affine},
      {"fold-pad-conv", 2, fold_pad_into_conv},
      {"trim-conv-taps", 2, trim_conv_taps},
      {"patchify-conv", 2, patchify_conv},
      {"pad-matmul-columns", 2, pad_matmul_columns},
      {"fuse-qdq", 1, fuse_qdq},
      {"fuse-rotary", 2, fuse_rotary},
      {"fuse-attention", 2, fuse_attention},
      {"attention-op", 2, attention_op_to_kiln},
      {"batch-first-attention", 2, batch_first_attention},
      {"fold-head-transposes", 2, fold_head_transposes},
      {"fuse-layer-norm", 2, fuse_layer_norm},
      {"fuse-rms-norm", 2, fuse_rms_norm},
      {"fuse-skip-layer-norm", 2, fuse_skip_layer_norm},
      {"fuse-gelu", 2, fuse_gelu},
      {"fuse-matmul-add", 2, fuse_matmul_add},
      {"fuse-activation", 2, fuse_activation},
      {"fuse-conv-residual", 2, fuse_conv_residual},
  };
  return p;
}

namespace {
std::atomic<uint64_t> g_optimize_runs{0};
}  // namespace

uint64_t optimize_count() { return g_optimize_runs.load(); }

// Runs one pass; after a change, re-sorts and re-infers (later passes match on types and producers).
static Expected<bool> run_pass(const Pass& pass, ir::Graph& graph, PassContext& ctx, std::map<std::string, double>& seconds) {
  const auto start = std::chrono::steady_clock::now();
  auto r = pass.run(graph, ctx);
  if (!r.ok()) return r.status().with_context("pass " + pass.name);
  if (*r) {
    KILN_RETURN_IF_ERROR(graph.sort().with_context("after pass " + pass.name));
    KILN_RETURN_IF_ERROR(ops::infer_graph(graph).with_context("after pass " + pass.name));
  }
  seconds[pass.name] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return *r;
}

Status optimize(ir::Graph& graph, const PassOptions& options, OptimizeStats* stats) {
  g_optimize_runs.fetch_add(1);
  PassContext ctx{options, {}, {}, {}, {}};
  std::map<std::string, double> seconds;
  // Lowerings: once, at every level, never disabled (passes.h).
  for (const Pass& pass : pipeline())
    if (pass.min_level == 0) KILN_RETURN_IF_ERROR(run_pass(pass, graph, ctx, seconds).status());
  int rounds = 0;
  if (options.level > 0) {
    for (; rounds < 16; ++rounds) {
      // Near misses of the last round only: an earlier one may have fired since.
      ctx.near_misses.clear();
      ctx.seen_near_misses.clear();
      bool changed = false;
      for (const Pass& pass : pipeline()) {
        if (pass.min_level == 0 || pass.min_level > options.level || options.disabled.count(pass.name)) continue;
        KILN_ASSIGN_OR_RETURN(const bool r, run_pass(pass, graph, ctx, seconds));
        changed |= r;
      }
      if (!changed) break;
    }
  }
  graph.remove_dead_values();
  KILN_RETURN_IF_ERROR(graph.verify());
  if (stats) {
    stats->fired = ctx.fired;
    stats->rewrites = ctx.rewrites;
    stats->near_misses = ctx.near_misses;
    stats->rounds = rounds + (options.level > 0 ? 1 : 0);
    stats->seconds = std::move(seconds);
  }
  return Status::Ok();
}

Status optimize(ir::Graph& graph, const PassOptions& options, std::map<std::string, int>* fired) {
  OptimizeStats stats;
  KILN_RETURN_IF_ERROR(optimize(graph, options, &stats));
  if (fired) *fired = stats.fired;
  return Status::Ok();
}

}  // namespace kiln::passes
