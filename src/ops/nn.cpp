// ops/nn.cpp — types and shapes of the nn op family (matmul/gemm, convolution, pooling,
// normalization, softmax, dropout), and the window geometry their kernels share.
#include "ops/nn.h"

#include <algorithm>

#include "ops/op_table.h"
#include "ops/params_nn.h"

namespace kiln::ops {

using ir::Dim;
using ir::SymShape;
using ir::Type;

// ---------------------------------------------------------------- window geometry

WindowAttrs parse_window_attrs(const ir::Node& node) {
  WindowAttrs a;
  a.kernel = node.attr_ints("kernel_shape");
  a.strides = node.attr_ints("strides");
  a.dilations = node.attr_ints("dilations");
  a.pads = node.attr_ints("pads");
  a.auto_pad = node.attr_string("auto_pad", "NOTSET");
  a.ceil_mode = node.attr_int("ceil_mode", 0) != 0;
  a.output_padding = node.attr_ints("output_padding");
  a.output_shape = node.attr_ints("output_shape");
  return a;
}

static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Fills kernel/strides/dilations/pads with defaults and checks their lengths.
// Sliding-window geometry multiplies a window value by another (kernel by dilation, stride by size) and
// adds a few such terms: with every value and spatial size within ±2^30 none of it can leave int64.
constexpr int64_t kMaxWindowValue = int64_t{1} << 30;
static bool window_values_fit(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [](int64_t x) { return x >= -kMaxWindowValue && x <= kMaxWindowValue; });
}

static Status fill_window(const WindowAttrs& a, size_t n, const std::vector<int64_t>& kernel, WindowGeometry& g) {
  g.kernel = a.kernel.empty() ? kernel : a.kernel;
  g.strides = a.strides.empty() ? std::vector<int64_t>(n, 1) : a.strides;
  g.dilations = a.dilations.empty() ? std::vector<int64_t>(n, 1) : a.dilations;
  g.pads = a.pads.empty() ? std::vector<int64_t>(2 * n, 0) : a.pads;
  if (g.kernel.size() != n) return invalid_argument("kernel_shape has " + std::to_string(g.kernel.size()) +
                                                    " dims, input has " + std::to_string(n) + " spatial dims");
  if (g.strides.size() != n || g.dilations.size() != n || g.pads.size() != 2 * n)
    return invalid_argument("strides, dilations and pads must have one entry per spatial dim (pads two)");
  for (size_t i = 0; i < n; ++i)
    if (g.kernel[i] < 1 || g.strides[i] < 1 || g.dilations[i] < 1)
      return invalid_argument("kernel_shape, strides and dilations must be positive");
  if (!window_values_fit(g.kernel) || !window_values_fit(g.strides) || !window_values_fit(g.dilations) || !window_values_fit(g.pads))
    return invalid_argument("kernel_shape, strides, dilations and pads must be within ±2^30");
  return Status::Ok();
}

Expected<WindowGeometry> window_geometry(const WindowAttrs& a, const std::vector<int64_t>& in,
                                         const std::vector<int64_t>& kernel) {
  const size_t n = in.size();
  WindowGeometry g;
  KILN_RETURN_IF_ERROR(fill_window(a, n, kernel, g));
  if (!window_values_fit(in)) return invalid_argument("spatial sizes past 2^30 are not supported");
  g.out.resize(n);
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = g.strides[i], dk = (g.kernel[i] - 1) * g.dilations[i] + 1;
    if (same) {
      g.out[i] = (in[i] + s - 1) / s;
      const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * s + dk - in[i]);
      g.pads[i] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pads[n + i] = total - g.pads[i];
      continue;
    }
    if (a.auto_pad == "VALID") g.pads[i] = g.pads[n + i] = 0;
    const int64_t span = in[i] + g.pads[i] + g.pads[n + i] - dk;
    if (span < 0) {
      if (in[i] == 0) { g.out[i] = 0; continue; }
      return invalid_argument("window of " + std::to_string(dk) + " is larger than the padded input (" +
                              std::to_string(in[i] + g.pads[i] + g.pads[n + i]) + ")");
    }
    g.out[i] = (a.ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // ceil_mode: the last window must start inside the input or its begin padding.
    if (a.ceil_mode && (g.out[i] - 1) * s >= in[i] + g.pads[i]) --g.out[i];
  }
  return g;
}

