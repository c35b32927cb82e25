// ops/contrib.cpp — ONNX Runtime's contrib ops (domain com.microsoft, and SimplifiedLayerNormalization,
// which ONNX Runtime registers in the ai.onnx domain): their attributes, input/output counts and types.
//
// kiln has no kernels of these ops: passes/lower_contrib.cpp rewrites each node into ai.onnx ops before
// any other pass (issue #44), and kiln's fusions make its fused kernels of those again (how = "lowered").
// The declarations are here so that the importer checks a contrib node as it checks any other (counts,
// attribute kinds and rules) and types flow through it: the lowering reads its inputs' ranks.
//
//   Gelu(X)                                  erf GELU
//   FastGelu(X[, bias])                      tanh-approximated GELU of X (+ bias)
//   BiasGelu(A, B)                           erf GELU of A + B
//   QuickGelu(X)                             X · sigmoid(alpha · X), alpha = 1.702
//   BiasAdd(X, bias, skip)                   X + bias + skip
//   BiasSoftmax(data, bias)                  softmax of data + bias over the dims from axis (default 1)
//   SkipLayerNormalization(input, skip, gamma[, beta[, bias]])
//        → output[, mean, inv_std_var, input_skip_bias_sum]   LayerNorm of input + skip (+ bias) over the
//                                            last dim, epsilon = 1e-12
//   SkipSimplifiedLayerNormalization(input, skip, gamma[, bias])
//        → output[, mean, inv_std_var, input_skip_bias_sum]   the same with RMS normalization (no mean)
//   SimplifiedLayerNormalization(X, scale) → Y[, inv_std_var]     RMS normalization over dims axis.. (ai.onnx)
//   Attention(input, weights[, bias[, mask_index[, past[, attention_bias[, past_sequence_length]]]]])
//        → output[, present]                 BERT's self-attention of one packed projection (num_heads,
//                                            scale = 1/sqrt(head size), unidirectional, mask_filter_value)
//   MultiHeadAttention(query, key, value[, bias[, key_padding_mask[, attention_bias[, past_key[, past_value
//        [, past_sequence_length[, cache_indirection]]]]]]]) → output[, present_key, present_value, qk]
//                                            attention of projected Q, K, V (separate, or packed KV/QKV)
//   GroupQueryAttention(query, key, value, past_key, past_value, seqlens_k, total_sequence_length
//        [, cos_cache, sin_cache[, position_ids[, attention_bias]]]) → output, present_key, present_value
//                                            causal attention with kv_num_heads shared KV heads and a
//                                            cache, optionally rotary (do_rotary)
//   EmbedLayerNormalization(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
//        gamma, beta[, mask[, position_ids]]) → output[, mask_index, embedding_sum]   BERT's embeddings:
//                                            LayerNorm of the three lookups' sum; mask_index = the mask's
//                                            sum over the sequence (int32; zeros without a mask)
//   RotaryEmbedding(input, position_ids, cos_cache, sin_cache)   rotary position embedding of input
//        [B, S, hidden] or [B, H, S, Dh] at position_ids [B, S] (or one offset [1]: offset + s)
//   FusedMatMul(A, B)                        alpha · op(A) · op(B): transA/transB swap the last two dims,
//                                            transBatchA/B move dim 0 behind the batch dims first
//
// Facts taken from ONNX Runtime 1.22's operator schemas and checked against its CPU kernels
// (tests/python/test_contrib_ops.py): SkipSimplifiedLayerNormalization adds its bias to the sum it
// normalizes and returns; ONNX Runtime's CPU kernels write neither mean nor inv_std_var of
// SkipLayerNormalization (kiln writes LayerNormalization's, shaped [..., 1]).
#include "ops/contrib.h"
#include "ops/op_table.h"
#include "ops/shape_infer_util.h"

