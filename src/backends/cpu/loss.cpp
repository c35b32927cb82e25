// backends/cpu/loss.cpp — SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss on the CPU.
//
// Inputs are [N, C, d1..dk] with labels [N, d1..dk]. Each position's loss is -logp[label] times
// the label's weight (1 without weights); positions whose label equals ignore_index count as zero
// and carry weight zero. reduction "mean" divides the sum by the total weight of the positions.
#include <limits>

#include "backends/cpu/numeric_f64.h"
#include "ops/params_ml.h"

namespace kiln::cpu {
namespace {

using Reduction = ops::LossParams::Reduction;

// softmax: SoftmaxCrossEntropyLoss, which takes log_softmax over C first.
Status loss_kernel(KernelContext& ctx, const ops::LossParams& a, bool softmax) {
  const Tensor& x = ctx.input(0);
  const Tensor& labels = ctx.input(1);
  const Tensor* weights = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (x.rank() < 2) return ctx.error("scores must have shape [N, C, d1, ...]");
  const int64_t N = x.dim(0), C = x.dim(1);
  int64_t D = 1;
  for (int i = 2; i < x.rank(); ++i) D *= x.dim(i);
  Shape lshape = x.shape();
  lshape.erase(lshape.begin() + 1);
  if (labels.shape() != lshape)
    return ctx.error("labels must have shape " + shape_to_string(lshape) + ", got " + shape_to_string(labels.shape()));
  if (labels.dtype() != DataType::kInt32 && labels.dtype() != DataType::kInt64) return ctx.error("labels must be int32 or int64");
  if (weights && (weights->rank() != 1 || weights->dim(0) != C))
    return ctx.error("weights must have shape [" + std::to_string(C) + "]");
  std::vector<double> logp = to_f64(x);
  if (softmax) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; ++d) {
        double* p = &logp[n * C * D + d];
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c < C; ++c) mx = std::max(mx, p[c * D]);
        double sum = 0;
        for (int64_t c = 0; c < C; ++c) sum += std::exp(p[c * D] - mx);
        const double lse = mx + std::log(sum);
        for (int64_t c = 0; c < C; ++c) p[c * D] -= lse;
      }
  }
  std::vector<double> loss(static_cast<size_t>(N * D)), wsum(static_cast<size_t>(N * D));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = n * D + d;
      // Read as integers: through a double, INT64_MAX became 2^63, whose conversion back is undefined.
      const int64_t label = labels.dtype() == DataType::kInt64 ? labels.data<int64_t>()[k] : labels.data<int32_t>()[k];
      if (a.has_ignore_index && label == a.ignore_index) {
        loss[k] = 0;
        wsum[k] = 0;
        continue;
      }
      if (label < 0 || label >= C)
        return ctx.error("label " + std::to_string(label) + " out of range [0, " + std::to_string(C) + ")");
      const double w = weights ? load_f64(*weights, label) : 1.0;
      loss[k] = -logp[(n * C + label) * D + d] * w;
      wsum[k] = w;
    }
  if (a.reduction == Reduction::kNone) {
    Tensor& out = ctx.output(0, x.dtype(), lshape);
    for (int64_t k = 0; k < N * D; ++k) store_float(out, k, loss[k]);
  } else {
    double total = 0, weight = 0;
    for (int64_t k = 0; k < N * D; ++k) {
      total += loss[k];
      weight += wsum[k];
    }
    store_float(ctx.output(0, x.dtype(), {}), 0, a.reduction == Reduction::kSum ? total : total / weight);
  }
  if (softmax && ctx.has_output(1)) {
    Tensor& lp = ctx.output(1, x.dtype(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) store_float(lp, i, logp[i]);
  }
  return Status::Ok();
}

}  // namespace

void register_loss(KernelRegistry& r) {
  const std::pair<const char*, bool> ops[] = {{"SoftmaxCrossEntropyLoss", true}, {"NegativeLogLikelihoodLoss", false}};
  for (const auto& [name, softmax] : ops) {
    r.add({name, "", 12, 1 << 30, std::string("cpu.") + name + ".any", [](const ir::Node& n) { return require_float(n, 0); },
           [softmax = softmax](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
             KILN_ASSIGN_OR_RETURN(const ops::LossParams a, ops::parse_loss(n));
             return make_kernel([a, softmax](KernelContext& ctx) { return loss_kernel(ctx, a, softmax); });
           }});
  }
}

}  // namespace kiln::cpu