Expected<WindowGeometry> transpose_geometry(const WindowAttrs& a, const std::vector<int64_t>& in,
                                            const std::vector<int64_t>& kernel) {
  const size_t n = in.size();
  WindowGeometry g;
  KILN_RETURN_IF_ERROR(fill_window(a, n, kernel, g));
  std::vector<int64_t> op = a.output_padding.empty() ? std::vector<int64_t>(n, 0) : a.output_padding;
  if (op.size() == 2 * n) op.resize(n);
  if (op.size() != n) return invalid_argument("output_padding must have one entry per spatial dim");
  std::vector<int64_t> os = a.output_shape;
  if (os.size() == n + 2) os.erase(os.begin(), os.begin() + 2);
  if (!os.empty() && os.size() != n) return invalid_argument("output_shape must have one entry per spatial dim");
  if (!window_values_fit(in) || !window_values_fit(op) || !window_values_fit(os))
    return invalid_argument("spatial sizes, output_padding and output_shape must be within ±2^30");
  const bool same = a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER";
  g.out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = g.strides[i], dk = (g.kernel[i] - 1) * g.dilations[i] + 1;
    const int64_t full = s * (in[i] - 1) + op[i] + dk;
    if (same && a.pads.empty()) {
      g.out[i] = os.empty() ? in[i] * s : os[i];
      const int64_t total = full - g.out[i];
      const int64_t half = floor_div(total, 2);
      g.pads[i] = a.auto_pad == "SAME_UPPER" ? half : total - half;
      g.pads[n + i] = total - g.pads[i];
      continue;
    }
    if (a.auto_pad == "VALID") g.pads[i] = g.pads[n + i] = 0;
    g.out[i] = os.empty() ? full - g.pads[i] - g.pads[n + i] : os[i];
    if (g.out[i] < 0) return invalid_argument("ConvTranspose output would have a negative size");
  }
  return g;
}

// ---------------------------------------------------------------- shape helpers

