// builder/calibrate.cpp — INT8 and FP8 engines from a float model: calibration and quantization.
//
// kiln build --precision int8 quantizes every Conv (2-D), MatMul and Gemm whose weights are constant
// and which a kernel row of the target takes in 8 bits (KernelDef::quantizes: on the CPU all of them;
// on CUDA MatMul, Gemm and the convolutions cuda.QConv takes):
//   1. the activations they read get a range, measured by running the float32 graph (an engine of
//      it, opt level 0, with those values made outputs) on the calibration input sets: minmax (the
//      range seen), percentile (of |x|, the rest clipped) or entropy (the clipping threshold whose
//      8-bit histogram is closest, by KL divergence, to the measured one);
//   2. the graph gets QuantizeLinear → DequantizeLinear on those activations (uint8 with a zero point,
//      which the CPU's int8 kernels read natively; int8 with zero point 0 where a CUDA convolution
//      reads it) and int8 weights with one scale per output channel (symmetric, zero point 0) behind a
//      DequantizeLinear;
//   3. the optimizer's fuse-qdq pass (passes/fuse_qdq.cpp) then turns each product into kiln.QConv or
//      kiln.QMatMul, as for a model that arrived quantized.
// FP8 builds (Precision::kFP8) calibrate the same way and quantize MatMul/Gemm with constant weights
// (those the kiln.F8MatMul rows take: K and N divisible by 16, as cuBLASLt's FP8 kernels need) to
// kiln.F8MatMul: E4M3 activations with one scale, amax / 448 of the calibrated range; E4M3 weights
// with one scale (amax / 448), stored transposed [N, K]; Gemm's C, or MatMul's Add of a constant row,
// as the bias. CUDA FP8 engines also quantize the convolutions cuda.QConv's row takes in E4M3: the INT8 engines' Q/DQ form
// with E4M3 instead of int8 (activations and residuals amax / 448, zero point 0; weights per output
// channel), fused by fuse-qdq into QConv with E4M3 inputs and output. Other convolutions (and every
// convolution of a CPU FP8 engine) stay in the engine's float type.
// The ranges can be kept in a calibration cache (text: a header naming the model's hash and the
// method, then one line per tensor) and reused by later builds without calibration data.
#include "builder/calibrate.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "backends/kernel.h"
#include "ir/float_types.h"
#include "ops/params_nn.h"
#include "util/atomic_file.h"
#include "util/log.h"

namespace kiln {
namespace {

constexpr int kBins = 2048;

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  std::vector<double> hist;  // of |x| over [0, amax], kBins bins (entropy, percentile)
  double amax() const { return std::max(std::fabs(lo), std::fabs(hi)); }
};

bool is_float_const(const ir::Value* v, int rank) {
  return v && v->is_constant() && v->constant->dtype() == DataType::kFloat32 && static_cast<int>(v->constant->shape().size()) == rank;
}

// Conv (2-D), MatMul and Gemm with constant float32 weights: the products INT8 engines quantize.
bool quantizable(const ir::Node& n) {
  if (!n.domain.empty() || !n.has_input(0) || !n.has_input(1) || n.inputs[0]->type.dtype != DataType::kFloat32) return false;
  if (n.op_type == "Conv")
    return is_float_const(n.inputs[1], 4) && (!n.has_input(2) || is_float_const(n.inputs[2], 1));
  if (n.op_type == "MatMul") return is_float_const(n.inputs[1], 2);
  if (n.op_type == "Gemm") {
    const ops::GemmParams p = ops::parse_gemm(n);
    if (!is_float_const(n.inputs[1], 2) || p.trans_a || p.alpha != 1.0f) return false;
    if (!n.inputs[0]->type.shape.known || n.inputs[0]->type.shape.rank() != 2) return false;
    return !n.has_input(2) || (n.inputs[2]->is_constant() && p.beta == 1.0f);
  }
  return false;
}

// A MatMul/Gemm's 2-D constant weights as [K, N] (trans_b: stored [N, K], Gemm's transB).
struct WeightsKN {
  bool trans_b;
  int64_t k, n;
};
WeightsKN weights_kn(const ir::Node& n) {
  const Shape& w = n.inputs[1]->constant->shape();
  const bool trans_b = n.op_type == "Gemm" && ops::parse_gemm(n).trans_b;
  return {trans_b, trans_b ? w[1] : w[0], trans_b ? w[0] : w[1]};
}

// Whether the quantizer writes `n` in `type`: a quantizable product, and for E4M3 MatMul/Gemm the
// kiln.F8MatMul form (A of rank >= 2, Gemm's C, if any, one value per column). Which of these a
// device runs in 8 bits its kernel rows say (taking_row).
bool rewritable(const ir::Node& n, DataType type) {
  if (!quantizable(n)) return false;
  if (type != DataType::kFloat8E4M3FN || n.op_type == "Conv") return true;
  const ir::SymShape& a = n.inputs[0]->type.shape;
  if (!a.known || a.rank() < 2) return false;
  const int64_t nn = weights_kn(n).n;
  if (n.op_type == "Gemm" && n.has_input(2)) {
    const ir::Value* c = n.inputs[2];
    if (c->constant->dtype() != DataType::kFloat32 || c->constant->numel() != nn) return false;
    if (c->constant->shape().size() == 2 && c->constant->shape()[0] != 1) return false;
  }
  return true;
}

void add_to_hist(Range& r, const float* x, int64_t n) {
  const double amax = r.amax();
  if (!(amax > 0)) return;
  if (r.hist.empty()) r.hist.assign(kBins, 0.0);
  const double k = kBins / amax;
  for (int64_t i = 0; i < n; ++i) {
    // Exact zeros (half of every ReLU output) quantize exactly whatever the threshold; counted, their
    // spike in the first bin would make KL divergence favour heavy clipping.
    if (x[i] == 0.0f || !std::isfinite(x[i])) continue;
    const int b = std::min(kBins - 1, static_cast<int>(std::fabs(static_cast<double>(x[i])) * k));
    r.hist[b] += 1;
  }
}

// The |x| below which `pct` percent of the histogram lies.
double percentile_threshold(const Range& r, double pct) {
  double total = 0;
  for (double h : r.hist) total += h;
  if (total == 0) return r.amax();
  double acc = 0;
  for (int b = 0; b < kBins; ++b) {
    acc += r.hist[b];
    if (acc >= total * pct / 100.0) return (b + 1) * r.amax() / kBins;
  }
  return r.amax();
}

// KL(P || Q) of two histograms of equal length (P's mass where Q has none counts as a large penalty,
// as a smoothed Q would).
double kl(const std::vector<double>& p, const std::vector<double>& q) {
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) sp += p[i], sq += q[i];
  if (sp == 0 || sq == 0) return std::numeric_limits<double>::infinity();
  double d = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    const double pi = p[i] / sp, qi = std::max(q[i] / sq, 1e-12);
    d += pi * std::log(pi / qi);
  }
  return d;
}

