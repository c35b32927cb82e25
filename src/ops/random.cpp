// ops/random.cpp — types and shapes of the random op family: RandomNormal, RandomUniform (+Like),
// Bernoulli and Multinomial.
#include "ops/op_table.h"
#include "ops/params_misc.h"

namespace kiln::ops {
namespace {

ir::SymShape unknown_dims(int rank) { return ir::SymShape(std::vector<ir::Dim>(rank)); }

Status infer_random(InferContext& ctx) {
  const bool like = ctx.node.op_type.find("Like") != std::string::npos;
  const RandomParams p = parse_random(ctx.node);
  if (like) {
    if (!ctx.has(0)) return Status::Ok();
    ctx.out[0] = ir::Type::tensor(p.has_dtype ? p.dtype : ctx.dtype(0), ctx.shape(0));
  } else {
    ctx.out[0] = ir::Type::tensor(p.dtype, ir::SymShape::of(p.shape));
  }
  return Status::Ok();
}

Status infer_bernoulli(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  const BernoulliParams p = parse_bernoulli(ctx.node);
  ctx.out[0] = ir::Type::tensor(p.has_dtype ? p.dtype : ctx.dtype(0), ctx.shape(0));
  return Status::Ok();
}

Status infer_multinomial(InferContext& ctx) {
  const MultinomialParams p = parse_multinomial(ctx.node);
  ir::SymShape s = unknown_dims(2);
  if (ctx.has(0) && ctx.shape(0).known && ctx.shape(0).rank() == 2) s.dims[0] = ctx.shape(0).dims[0];
  s.dims[1] = ir::Dim(p.sample_size);
  ctx.out[0] = ir::Type::tensor(p.dtype, s);
  return Status::Ok();
}

}  // namespace

void add_random_ops(std::vector<OpDef>& t) {
  t.push_back({"RandomNormal", "", 1, infer_random});
  t.push_back({"RandomUniform", "", 1, infer_random});
  t.push_back({"RandomNormalLike", "", 1, infer_random});
  t.push_back({"RandomUniformLike", "", 1, infer_random});
  t.push_back({"Bernoulli", "", 15, infer_bernoulli});
  t.push_back({"Multinomial", "", 7, infer_multinomial});
}

}  // namespace kiln::ops