namespace {

bool static_dims(const SymShape& s, int from, std::vector<int64_t>* out) {
  out->clear();
  for (int i = from; i < s.rank(); ++i) {
    if (!s.dims[i].is_static()) return false;
    out->push_back(s.dims[i].value);
  }
  return true;
}

Status same_as_input(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = c.type(0);
  return Status::Ok();
}

// [N, channels, spatial...] for sliding-window ops; spatial dims unknown when not static.
Status window_output(InferContext& c, const WindowAttrs& a, Dim channels, bool transpose,
                     const std::vector<int64_t>& kernel_from_w) {
  const SymShape& x = c.shape(0);
  if (!x.known) return Status::Ok();
  if (x.rank() < 3) return c.error("input must have rank >= 3 ([N, C, spatial...]), got " + x.to_string());
  std::vector<Dim> dims = {x.dims[0], channels};
  std::vector<int64_t> sp;
  const std::vector<int64_t>& kernel = a.kernel.empty() ? kernel_from_w : a.kernel;
  bool done = false;
  if (static_dims(x, 2, &sp) && kernel.size() == sp.size()) {
    auto g = transpose ? transpose_geometry(a, sp, kernel) : window_geometry(a, sp, kernel);
    if (!g.ok()) return c.error(g.status().message());
    for (int64_t d : g->out) dims.emplace_back(d);
    done = true;
  }
  if (!done)
    for (int i = 2; i < x.rank(); ++i) dims.emplace_back();
  for (auto& o : c.out) o = Type::tensor(c.dtype(0), SymShape(dims));
  return Status::Ok();
}

std::vector<int64_t> weight_kernel(InferContext& c, int w) {
  std::vector<int64_t> k;
  if (c.has(w) && c.shape(w).known) static_dims(c.shape(w), 2, &k);
  return k;
}

Status conv_like(InferContext& c, DataType out_dtype) {
  if (!c.has(0) || !c.has(1)) return Status::Ok();
  const int w = c.node.op_type == "QLinearConv" ? 3 : 1;
  Dim m;
  if (c.has(w) && c.shape(w).known && c.shape(w).rank() >= 1) m = c.shape(w).dims[0];
  KILN_RETURN_IF_ERROR(window_output(c, parse_conv(c.node).window, m, false, weight_kernel(c, w)));
  if (c.out[0].kind == Type::Kind::kTensor) c.out[0].dtype = out_dtype;
  else c.out[0] = Type::tensor(out_dtype);
  return Status::Ok();
}

Status infer_conv(InferContext& c) { return c.has(0) ? conv_like(c, c.dtype(0)) : Status::Ok(); }
Status infer_conv_integer(InferContext& c) { return conv_like(c, DataType::kInt32); }
Status infer_qlinear_conv(InferContext& c) {
  if (!c.has(7)) return Status::Ok();
  return conv_like(c, c.dtype(7));
}

Status infer_conv_transpose(InferContext& c) {
  if (!c.has(0) || !c.has(1)) return Status::Ok();
  Dim m;
  const ConvParams p = parse_conv(c.node);
  const SymShape& w = c.shape(1);
  if (w.known && w.rank() >= 2 && w.dims[1].is_static())
    if (int64_t v; !__builtin_mul_overflow(w.dims[1].value, p.group, &v)) m = Dim(v);
  return window_output(c, p.window, m, true, weight_kernel(c, 1));
}

Status infer_pool(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const SymShape& x = c.shape(0);
  const Dim channels = x.known && x.rank() > 1 ? x.dims[1] : Dim();
  KILN_RETURN_IF_ERROR(window_output(c, parse_pool(c.node).window, channels, false, {}));
  if (c.out.size() > 1) c.out[1].dtype = DataType::kInt64;
  return Status::Ok();
}

Status infer_global_pool(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const SymShape& x = c.shape(0);
  if (!x.known) { c.out[0] = Type::tensor(c.dtype(0)); return Status::Ok(); }
  if (x.rank() < 2) return c.error("input must have rank >= 2");
  std::vector<Dim> dims = {x.dims[0], x.dims[1]};
  for (int i = 2; i < x.rank(); ++i) dims.emplace_back(1);
  c.out[0] = Type::tensor(c.dtype(0), SymShape(dims));
  return Status::Ok();
}

Status infer_max_unpool(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(c.dtype(0));
  if (const Tensor* os = c.value(2)) {
    std::vector<Dim> dims;
    for (int64_t i = 0; i < os->numel(); ++i) dims.emplace_back(os->data<int64_t>()[i]);
    c.out[0].shape = SymShape(dims);
    return Status::Ok();
  }
  if (c.has(2)) return Status::Ok();
  const SymShape& x = c.shape(0);
  std::vector<int64_t> sp;
  if (!x.known || x.rank() < 3) return Status::Ok();
  std::vector<Dim> dims = {x.dims[0], x.dims[1]};
  const WindowAttrs a = parse_pool(c.node).window;
  if (static_dims(x, 2, &sp) && a.kernel.size() == sp.size()) {
    WindowGeometry g;
    const size_t n = sp.size();
    if (!fill_window(a, n, a.kernel, g).ok() || !window_values_fit(sp)) return c.error("bad kernel_shape/strides/pads");
    for (size_t i = 0; i < n; ++i) {
      const int64_t d = (sp[i] - 1) * g.strides[i] + g.kernel[i] - g.pads[i] - g.pads[n + i];
      if (d < 0) return c.error("kernel_shape, strides and pads give spatial dim " + std::to_string(i) + " no valid size");
      dims.emplace_back(d);
    }
  } else {
    for (int i = 2; i < x.rank(); ++i) dims.emplace_back();
  }
  c.out[0].shape = SymShape(dims);
  return Status::Ok();
}

// numpy matmul: 1-D operands are promoted and the promoted dim removed again.
Status matmul_like(InferContext& c, int a, int b, DataType out_dtype) {
  if (!c.has(a) || !c.has(b)) return Status::Ok();
  c.out[0] = Type::tensor(out_dtype);
  const SymShape& sa = c.shape(a);
  const SymShape& sb = c.shape(b);
  if (!sa.known || !sb.known) return Status::Ok();
  if (sa.rank() == 0 || sb.rank() == 0) return c.error("MatMul operands must have rank >= 1");
  std::vector<Dim> da = sa.dims, db = sb.dims;
  if (da.size() == 1) da.insert(da.begin(), Dim(1));
  if (db.size() == 1) db.push_back(Dim(1));
  const Dim& ka = da.back();
  const Dim& kb = db[db.size() - 2];
  if (ka.is_static() && kb.is_static() && ka.value != kb.value)
    return c.error("inner dimensions differ: " + sa.to_string() + " x " + sb.to_string());
  SymShape batch = broadcast_sym(SymShape(std::vector<Dim>(da.begin(), da.end() - 2)),
                                 SymShape(std::vector<Dim>(db.begin(), db.end() - 2)));
  std::vector<Dim> out = batch.dims;
  if (sa.rank() > 1) out.push_back(da[da.size() - 2]);
  if (sb.rank() > 1) out.push_back(db.back());
  c.out[0].shape = SymShape(out);
  return Status::Ok();
}

Status infer_matmul(InferContext& c) { return c.has(0) ? matmul_like(c, 0, 1, c.dtype(0)) : Status::Ok(); }
Status infer_matmul_integer(InferContext& c) { return matmul_like(c, 0, 1, DataType::kInt32); }
Status infer_qlinear_matmul(InferContext& c) { return c.has(7) ? matmul_like(c, 0, 3, c.dtype(7)) : Status::Ok(); }

Status infer_gemm(InferContext& c) {
  if (!c.has(0) || !c.has(1)) return Status::Ok();
  c.out[0] = Type::tensor(c.dtype(0));
  const SymShape& a = c.shape(0);
  const SymShape& b = c.shape(1);
  if (!a.known || !b.known) return Status::Ok();
  if (a.rank() != 2 || b.rank() != 2) return c.error("A and B must be 2-D");
  const GemmParams p = parse_gemm(c.node);
  c.out[0].shape = SymShape({a.dims[p.trans_a ? 1 : 0], b.dims[p.trans_b ? 0 : 1]});
  return Status::Ok();
}

Status infer_dropout(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = c.type(0);
  if (c.out.size() > 1) {
    c.out[1] = c.type(0);
    if (parse_dropout(c.node).bool_mask) c.out[1].dtype = DataType::kBool;
  }
  return Status::Ok();
}

Status infer_batch_norm(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = c.type(0);
  for (size_t i = 1; i < c.out.size(); ++i) {
    if (c.has(3)) c.out[i] = c.type(3);
    else c.out[i] = Type::tensor(c.dtype(0));
  }
  return Status::Ok();
}

Status infer_layer_norm(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = c.type(0);
  const LayerNormParams p = parse_layer_norm(c.node);
  for (size_t i = 1; i < c.out.size(); ++i) c.out[i] = Type::tensor(p.stash);
  const SymShape& x = c.shape(0);
  if (!x.known || c.out.size() < 2) return Status::Ok();
  int64_t axis = p.axis;
  if (!normalize_axis(axis, x.rank())) return c.error("axis out of range");
  std::vector<Dim> dims(x.dims.begin(), x.dims.begin() + axis);
  for (int i = static_cast<int>(axis); i < x.rank(); ++i) dims.emplace_back(1);
  for (size_t i = 1; i < c.out.size(); ++i) c.out[i].shape = SymShape(dims);
  return Status::Ok();
}

}  // namespace