// The clipping threshold whose 8-bit version of the |x| histogram (`levels` levels) diverges least
// from the histogram clipped there (the outliers folded into the last kept bin).
double entropy_threshold(const Range& r, int levels) {
  if (r.hist.empty()) return r.amax();
  double best = std::numeric_limits<double>::infinity();
  int best_i = kBins;
  for (int i = levels; i <= kBins; i += 8) {
    std::vector<double> p(r.hist.begin(), r.hist.begin() + i);
    for (int b = i; b < kBins; ++b) p[i - 1] += r.hist[b];
    // Q: the first i bins merged into `levels` groups, each group's mass spread over its nonzero bins.
    std::vector<double> q(static_cast<size_t>(i), 0.0);
    const double per = static_cast<double>(i) / levels;
    for (int l = 0; l < levels; ++l) {
      const int b0 = static_cast<int>(std::floor(l * per)), b1 = std::min(i, static_cast<int>(std::floor((l + 1) * per)));
      double mass = 0;
      int nonzero = 0;
      for (int b = b0; b < b1; ++b) {
        mass += r.hist[b];
        nonzero += r.hist[b] != 0;
      }
      for (int b = b0; b < b1; ++b)
        if (r.hist[b] != 0) q[b] = mass / nonzero;
    }
    const double d = kl(p, q);
    if (d < best) {
      best = d;
      best_i = i;
    }
  }
  return (best_i + 0.5) * r.amax() / kBins;
}

// The scale that maps magnitudes up to `amax` onto `qmax` (127 for int8, 448 for E4M3); 1 for an
// all-zero (or non-finite) range.
float symmetric_scale(double amax, double qmax) { return amax > 0 && std::isfinite(amax) ? static_cast<float>(amax / qmax) : 1.0f; }

// A value's uint8 quantization (scale, zero point) for the range [lo, hi] (0 included).
std::pair<float, uint8_t> uint8_params(double lo, double hi) {
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  if (!(hi - lo > 0) || !std::isfinite(hi - lo)) return {1.0f, 0};
  const double scale = (hi - lo) / 255.0;
  const double zp = std::clamp(std::nearbyint(-lo / scale), 0.0, 255.0);
  return {static_cast<float>(scale), static_cast<uint8_t>(zp)};
}

std::string cache_header(const std::string& model_hash, const std::string& method) {
  return "kiln-calibration 1 " + (model_hash.empty() ? std::string("-") : model_hash) + " " + method;
}

Status write_cache(const std::string& path, const std::string& header, const std::map<std::string, std::pair<double, double>>& ranges) {
  std::string body = header + "\n";
  char buf[64];
  for (const auto& [name, r] : ranges) {
    std::snprintf(buf, sizeof(buf), " %.9g %.9g", r.first, r.second);
    body += std::to_string(name.size()) + " " + name + buf + "\n";
  }
  // Replaced whole through a temporary file created exclusively beside it: never written through a
  // planted symlink, never seen half written.
  return write_file_atomically(path, body, "calibration cache");
}

// The largest |range| kept: its 8-bit scale (range / 127, / 255 or / 448) and the products computed
// with it stay finite in float32 (whose largest value is 3.4e38) with room for the accumulations.
constexpr double kMaxRange = 1e30;