namespace kiln::ops {
namespace {

using K = ir::Attribute::Kind;

// Output 0 has input 0's dtype and the broadcast of the shapes of the inputs present.
Status infer_elementwise(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  ir::SymShape s = c.shape(0);
  for (int i = 1; i < c.num_inputs(); ++i)
    if (c.has(i)) s = broadcast_sym(s, c.shape(i));
  c.out[0] = ir::Type::tensor(c.dtype(0), s);
  return Status::Ok();
}

// The normalizations: output 0 (and the Skip ops' sum, output 3) has the shape of input (+ skip); the
// statistics (the Skip ops' outputs 1 and 2, SimplifiedLayerNormalization's output 1) are float32 with
// the normalized dims 1.
Status infer_skip_norm(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const bool skip = c.num_inputs() > 1 && c.node.op_type != "SimplifiedLayerNormalization";
  ir::SymShape s = skip && c.has(1) ? broadcast_sym(c.shape(0), c.shape(1)) : c.shape(0);
  ir::SymShape stat;
  if (s.known && s.rank() >= 1) {
    stat = s;
    int64_t axis = skip ? -1 : c.node.attr_int("axis", -1);
    if (!normalize_axis(axis, s.rank())) return c.error("axis " + std::to_string(axis) + " is out of range");
    for (int i = static_cast<int>(axis); i < s.rank(); ++i) stat.dims[i] = ir::Dim(1);
  }
  for (size_t i = 0; i < c.out.size(); ++i) {
    const bool statistic = skip ? (i == 1 || i == 2) : i == 1;
    c.out[i] = statistic ? ir::Type::tensor(DataType::kFloat32, stat) : ir::Type::tensor(c.dtype(0), s);
  }
  return Status::Ok();
}

}  // namespace

std::vector<int> fused_matmul_perm(int rank, bool trans, bool trans_batch) {
  std::vector<int> p;
  if (trans_batch) {
    for (int i = 1; i + 1 < rank; ++i) p.push_back(i);
    p.insert(p.end(), trans ? std::initializer_list<int>{rank - 1, 0} : std::initializer_list<int>{0, rank - 1});
  } else {
    for (int i = 0; i + 2 < rank; ++i) p.push_back(i);
    p.insert(p.end(), trans ? std::initializer_list<int>{rank - 1, rank - 2} : std::initializer_list<int>{rank - 2, rank - 1});
  }
  return p;
}

namespace {

Status infer_fused_matmul(InferContext& c) {
  if (!c.has(0) || !c.has(1)) return Status::Ok();
  ir::Type t[2] = {c.type(0), c.type(1)};
  for (int i = 0; i < 2; ++i) {
    const bool trans = c.node.attr_int(i ? "transB" : "transA", 0) != 0;
    const bool batch = c.node.attr_int(i ? "transBatchB" : "transBatchA", 0) != 0;
    if (!trans && !batch) continue;
    if (!t[i].shape.known) return Status::Ok();
    const int r = t[i].shape.rank();
    if (r < 2) return c.error(std::string(i ? "B" : "A") + " must have rank >= 2 to be transposed");
    std::vector<ir::Dim> d;
    for (int k : fused_matmul_perm(r, trans, batch)) d.push_back(t[i].shape.dims[k]);
    t[i].shape = ir::SymShape(d);
  }
  const OpDef* mm = find_op("", "MatMul");
  InferContext sub{c.node, {&t[0], &t[1]}, {nullptr, nullptr}, {}};
  sub.out.resize(1);
  sub.out[0].kind = ir::Type::Kind::kUnknown;
  KILN_RETURN_IF_ERROR(mm->infer(sub));
  c.out[0] = sub.out[0];
  return Status::Ok();
}

// Attention: [B, S, hidden of V] (V's part of qkv_hidden_sizes, else a third of the weights' columns).
Status infer_attention(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = ir::Type::tensor(c.dtype(0));
  const ir::SymShape& x = c.shape(0);
  if (!x.known || x.rank() != 3 || !c.has(1) || !c.shape(1).known || c.shape(1).rank() != 2) return Status::Ok();
  const std::vector<int64_t> sizes = c.node.attr_ints("qkv_hidden_sizes");
  const ir::Dim& cols = c.shape(1).dims[1];
  ir::Dim v = sizes.size() == 3 ? ir::Dim(sizes[2]) : cols.is_static() ? ir::Dim(cols.value / 3) : ir::Dim();
  c.out[0].shape = ir::SymShape({x.dims[0], x.dims[1], v});
  if (c.out.size() > 1) c.out[1] = ir::Type::tensor(c.dtype(0));
  return Status::Ok();
}

// MultiHeadAttention: [B, S, N·Hv] (query's batch and sequence; Hv from a 3-D value, a 4-D [B, N, L, Hv]
// one, or the packed forms' last dim); the presents [B, N, past + L, H] have the query's dtype.
Status infer_multi_head_attention(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  for (auto& o : c.out) o = ir::Type::tensor(c.dtype(0));
  const ir::SymShape& q = c.shape(0);
  if (!q.known || (q.rank() != 3 && q.rank() != 5)) return Status::Ok();
  ir::Dim hidden;
  if (q.rank() == 5) {
    hidden = dim_mul(q.dims[2], q.dims[4]);
  } else if (c.has(2) && c.shape(2).known && c.shape(2).rank() == 3) {
    hidden = c.shape(2).dims[2];
  } else if (c.has(2) && c.shape(2).known && c.shape(2).rank() == 4) {
    hidden = dim_mul(c.shape(2).dims[1], c.shape(2).dims[3]);
  } else if (c.has(1) && !c.has(2) && c.shape(1).known && c.shape(1).rank() == 5) {
    hidden = dim_mul(c.shape(1).dims[2], c.shape(1).dims[4]);
  } else {
    return Status::Ok();
  }
  c.out[0].shape = ir::SymShape({q.dims[0], q.dims[1], hidden});
  return Status::Ok();
}

// GroupQueryAttention: [B, S, N·H] (H: the query's hidden size over N, or over N + 2·Nkv when packed);
// the presents [B, Nkv, max(total, past), H].
Status infer_group_query_attention(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  for (auto& o : c.out) o = ir::Type::tensor(c.dtype(0));
  const ir::SymShape& q = c.shape(0);
  const int64_t n = c.node.attr_int("num_heads", 0), nkv = c.node.attr_int("kv_num_heads", 0);
  if (!q.known || q.rank() != 3 || !q.dims[2].is_static() || n < 1 || nkv < 1) return Status::Ok();
  const int64_t per = c.has(1) ? n : n + 2 * nkv;
  if (q.dims[2].value % per != 0) return c.error("query's hidden size is not a multiple of the heads");
  const int64_t h = q.dims[2].value / per;
  c.out[0].shape = ir::SymShape({q.dims[0], q.dims[1], ir::Dim(n * h)});
  for (size_t i = 1; i < c.out.size() && i < 3; ++i)
    c.out[i].shape = ir::SymShape({q.dims[0], ir::Dim(nkv), ir::Dim(), ir::Dim(h)});
  return Status::Ok();
}

// EmbedLayerNormalization: [B, S, hidden] in the word embedding's dtype (outputs 0 and 2), mask_index
// int32 [B].
Status infer_embed_layer_norm(InferContext& c) {
  if (!c.has(0) || !c.has(2)) return Status::Ok();
  const ir::SymShape& ids = c.shape(0);
  const ir::SymShape& w = c.shape(2);
  ir::Type y = ir::Type::tensor(c.dtype(2));
  if (ids.known && ids.rank() == 2 && w.known && w.rank() == 2) y.shape = ir::SymShape({ids.dims[0], ids.dims[1], w.dims[1]});
  c.out[0] = y;
  if (c.out.size() > 1) c.out[1] = ir::Type::tensor(DataType::kInt32, ids.known && ids.rank() == 2 ? ir::SymShape({ids.dims[0]}) : ir::SymShape());
  if (c.out.size() > 2) c.out[2] = y;
  return Status::Ok();
}

std::string rule_non_negative(const ir::Attribute& a) {
  return a.f >= 0 ? "" : "must be >= 0, got " + std::to_string(a.f);
}

}  // namespace

void add_contrib_ops(std::vector<OpDef>& t) {
  const std::string ms = "com.microsoft";
  auto add = [&t](const std::string& domain, const char* name, InferFn infer, int min_in, int max_in, int min_out,
                  int max_out, std::vector<AttrSpec> attrs = {}) {
    OpDef d{name, domain, 1, infer, "lowered", std::move(attrs)};
    d.min_inputs = min_in, d.max_inputs = max_in, d.min_outputs = min_out, d.max_outputs = max_out;
    t.push_back(std::move(d));
  };
  const AttrSpec eps{"epsilon", K::kFloat, false, rule_non_negative};
  add(ms, "Gelu", infer_elementwise, 1, 1, 1, 1);
  add(ms, "FastGelu", infer_elementwise, 1, 2, 1, 1);
  add(ms, "BiasGelu", infer_elementwise, 2, 2, 1, 1);
  add(ms, "QuickGelu", infer_elementwise, 1, 1, 1, 1, {{"alpha", K::kFloat, false, nullptr}});
  add(ms, "BiasAdd", infer_elementwise, 3, 3, 1, 1);
  add(ms, "BiasSoftmax", infer_elementwise, 2, 2, 1, 1,
      {{"axis", K::kInt, false, nullptr}, {"is_inner_broadcast", K::kInt, true, rule_bool}});
  add(ms, "SkipLayerNormalization", infer_skip_norm, 3, 5, 1, 4, {eps});
  add(ms, "SkipSimplifiedLayerNormalization", infer_skip_norm, 3, 4, 1, 4, {eps});
  add("", "SimplifiedLayerNormalization", infer_skip_norm, 2, 2, 1, 2,
      {{"axis", K::kInt, false, nullptr}, eps, {"stash_type", K::kInt, false, nullptr}});
  add(ms, "Attention", infer_attention, 2, 7, 1, 2,
      {{"num_heads", K::kInt, true, rule_positive}, {"unidirectional", K::kInt, false, rule_bool},
       {"scale", K::kFloat, false, nullptr}, {"mask_filter_value", K::kFloat, false, nullptr},
       {"qkv_hidden_sizes", K::kInts, false, rule_positive_ints}, {"do_rotary", K::kInt, false, nullptr},
       {"rotary_embedding_dim", K::kInt, false, nullptr}, {"past_present_share_buffer", K::kInt, false, nullptr}});
  add(ms, "MultiHeadAttention", infer_multi_head_attention, 1, 10, 1, 4,
      {{"num_heads", K::kInt, true, rule_positive}, {"unidirectional", K::kInt, false, rule_bool},
       {"scale", K::kFloat, false, nullptr}, {"mask_filter_value", K::kFloat, false, nullptr}});
  // Inputs other than query may be omitted up to seqlens_k and total_sequence_length: the lowering checks those.
  add(ms, "GroupQueryAttention", infer_group_query_attention, 1, 11, 1, 3,
      {{"num_heads", K::kInt, true, rule_positive}, {"kv_num_heads", K::kInt, true, rule_positive},
       {"scale", K::kFloat, false, nullptr}, {"softcap", K::kFloat, false, nullptr},
       {"local_window_size", K::kInt, false, nullptr}, {"do_rotary", K::kInt, false, rule_bool},
       {"rotary_interleaved", K::kInt, false, rule_bool}, {"smooth_softmax", K::kInt, false, nullptr}});
  // Inputs 1 and 4 (the segments) may be omitted between required ones: the lowering checks the others.
  add(ms, "EmbedLayerNormalization", infer_embed_layer_norm, 1, 9, 1, 3,
      {eps, {"mask_index_type", K::kInt, false, nullptr}});
  add(ms, "RotaryEmbedding", infer_same_as_input0, 4, 4, 1, 1,
      {{"interleaved", K::kInt, false, rule_bool}, {"num_heads", K::kInt, false, nullptr},
       {"rotary_embedding_dim", K::kInt, false, nullptr}, {"scale", K::kFloat, false, nullptr},
       {"is_packed_batching", K::kInt, false, rule_bool}});
  add(ms, "FusedMatMul", infer_fused_matmul, 2, 2, 1, 1,
      {{"alpha", K::kFloat, false, nullptr}, {"transA", K::kInt, false, rule_bool}, {"transB", K::kInt, false, rule_bool},
       {"transBatchA", K::kInt, false, rule_bool}, {"transBatchB", K::kInt, false, rule_bool}});
  add_contrib_quant_ops(t);
}

}  // namespace kiln::ops