void add_nn_ops(std::vector<OpDef>& t) {
  t.push_back({"MatMul", "", 1, infer_matmul});
  t.push_back({"Gemm", "", 1, infer_gemm});
  t.push_back({"MatMulInteger", "", 10, infer_matmul_integer});
  t.push_back({"QLinearMatMul", "", 10, infer_qlinear_matmul});
  t.push_back({"Conv", "", 1, infer_conv});
  t.push_back({"ConvInteger", "", 10, infer_conv_integer});
  t.push_back({"QLinearConv", "", 10, infer_qlinear_conv});
  t.push_back({"ConvTranspose", "", 1, infer_conv_transpose});
  t.push_back({"MaxPool", "", 1, infer_pool});
  t.push_back({"AveragePool", "", 1, infer_pool});
  t.push_back({"LpPool", "", 2, infer_pool});
  t.push_back({"GlobalAveragePool", "", 1, infer_global_pool});
  t.push_back({"GlobalMaxPool", "", 1, infer_global_pool});
  t.push_back({"GlobalLpPool", "", 2, infer_global_pool});
  t.push_back({"MaxUnpool", "", 9, infer_max_unpool});
  t.push_back({"BatchNormalization", "", 1, infer_batch_norm});
  t.push_back({"InstanceNormalization", "", 6, same_as_input});
  t.push_back({"LayerNormalization", "", 17, infer_layer_norm});
  t.push_back({"GroupNormalization", "", 18, same_as_input});
  t.push_back({"RMSNormalization", "", 23, same_as_input});
  t.push_back({"LRN", "", 1, same_as_input});
  t.push_back({"MeanVarianceNormalization", "", 9, same_as_input});
  t.push_back({"Softmax", "", 1, same_as_input});
  t.push_back({"LogSoftmax", "", 1, same_as_input});
  t.push_back({"Hardmax", "", 1, same_as_input});
  t.push_back({"Dropout", "", 1, infer_dropout});

  // Attributes, declared once (checked at import by check_attributes; parsed in params_nn.cpp).
  using K = ir::Attribute::Kind;
  const std::vector<AttrSpec> window = {
      {"auto_pad", K::kString, false, rule_auto_pad},
      {"kernel_shape", K::kInts, false, rule_positive_ints},
      {"strides", K::kInts, false, rule_positive_ints},
      {"dilations", K::kInts, false, rule_positive_ints},
      {"pads", K::kInts, false, rule_non_negative_ints},
  };
  auto with = [&](std::vector<AttrSpec> extra, bool kernel_required = false) {
    std::vector<AttrSpec> all = window;
    all[1].required = kernel_required;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  declare_attrs(t, "Conv", with({{"group", K::kInt, false, rule_positive}}));
  declare_attrs(t, "ConvTranspose", with({{"group", K::kInt, false, rule_positive},
                                          {"output_padding", K::kInts, false, rule_non_negative_ints},
                                          {"output_shape", K::kInts, false, nullptr}}));
  declare_attrs(t, "MaxPool", with({{"ceil_mode", K::kInt, false, rule_bool}, {"storage_order", K::kInt, false, rule_bool}}, true));
  declare_attrs(t, "AveragePool", with({{"ceil_mode", K::kInt, false, rule_bool},
                                        {"count_include_pad", K::kInt, false, rule_bool}}, true));
  declare_attrs(t, "LpPool", with({{"ceil_mode", K::kInt, false, rule_bool}}, true));
  // MaxUnpool takes no auto_pad or dilations; its window must match the MaxPool that made the indices.
  declare_attrs(t, "MaxUnpool", {{"kernel_shape", K::kInts, true, rule_positive_ints},
                                 {"strides", K::kInts, false, rule_positive_ints},
                                 {"pads", K::kInts, false, rule_non_negative_ints}});
  declare_attrs(t, "Gemm", {{"alpha", K::kFloat, false, nullptr}, {"beta", K::kFloat, false, nullptr},
                            {"transA", K::kInt, false, rule_bool}, {"transB", K::kInt, false, rule_bool}});
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) declare_attrs(t, op, {{"axis", K::kInt, false, nullptr}});
  declare_attrs(t, "BatchNormalization", {{"epsilon", K::kFloat, false, nullptr}, {"momentum", K::kFloat, false, nullptr},
                                          {"training_mode", K::kInt, false, rule_bool}});
  declare_attrs(t, "LayerNormalization", {{"axis", K::kInt, false, nullptr}, {"epsilon", K::kFloat, false, nullptr},
                                          {"stash_type", K::kInt, false, nullptr}});
}