// A calibrated range is finite, ordered and representable; else an error naming the tensor and
// where the range came from.
Status check_range(const std::string& tensor, double lo, double hi, const std::string& source) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || lo > hi)
    return invalid_argument("calibration: tensor '" + tensor + "' has an invalid range [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "] in " + source + "; ranges must be finite with min <= max");
  if (std::fabs(lo) > kMaxRange || std::fabs(hi) > kMaxRange)
    return invalid_argument("calibration: tensor '" + tensor + "' has a range beyond +-1e30 in " + source +
                            ", which 8-bit scales in float32 cannot represent; check the calibration data");
  return Status::Ok();
}

// Ranges from a cache written for this model and method; nullopt (with a warning) for a cache of
// another model or method or one whose lines cannot be parsed. A parsed range that is not finite or
// not representable is an error naming the tensor: a forged cache must not give NaN scales.
Expected<std::optional<std::map<std::string, std::pair<double, double>>>> read_cache(const std::string& path,
                                                                                    const std::string& header) {
  using Ranges = std::map<std::string, std::pair<double, double>>;
  std::ifstream f(path);
  if (!f) return std::optional<Ranges>();
  std::string line;
  if (!std::getline(f, line) || line != header) {
    log(LogLevel::kWarning, "calibration cache '" + path + "' was written for another model or method: calibrating again");
    return std::optional<Ranges>();
  }
  Ranges r;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    size_t len = 0;
    if (!(is >> len) || len == 0 || len > line.size()) return std::optional<Ranges>();
    is.get();
    std::string name(len, '\0');
    if (!is.read(name.data(), static_cast<std::streamsize>(len))) return std::optional<Ranges>();
    // Read as text, so that "nan" and "inf" (which >> refuses) are reported as such, not as damage.
    std::string lo_s, hi_s;
    if (!(is >> lo_s >> hi_s)) {
      log(LogLevel::kWarning, "calibration cache '" + path + "' is damaged: calibrating again");
      return std::optional<Ranges>();
    }
    char* end_lo = nullptr;
    char* end_hi = nullptr;
    const double lo = std::strtod(lo_s.c_str(), &end_lo), hi = std::strtod(hi_s.c_str(), &end_hi);
    if (*end_lo != '\0' || *end_hi != '\0') {
      log(LogLevel::kWarning, "calibration cache '" + path + "' is damaged: calibrating again");
      return std::optional<Ranges>();
    }
    KILN_RETURN_IF_ERROR(check_range(name, lo, hi, "the calibration cache '" + path + "'"));
    r[name] = {lo, hi};
  }
  return std::optional<Ranges>(std::move(r));
}

Tensor scalar_f32(float v) {
  Tensor t = Tensor::empty(DataType::kFloat32, {});
  t.data<float>()[0] = v;
  return t;
}

// Replaces the weights (input 1) of `n` by DequantizeLinear(8-bit weights, per-channel scales):
// int8 (symmetric, ±127), or E4M3 (FP8 engines' convolutions: ±448, nearest even).
void quantize_weights(ir::Graph& g, ir::Node& n, DataType type) {
  const Tensor& w = *n.inputs[1]->constant;
  const Shape& s = w.shape();
  // The output channels: W's axis 0 for Conv and a transposed Gemm, axis 1 for MatMul and Gemm.
  const bool axis0 = n.op_type == "Conv" || weights_kn(n).trans_b;
  const int64_t channels = axis0 ? s[0] : s[1];
  const int64_t inner = axis0 ? w.numel() / std::max<int64_t>(channels, 1) : 1;
  const int64_t outer_stride = axis0 ? 0 : channels;  // MatMul/Gemm [K, N]: element (k, c) at k * N + c
  const float* src = w.data<float>();
  std::vector<double> amax(static_cast<size_t>(channels), 0.0);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t c = axis0 ? i / inner : i % outer_stride;
    amax[c] = std::max(amax[c], std::fabs(static_cast<double>(src[i])));
  }
  const bool e4m3 = type == DataType::kFloat8E4M3FN;
  Tensor scales = Tensor::empty(DataType::kFloat32, {channels});
  Tensor q = Tensor::empty(type, s);
  for (int64_t c = 0; c < channels; ++c) scales.data<float>()[c] = symmetric_scale(amax[c], e4m3 ? kE4M3FNMax : 127.0);
  uint8_t* dst = static_cast<uint8_t*>(q.raw());
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t c = axis0 ? i / inner : i % outer_stride;
    const double v = src[i] / static_cast<double>(scales.data<float>()[c]);
    dst[i] = e4m3 ? f32_to_mini(static_cast<float>(v), MiniFloat::kE4M3FN, true)
                  : static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0, 127.0)));
  }
  const std::string base = n.inputs[1]->name;
  ir::Value* qv = g.new_value(base + (e4m3 ? "_e4m3" : "_int8"), ir::Type::tensor(type, ir::SymShape::of(s)));
  qv->constant = std::move(q);
  ir::Value* sv = g.new_value(base + "_scale", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({channels})));
  sv->constant = std::move(scales);
  ir::Value* out = g.new_value(base + "_dq", n.inputs[1]->type);
  ir::Node* dq = g.add_node("DequantizeLinear", "", {qv, sv}, {out}, base + "_DequantizeLinear");
  dq->opset = 21;
  dq->attrs["axis"].kind = ir::Attribute::Kind::kInt;
  dq->attrs["axis"].i = axis0 ? 0 : 1;
  g.set_input(&n, 1, out);
}

}  // namespace

