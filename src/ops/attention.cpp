// ops/attention.cpp — types and shapes of the attention op family: Attention, FlexAttention
// (ai.onnx.preview), LinearAttention and RotaryEmbedding.
#include "ops/op_table.h"
#include "ops/params_misc.h"
#include "ops/shape_infer_util.h"

namespace kiln::ops {
namespace {

using ir::Dim;
using ir::SymShape;
using ir::Type;

Dim unknown() { return Dim(); }

bool ranked(const InferContext& c, int i, int rank) {
  return c.has(i) && c.type(i).is_tensor() && c.shape(i).known && c.shape(i).rank() == rank;
}

Status infer_attention(InferContext& c) {
  if (!c.has(0) || !c.has(1) || !c.has(2)) return c.error("Q, K and V are required");
  const DataType qt = c.dtype(0), kt = c.dtype(1), vt = c.dtype(2);
  for (auto& o : c.out) o = Type::tensor(qt);
  if (c.out.size() > 1) c.out[1] = Type::tensor(kt);
  if (c.out.size() > 2) c.out[2] = Type::tensor(vt);
  const Expected<AttentionParams> p = parse_attention(c.node);
  // An invalid attribute is the kernels' error, raised when they are made: the shapes stay unknown.
  if (!p.ok()) return Status::Ok();
  const int64_t hq_attr = p->q_num_heads, hkv_attr = p->kv_num_heads;
  const bool four = ranked(c, 0, 4) && ranked(c, 1, 4) && ranked(c, 2, 4);
  const bool three = ranked(c, 0, 3) && ranked(c, 1, 3) && ranked(c, 2, 3);
  if (!four && !three) return Status::Ok();
  const auto &q = c.shape(0).dims, &k = c.shape(1).dims, &v = c.shape(2).dims;
  Dim B = q[0], Sq = four ? q[2] : q[1], Skv = four ? k[2] : k[1];
  Dim Hq = four ? q[1] : Dim(hq_attr), Hkv = four ? k[1] : Dim(hkv_attr);
  Dim D = four ? q[3] : dim_div(q[2], hq_attr), Dv = four ? v[3] : dim_div(v[2], hkv_attr);
  if (three && (hq_attr <= 0 || hkv_attr <= 0)) return c.error("3-D inputs need q_num_heads and kv_num_heads");
  Dim past = Dim(0);
  if (c.has(4)) past = ranked(c, 4, 4) ? c.shape(4).dims[2] : unknown();
  const Dim total = dim_add(past, Skv);
  c.out[0].shape = four ? SymShape({B, Hq, Sq, Dv}) : SymShape({B, Sq, dim_mul(Dv, Dim(hq_attr))});
  if (c.out.size() > 1) c.out[1].shape = SymShape({B, Hkv, total, D});
  if (c.out.size() > 2) c.out[2].shape = SymShape({B, Hkv, total, Dv});
  if (c.out.size() > 3) c.out[3].shape = SymShape({B, Hq, Sq, total});
  return Status::Ok();
}

Status infer_linear_attention(InferContext& c) {
  if (!c.has(0) || !c.has(2)) return c.error("query, key and value are required");
  c.out[0] = Type::tensor(c.dtype(0));
  if (c.out.size() > 1) c.out[1] = Type::tensor(c.has(3) ? c.dtype(3) : c.dtype(0));
  const Expected<LinearAttentionParams> p = parse_linear_attention(c.node);
  // An invalid attribute is the kernels' error, raised when they are made: the shapes stay unknown.
  if (!p.ok()) return Status::Ok();
  const int64_t hq = p->q_num_heads, hkv = p->kv_num_heads;
  if (!ranked(c, 0, 3) || !ranked(c, 2, 3) || hq <= 0 || hkv <= 0) return Status::Ok();
  const auto &q = c.shape(0).dims, &v = c.shape(2).dims;
  const Dim dv = dim_div(v[2], hkv);
  c.out[0].shape = SymShape({q[0], q[1], dim_mul(dv, Dim(hq))});
  if (c.out.size() > 1) c.out[1].shape = SymShape({q[0], Dim(hkv), dim_div(q[2], hq), dv});
  return Status::Ok();
}

Status infer_flex_attention(InferContext& c) {
  if (!c.has(0) || !c.has(2)) return c.error("Q, K and V are required");
  c.out[0] = Type::tensor(c.dtype(0));
  if (ranked(c, 0, 4) && ranked(c, 2, 4)) {
    const auto &q = c.shape(0).dims, &v = c.shape(2).dims;
    c.out[0].shape = SymShape({q[0], q[1], q[2], v[3]});
  }
  return Status::Ok();
}

}  // namespace

void add_attention_ops(std::vector<OpDef>& t) {
  t.push_back({"Attention", "", 23, infer_attention});
  t.push_back({"FlexAttention", "ai.onnx.preview", 1, infer_flex_attention});
  t.push_back({"LinearAttention", "", 27, infer_linear_attention});
  t.push_back({"RotaryEmbedding", "", 23, infer_same_as_input0});
}

}  // namespace kiln::ops