bool attention_mask_strides(const std::vector<int64_t>& m, const int64_t (&full)[4], int64_t (&strides)[4],
                            int64_t period) {
  if (m.size() > 4) return false;
  if (period < 0) return false;
  if (period > 0 && (m.size() != 4 || m[0] != period || full[0] % period != 0)) return false;
  int64_t stride = 1;
  for (int d = 3; d >= 0; --d) {
    const int md = d - (4 - static_cast<int>(m.size()));
    const int64_t size = md >= 0 ? m[md] : 1;
    const int64_t want = d == 0 && period > 0 ? period : full[d];
    if (size != 1 && size != want) return false;
    strides[d] = size == 1 ? 0 : stride;
    stride *= size;
  }
  return true;
}

std::string attention_geometry(const FusedAttentionParams& a, const std::vector<int64_t>& q, const std::vector<int64_t>& k,
                               const std::vector<int64_t>& v, AttentionGeometry* out) {
  if (std::string why = fused_attention_attrs_error(a); !why.empty()) return why;
  // (heads-first tensors carry their head counts: num_heads 0 is Q's)
  int64_t H = a.num_heads;
  AttentionGeometry g;
  AttentionStrides& st = g.st;
  if (a.heads_first) {
    if (q.size() != 4 || k.size() != 4 || v.size() != 4) return "heads-first Q, K, V must be 4-D ([B, heads, sequence, head size])";
    if (H && q[1] != H) return "Q has " + std::to_string(q[1]) + " heads, num_heads is " + std::to_string(H);
    H = q[1];
    g.B = q[0], g.S = q[2], g.T = k[2], g.Hkv = k[1], g.D = q[3], g.Dv = v[3];
    if (a.kv_num_heads && k[1] != a.kv_num_heads)
      return "K has " + std::to_string(k[1]) + " heads, kv_num_heads is " + std::to_string(a.kv_num_heads);
    if (k[0] != g.B || v[0] != g.B || v[1] != g.Hkv || v[2] != g.T) return "Q, K, V batch, head counts or key lengths differ";
    if (k[3] != g.D) return "Q's and K's head sizes differ";
    st.q_row = g.D, st.q_head = g.S * g.D, st.q_batch = H * g.S * g.D;
    st.k_row = g.D, st.k_head = g.T * g.D, st.k_batch = g.Hkv * g.T * g.D;
    st.v_row = g.Dv, st.v_head = g.T * g.Dv, st.v_batch = g.Hkv * g.T * g.Dv;
  } else {
    if (q.size() != 3 || k.size() != 3 || v.size() != 3) return "Q, K, V must be 3-D";
    // Batch-first [B, S, H*D], or sequence-first [S, B, H*D]: dim `bd` is the batch, `sd` the sequence.
    const int bd = a.sequence_first ? 1 : 0, sd = 1 - bd;
    g.B = q[bd], g.S = q[sd], g.T = k[sd];
    g.Hkv = a.kv_num_heads ? a.kv_num_heads : H;
    if (k[bd] != g.B || v[bd] != g.B || v[sd] != g.T) return "Q, K, V batch or key lengths differ";
    if (a.packed_qkv) {
      // Q, K, V are column blocks of one [B, S, 3*H*D] tensor given as inputs 0, 1 and 2 alike.
      if (q != k || q != v || q[2] % 3) return "a packed QKV is one tensor [B, S, 3*H*D] (or [S, B, 3*H*D]) given as Q, K and V";
      if (g.Hkv != H) return "a packed QKV has as many K and V heads as Q heads";
      if ((q[2] / 3) % H) return "hidden sizes do not split into " + std::to_string(H) + " heads";
      g.D = g.Dv = q[2] / 3 / H;
      const int64_t row = a.sequence_first ? g.B * q[2] : q[2], batch = a.sequence_first ? q[2] : g.S * q[2];
      st.q_row = st.k_row = st.v_row = row;
      st.q_batch = st.k_batch = st.v_batch = batch;
    } else {
      if (q[2] % H || k[2] % g.Hkv || v[2] % g.Hkv) return "hidden sizes do not split into " + std::to_string(H) + " heads (" +
                                                           std::to_string(g.Hkv) + " for K and V)";
      g.D = q[2] / H, g.Dv = v[2] / g.Hkv;
      if (k[2] / g.Hkv != g.D) return "Q's and K's head sizes differ";
      auto strides = [&](int64_t len, int64_t width, int64_t* row, int64_t* batch) {
        *row = a.sequence_first ? g.B * width : width;
        *batch = a.sequence_first ? width : len * width;
      };
      strides(g.S, q[2], &st.q_row, &st.q_batch);
      strides(g.T, k[2], &st.k_row, &st.k_batch);
      strides(g.T, v[2], &st.v_row, &st.v_batch);
    }
    st.q_head = st.k_head = g.D, st.v_head = g.Dv;
  }
  g.H = H;
  if (H <= 0) return "Q has no heads";
  if (g.Hkv <= 0 || H % g.Hkv) return std::to_string(H) + " query heads do not group over " + std::to_string(g.Hkv) + " K/V heads";
  st.y_row = a.sequence_first ? g.B * H * g.Dv : H * g.Dv;
  st.y_batch = a.sequence_first ? H * g.Dv : g.S * H * g.Dv;
  *out = g;
  return "";
}