namespace {

// Which products an engine quantizes: those the quantizer can write in the precision's 8-bit type
// (kInt8, or kFloat8E4M3FN for FP8) and a row of the target runs in it. On CUDA the convolutions'
// activations are symmetric and residual Adds get an 8-bit input (find_targets).
struct Products {
  DataType type = DataType::kInt8;
  const KernelRegistry* target = nullptr;
};

// The kernel row of `target` that runs the float product `n` quantized to `type` (its
// KernelDef::quantizes; rows this machine cannot run are not asked), or null.
const KernelDef::Quantizes* taking_row(const KernelRegistry& target, const ir::Node& n, DataType type) {
  for (const KernelDef& d : target.all()) {
    const KernelDef::Quantizes& q = d.quantizes;
    if (std::find(q.ops.begin(), q.ops.end(), n.op_type) == q.ops.end() ||
        std::find(q.types.begin(), q.types.end(), type) == q.types.end())
      continue;
    if (d.unavailable && !d.unavailable().empty()) continue;
    if (!q.check || q.check(n, type).empty()) return &q;
  }
  return nullptr;
}

// What an INT8 graph quantizes: the products (graph order), the activations they read (each once,
// graph order), which activations are symmetric (read by a row that takes zero point 0 only) and the
// residual Adds that get an int8 input (both inputs products of rows with int8 residuals; see
// find_targets).
struct Targets {
  std::vector<ir::Node*> products;
  std::vector<std::string> acts;
  std::set<std::string> symmetric;
  std::vector<std::pair<ir::Node*, int>> residuals;
};

// Nodes named in `keep_float` stay float. An Add of two quantized products' outputs whose row takes an
// int8 residual (CUDA: a ResNet block whose shortcut is a convolution) gets its second input quantized
// too, so that passes::fuse_qconv_residual can fold the Add into the first product.
Targets find_targets(ir::Graph& g, Products which, const std::set<std::string>& keep_float) {
  Targets t;
  std::set<std::string> seen;
  std::map<const ir::Node*, const KernelDef::Quantizes*> taken;
  for (ir::Node* n : g.nodes()) {
    const KernelDef::Quantizes* row = rewritable(*n, which.type) ? taking_row(*which.target, *n, which.type) : nullptr;
    if (!row || keep_float.count(n->name)) continue;
    t.products.push_back(n);
    taken[n] = row;
    if (seen.insert(n->inputs[0]->name).second) t.acts.push_back(n->inputs[0]->name);
    if (row->symmetric_input) t.symmetric.insert(n->inputs[0]->name);
  }
  auto residual_product_output = [&](const ir::Value* v) {
    if (!v || !v->producer || v->uses.size() != 1 || v->is_output) return false;
    auto it = taken.find(v->producer);
    return it != taken.end() && it->second->int8_residual;
  };
  for (ir::Node* n : g.nodes()) {
    if (!n->domain.empty() || n->op_type != "Add" || n->inputs.size() != 2 || !residual_product_output(n->inputs[0]) ||
        !residual_product_output(n->inputs[1]))
      continue;
    const std::string& r = n->inputs[1]->name;
    if (seen.insert(r).second) t.acts.push_back(r);
    t.symmetric.insert(r);
    t.residuals.push_back({n, 1});
  }
  return t;
}

struct Calibration {
  std::map<std::string, std::pair<double, double>> ranges;
  bool from_cache = false;
  int sets = 0;
};

Expected<Calibration> calibrate(ir::Graph& g, const BuildOptions& options, Products which, const std::string& model_hash,
                                const BuildFn& build_float) {
  const std::string method = options.calibration_method.empty() ? "minmax" : options.calibration_method;
  if (method != "minmax" && method != "entropy" && method != "percentile")
    return invalid_argument("calibration method '" + method + "': use minmax, entropy or percentile");
  if (method == "percentile" && !(options.calibration_percentile > 0 && options.calibration_percentile <= 100))
    return invalid_argument("the calibration percentile must be in (0, 100]");
  Calibration cal;
  const Targets found = find_targets(g, which, {});
  const std::vector<std::string>& acts = found.acts;  // activation values to calibrate, in graph order
  if (found.products.empty()) return cal;

  const std::string header = cache_header(model_hash, method + (method == "percentile" ? "@" + std::to_string(options.calibration_percentile) : ""));
  auto& ranges = cal.ranges;
  bool& from_cache = cal.from_cache;
  if (!options.calibration_cache.empty()) {
    KILN_ASSIGN_OR_RETURN(auto c, read_cache(options.calibration_cache, header));
    if (c) {
      ranges = std::move(*c);
      from_cache = true;
      for (const std::string& a : acts)
        if (!ranges.count(a)) from_cache = false;
      if (!from_cache) log(LogLevel::kWarning, "calibration cache '" + options.calibration_cache + "' lacks some tensors: calibrating again");
    }
  }
  if (!from_cache) {
    if (options.calibration.empty())
      return invalid_argument("an INT8 or FP8 build needs calibration data (input sets, e.g. kiln build --calibration DIR) or a calibration cache written for this model");
    // A float32 engine of this graph whose outputs include every activation to calibrate.
    auto copy = g.clone();
    std::set<std::string> outs;
    for (const ir::Value* v : copy->outputs) outs.insert(v->name);
    for (const std::string& a : acts) {
      ir::Value* v = copy->find_value(a);
      if (!v || v->is_input || outs.count(a)) continue;
      v->is_output = true;
      copy->outputs.push_back(v);
    }
    KILN_ASSIGN_OR_RETURN(auto engine, build_float(std::move(copy)));
    KILN_ASSIGN_OR_RETURN(auto ctx, engine->create_context());
    std::map<std::string, int> index;
    for (size_t i = 0; i < engine->outputs().size(); ++i) index[engine->outputs()[i].name] = static_cast<int>(i);
    std::map<std::string, Range> r;
    auto visit = [&](const std::map<std::string, Tensor>& feeds, const std::vector<Value>& outputs, auto&& fn) -> Status {
      for (const std::string& a : acts) {
        const Tensor* t = nullptr;
        if (auto f = feeds.find(a); f != feeds.end()) t = &f->second;
        else if (auto o = index.find(a); o != index.end()) t = &outputs[o->second].tensor;
        if (!t || t->dtype() != DataType::kFloat32) return invalid_argument("calibration: no float32 value for '" + a + "'");
        fn(r[a], t->data<float>(), t->numel());
      }
      return Status::Ok();
    };
    const bool hist = method != "minmax";
    for (int pass = 0; pass < (hist ? 2 : 1); ++pass) {
      for (const auto& feeds : options.calibration) {
        std::map<std::string, Value> in;
        for (const auto& [k, t] : feeds) in[k] = Value::of(t);
        auto out = ctx->run(in);
        if (!out.ok()) return out.status().with_context("calibration run");
        KILN_RETURN_IF_ERROR(visit(feeds, *out, [pass](Range& rg, const float* x, int64_t n) {
          if (pass == 0) {
            for (int64_t i = 0; i < n; ++i)
              if (std::isfinite(x[i])) rg.lo = std::min(rg.lo, static_cast<double>(x[i])), rg.hi = std::max(rg.hi, static_cast<double>(x[i]));
          } else {
            add_to_hist(rg, x, n);
          }
        }));
      }
    }
    for (const std::string& name : acts) {  // graph order: an error names the first bad tensor
      const Range& rg = r[name];
      // No finite value seen (all NaN/inf, or empty in every set): a [0, 0] range would quantize the
      // tensor to garbage that an accuracy check on the same data cannot see.
      if (!std::isfinite(rg.lo))
        return invalid_argument("calibration: tensor '" + name + "' had no finite values in " +
                                std::to_string(options.calibration.size()) +
                                " calibration sets (all NaN/inf, or empty); check the calibration data");
      double lo = rg.lo, hi = rg.hi;
      if (hist) {
        // uint8 with a zero point: the threshold clips both sides of a signed tensor alike.
        const double t = method == "entropy" ? entropy_threshold(rg, rg.lo >= 0 ? 255 : 128)
                                             : percentile_threshold(rg, options.calibration_percentile);
        lo = std::max(lo, -t);
        hi = std::min(hi, t);
      }
      KILN_RETURN_IF_ERROR(check_range(name, lo, hi, "the calibration data"));
      ranges[name] = {lo, hi};
    }
    cal.sets = static_cast<int>(options.calibration.size());
    if (!options.calibration_cache.empty()) KILN_RETURN_IF_ERROR(write_cache(options.calibration_cache, header, ranges));
  }
  return cal;
}

// Q → DQ on each calibrated activation, read by the products (other readers keep the float value),
// and 8-bit weights behind a DequantizeLinear, for `products` (some or all of `found.products`) and
// the activations they and `found`'s residuals read. `symmetric_type` is what CUDA
// convolutions read: int8 (INT8 engines) or E4M3 (FP8 engines), zero point 0.
void insert_qdq_nodes(ir::Graph& g, const Targets& found, const std::vector<ir::Node*>& products, DataType symmetric_type,
                      const Calibration& cal, Int8Report* report) {
  std::set<std::string> acts;
  for (const ir::Node* n : products) acts.insert(n->inputs[0]->name);
  for (const auto& [add, i] : found.residuals) acts.insert(add->inputs[i]->name);
  const auto& ranges = cal.ranges;
  std::map<std::string, ir::Value*> dequantized;
  for (const std::string& a : found.acts) {
    if (!acts.count(a)) continue;
    ir::Value* v = g.find_value(a);
    const auto& [lo, hi] = ranges.at(a);
    // uint8 with a zero point, or (CUDA convolutions' inputs) int8/E4M3 with zero point 0.
    const bool symmetric = found.symmetric.count(a) > 0;
    const DataType qt = symmetric ? symmetric_type : DataType::kUInt8;
    const double qmax = symmetric_type == DataType::kFloat8E4M3FN ? kE4M3FNMax : 127.0;
    const auto [scale, zp] = symmetric ? std::pair<float, uint8_t>{symmetric_scale(std::max(std::fabs(lo), std::fabs(hi)), qmax), 0}
                                       : uint8_params(lo, hi);
    ir::Value* sv = g.new_value(a + "_scale", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({})));
    sv->constant = scalar_f32(scale);
    Tensor z = Tensor::empty(qt, {});
    static_cast<uint8_t*>(z.raw())[0] = zp;
    ir::Value* zv = g.new_value(a + "_zero_point", ir::Type::tensor(qt, ir::SymShape::of({})));
    zv->constant = std::move(z);
    ir::Value* q = g.new_value(a + "_" + dtype_name(qt), ir::Type::tensor(qt, v->type.shape));
    ir::Value* d = g.new_value(a + "_dq", v->type);
    g.add_node("QuantizeLinear", "", {v, sv, zv}, {q}, a + "_QuantizeLinear")->opset = 21;
    g.add_node("DequantizeLinear", "", {q, sv, zv}, {d}, a + "_DequantizeLinear")->opset = 21;
    dequantized[a] = d;
    if (report) report->ranges.push_back({a, lo, hi, scale, static_cast<int>(zp)});
  }
  for (ir::Node* n : products) {
    g.set_input(n, 0, dequantized.at(n->inputs[0]->name));
    quantize_weights(g, *n, n->op_type == "Conv" ? symmetric_type : DataType::kInt8);
  }
  for (const auto& [add, i] : found.residuals) g.set_input(add, i, dequantized.at(add->inputs[i]->name));
}

// INT8 engines: every product quantized by Q/DQ (uint8 activations; int8 where CUDA convolutions
// read them); nodes named in keep_float stay float.
Status insert_qdq(ir::Graph& g, Products which, const Calibration& cal, const std::set<std::string>& keep_float,
                  Int8Report* report) {
  const Targets found = find_targets(g, which, keep_float);
  insert_qdq_nodes(g, found, found.products, DataType::kInt8, cal, report);
  return g.sort();
}

// The E4M3 scale of a tensor whose magnitudes reach `amax` (1 for an all-zero tensor).
float e4m3_scale(double amax) { return symmetric_scale(amax, kE4M3FNMax); }

// The constant row [N] of MatMul's sole reader when it is Add(product, row) or Add(row, product): the
// bias an F8MatMul takes over; else null.
ir::Node* bias_add_of(const ir::Node& mm, int64_t n, const ir::Value** row) {
  const ir::Value* y = mm.outputs[0];
  if (y->is_output || y->uses.size() != 1) return nullptr;
  ir::Node* add = y->uses[0].node;
  if (!add->domain.empty() || add->op_type != "Add" || !add->has_input(0) || !add->has_input(1)) return nullptr;
  const ir::Value* other = add->inputs[y->uses[0].input_index == 0 ? 1 : 0];
  if (other == y || !other->is_constant() || other->constant->dtype() != DataType::kFloat32 || other->constant->numel() != n)
    return nullptr;
  const Shape& s = other->constant->shape();
  if (s.empty() || s.back() != n || s.size() > mm.outputs[0]->type.shape.dims.size()) return nullptr;
  *row = other;
  return add;
}