std::string rotary_geometry(const std::vector<int64_t>& x, const std::vector<int64_t>& cos, const std::vector<int64_t>& sin,
                            RotaryGeometry* out) {
  if (x.empty()) return "X must have at least one dim (the rotated one)";
  RotaryGeometry g;
  g.d = x.back();
  if (g.d % 2) return "the last dim of X (" + std::to_string(g.d) + ") is odd: rotate_half splits it in two";
  g.outer.assign(x.begin(), x.end() - 1);
  g.rows = 1;
  for (int64_t v : g.outer) g.rows *= v;
  const int r = static_cast<int>(x.size());
  auto strides = [&](const std::vector<int64_t>& c, const char* what, std::vector<int64_t>* o, int64_t* last) -> std::string {
    if (static_cast<int>(c.size()) > r) return std::string(what) + " has more dims than X";
    std::vector<int64_t> st(r, 0);
    int64_t stride = 1;
    for (int i = r - 1; i >= 0; --i) {
      const int ci = i - (r - static_cast<int>(c.size()));
      const int64_t size = ci >= 0 ? c[ci] : 1;
      if (size != 1 && size != x[i]) return std::string(what) + " does not broadcast to X without enlarging it";
      st[i] = size == 1 ? 0 : stride;
      stride *= size;
    }
    *last = st[r - 1];
    o->assign(st.begin(), st.end() - 1);
    return "";
  };
  if (std::string w = strides(cos, "COS", &g.cos_outer, &g.cos_last); !w.empty()) return w;
  if (std::string w = strides(sin, "SIN", &g.sin_outer, &g.sin_last); !w.empty()) return w;
  *out = std::move(g);
  return "";
}

}  // namespace kiln::ops