// Every FP8 product (find_targets with fp8) becomes kiln.F8MatMul(A, B8 [N, K], bias?) with a_scale
// from A's calibrated range and b_scale from the weights; nodes named in keep_float stay float.
Status insert_fp8(ir::Graph& g, Products which, const Calibration& cal, const std::set<std::string>& keep_float,
                  Int8Report* report) {
  const Targets found = find_targets(g, which, keep_float);
  std::vector<ir::Node*> targets, convs;
  for (ir::Node* n : found.products) (n->op_type == "Conv" ? convs : targets).push_back(n);
  // CUDA convolutions: E4M3 Q/DQ around them (activations and residuals scaled to ±448, weights per
  // output channel), which fuse-qdq makes cuda.QConv's FP8 form, as INT8 engines do it in int8.
  insert_qdq_nodes(g, found, convs, DataType::kFloat8E4M3FN, cal, report);
  std::set<std::string> matmul_acts;
  for (const ir::Node* n : targets) matmul_acts.insert(n->inputs[0]->name);
  std::map<std::string, float> a_scale;
  for (const std::string& a : found.acts) {
    if (!matmul_acts.count(a)) continue;
    const auto& [lo, hi] = cal.ranges.at(a);
    a_scale[a] = e4m3_scale(std::max(std::fabs(lo), std::fabs(hi)));
    if (report) report->ranges.push_back({a, lo, hi, a_scale[a], 0});
  }
  for (ir::Node* n : targets) {
    const Tensor& w = *n->inputs[1]->constant;
    const auto [trans_b, k, nn] = weights_kn(*n);
    const float* src = w.data<float>();
    double amax = 0;
    for (int64_t i = 0; i < w.numel(); ++i) amax = std::max(amax, std::fabs(static_cast<double>(src[i])));
    const float b_scale = e4m3_scale(amax);
    Tensor b8 = Tensor::empty(DataType::kFloat8E4M3FN, {nn, k});
    uint8_t* dst = static_cast<uint8_t*>(b8.raw());
    for (int64_t r = 0; r < nn; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const float v = trans_b ? src[r * k + c] : src[c * nn + r];
        dst[r * k + c] = f32_to_mini(v / b_scale, MiniFloat::kE4M3FN, true);
      }
    ir::Value* bv = g.new_value(n->inputs[1]->name + "_e4m3", ir::Type::tensor(DataType::kFloat8E4M3FN, ir::SymShape::of({nn, k})));
    bv->constant = std::move(b8);
    std::vector<ir::Value*> ins = {n->inputs[0], bv};
    ir::Value* out = n->outputs[0];
    ir::Node* add = nullptr;
    const ir::Value* row = nullptr;
    if (n->op_type == "Gemm" && n->has_input(2)) {
      row = n->inputs[2];
    } else if (n->op_type == "MatMul") {
      add = bias_add_of(*n, nn, &row);
    }
    if (row) {
      ir::Value* rv = g.new_value(row->name + "_row", ir::Type::tensor(DataType::kFloat32, ir::SymShape::of({nn})));
      rv->constant = row->constant->reshaped({nn});
      ins.push_back(rv);
    }
    if (add) out = add->outputs[0];
    const std::string name = n->name;
    if (add) g.remove_node(add);
    g.remove_node(n);
    ir::Node* f = g.add_node("F8MatMul", "kiln", ins, {out}, name);
    f->opset = 1;
    f->attrs["a_scale"].kind = ir::Attribute::Kind::kFloat;
    f->attrs["a_scale"].f = a_scale.at(ins[0]->name);
    f->attrs["b_scale"].kind = ir::Attribute::Kind::kFloat;
    f->attrs["b_scale"].f = b_scale;
  }
  return g.sort();
}

// The calibration sets' outputs of an engine.
Expected<std::vector<std::vector<Value>>> run_sets(const Engine& e, const std::vector<std::map<std::string, Tensor>>& sets) {
  KILN_ASSIGN_OR_RETURN(auto ctx, e.create_context());
  std::vector<std::vector<Value>> out;
  for (const auto& feeds : sets) {
    std::map<std::string, Value> in;
    for (const auto& [k, t] : feeds) in[k] = Value::of(t);
    KILN_ASSIGN_OR_RETURN(auto o, ctx->run(in));
    out.push_back(std::move(o));
  }
  return out;
}

// The accuracy metric of `got` against `want` over all sets: "rel_l2" (relative L2 of every float32
// output, pooled) or "top1" (the share of rows of output 0 — its last axis the classes — whose
// argmax differs).
double metric(const std::string& kind, const std::vector<std::vector<Value>>& got, const std::vector<std::vector<Value>>& want) {
  double num = 0, den = 0;
  int64_t rows = 0, differ = 0;
  for (size_t s = 0; s < want.size(); ++s)
    for (size_t i = 0; i < want[s].size() && i < got[s].size(); ++i) {
      const Tensor& a = got[s][i].tensor;
      const Tensor& b = want[s][i].tensor;
      if (a.dtype() != DataType::kFloat32 || b.dtype() != DataType::kFloat32 || a.numel() != b.numel()) continue;
      const float* pa = a.data<float>();
      const float* pb = b.data<float>();
      if (kind == "top1") {
        if (i != 0 || b.rank() == 0) continue;
        const int64_t classes = b.shape().back();
        for (int64_t r = 0; classes > 0 && r < b.numel() / classes; ++r) {
          const float* ra = pa + r * classes;
          const float* rb = pb + r * classes;
          differ += std::max_element(ra, ra + classes) - ra != std::max_element(rb, rb + classes) - rb;
          ++rows;
        }
        continue;
      }
      add_squared_error(a, b, &num, &den);
    }
  if (kind == "top1") return rows ? static_cast<double>(differ) / rows : 0.0;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace

void add_squared_error(const Tensor& got, const Tensor& want, double* num, double* den) {
  const float* pa = got.data<float>();
  const float* pb = want.data<float>();
  for (int64_t j = 0; j < want.numel(); ++j) {
    const double d = static_cast<double>(pa[j]) - pb[j];
    *num += d * d;
    *den += static_cast<double>(pb[j]) * pb[j];
  }
}

Expected<Int8Report> quantize_8bit(ir::Graph& g, const BuildOptions& options, DataType type, const KernelRegistry& target,
                                   const std::string& model_hash, const BuildFn& build_float, const BuildFn& build_quantized) {
  const Products which{type, &target};
  const auto insert = type == DataType::kFloat8E4M3FN ? insert_fp8 : insert_qdq;
  const std::string method = options.calibration_method.empty() ? "minmax" : options.calibration_method;
  const std::string kind = options.accuracy_metric.empty() ? "rel_l2" : options.accuracy_metric;
  if (kind != "rel_l2" && kind != "top1") return invalid_argument("accuracy metric '" + kind + "': use rel_l2 or top1");
  if (options.accuracy_budget < 0 || !std::isfinite(options.accuracy_budget))
    return invalid_argument("the accuracy budget must be a finite number >= 0");
  KILN_ASSIGN_OR_RETURN(Calibration cal, calibrate(g, options, which, model_hash, build_float));
  Int8Report report;
  report.from_cache = cal.from_cache;
  report.calibration_sets = cal.sets;
  const std::vector<ir::Node*> targets = find_targets(g, which, {}).products;
  for (const ir::Node* n : targets) report.layers.push_back({n->name, n->op_type, true, -1});
  std::set<std::string> keep_float;
  if (options.accuracy_budget > 0 && !targets.empty()) {
    // Mixed precision under a budget: each product's own error (only it in 8 bits), then the most
    // sensitive ones back to float32 — as few as keep the whole engine within the budget (the
    // smallest count found by bisection over the sensitivity order, checked by measuring it).
    if (options.calibration.empty())
      return invalid_argument("an accuracy budget is measured on calibration data: give calibration input sets");
    report.metric = kind;
    report.budget = options.accuracy_budget;
    const size_t nsets = std::min<size_t>(options.calibration.size(), 8);
    const std::vector<std::map<std::string, Tensor>> sets(options.calibration.begin(), options.calibration.begin() + nsets);
    KILN_ASSIGN_OR_RETURN(auto ref_engine, build_float(g.clone()));
    KILN_ASSIGN_OR_RETURN(auto want, run_sets(*ref_engine, sets));
    auto error_with = [&](const std::set<std::string>& keep) -> Expected<double> {
      auto copy = g.clone();
      KILN_RETURN_IF_ERROR(insert(*copy, which, cal, keep, nullptr));
      KILN_ASSIGN_OR_RETURN(auto e, build_quantized(std::move(copy)));
      KILN_ASSIGN_OR_RETURN(auto got, run_sets(*e, sets));
      return metric(kind, got, want);
    };
    std::set<std::string> all;
    for (const ir::Node* n : targets) all.insert(n->name);
    for (auto& layer : report.layers) {
      std::set<std::string> others = all;
      others.erase(layer.node);
      KILN_ASSIGN_OR_RETURN(layer.sensitivity, error_with(others));
    }
    std::vector<size_t> order(report.layers.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return report.layers[a].sensitivity > report.layers[b].sensitivity; });
    auto first_k = [&](size_t k) {
      std::set<std::string> keep;
      for (size_t i = 0; i < k; ++i) keep.insert(report.layers[order[i]].node);
      return keep;
    };
    size_t lo = 0, hi = order.size();  // hi: all float32, within any budget
    double err_hi = 0;
    KILN_ASSIGN_OR_RETURN(double err0, error_with({}));
    if (err0 <= options.accuracy_budget) {
      hi = 0;
      err_hi = err0;
    } else {
      while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        KILN_ASSIGN_OR_RETURN(double e, error_with(first_k(mid)));
        if (e <= options.accuracy_budget) {
          hi = mid;
          err_hi = e;
        } else {
          lo = mid;
        }
      }
    }
    keep_float = first_k(hi);
    for (auto& layer : report.layers) layer.int8 = !keep_float.count(layer.node);
    report.error = err_hi;
  }
  for (const auto& layer : report.layers) report.products += layer.int8;
  KILN_RETURN_IF_ERROR(insert(g, which, cal, keep_float, &report));
  return report;
}

namespace {

// Why an input's name cannot name its file in a calibration folder (a path: '/', '\\', "." or "..",
// absolute, or with a NUL), or "" when it can. Names map to files inside the folder only.
std::string unsafe_file_name(const std::string& name) {
  if (name.empty()) return "it is empty";
  if (name == "." || name == "..") return "it is '" + name + "'";
  if (name.find('/') != std::string::npos) return "it contains '/'";
  if (name.find('\\') != std::string::npos) return "it contains '\\'";
  if (name.find('\0') != std::string::npos) return "it contains a NUL character";
  return "";
}

}  // namespace

Expected<std::vector<std::map<std::string, Tensor>>> read_calibration_dir(const std::string& dir,
                                                                         const std::vector<std::string>& input_names) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("calibration data: '" + dir + "' is not a folder");

  std::vector<std::map<std::string, Tensor>> sets;
  std::vector<fs::path> entries;
  for (const auto& e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
  std::sort(entries.begin(), entries.end());
  for (const fs::path& p : entries) {
    if (fs::is_directory(p, ec)) {
      // One input set per subfolder: <input name>.npy for each input.
      std::map<std::string, Tensor> set;
      for (const std::string& name : input_names) {
        if (const std::string why = unsafe_file_name(name); !why.empty())
          return invalid_argument("calibration data: input '" + name + "' cannot be read from '" + p.string() +
                                  "' as <input name>.npy: " + why + " (names map to files inside the folder only); " +
                                  "give the calibration sets through the API (BuildOptions::calibration) instead");
        KILN_ASSIGN_OR_RETURN(Tensor t, read_npy((p / (name + ".npy")).string()));
        set[name] = std::move(t);
      }
      sets.push_back(std::move(set));
    } else if (p.extension() == ".npy") {
      // Files straight in the folder: one input set each, for a model with one input.
      if (input_names.size() != 1)
        return invalid_argument("calibration data: a model with " + std::to_string(input_names.size()) +
                                " inputs needs one subfolder per input set, each with <input name>.npy");
      KILN_ASSIGN_OR_RETURN(Tensor t, read_npy(p.string()));
      sets.push_back({{input_names[0], std::move(t)}});
    }
  }
  if (ec) return io_error("calibration data: cannot list '" + dir + "': " + ec.message());
  if (sets.empty()) return invalid_argument("calibration data: '" + dir + "' holds no .npy input sets");
  return sets;
}

}  // namespace kiln
