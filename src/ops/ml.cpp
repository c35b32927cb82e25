// ops/ml.cpp — types and shapes of the ai.onnx.ml ops kiln runs: ArrayFeatureExtractor, Binarizer,
// LabelEncoder, TreeEnsemble.
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {
namespace {

using ir::Dim;
using ir::SymShape;
using ir::Type;

bool known_tensor(const InferContext& c, int i) { return c.has(i) && c.type(i).is_tensor() && c.shape(i).known; }

// [*X.shape[:-1], numel(indices)]; a 1-D X gives [1, numel(indices)].
Status infer_array_feature_extractor(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(c.dtype(0));
  if (!known_tensor(c, 0) || c.shape(0).rank() < 1) return Status::Ok();
  std::vector<Dim> dims(c.shape(0).dims.begin(), c.shape(0).dims.end() - 1);
  if (dims.empty()) dims.push_back(Dim(1));
  Dim k;
  if (known_tensor(c, 1)) {
    int64_t n = 1;
    bool all = true;
    for (const Dim& d : c.shape(1).dims) {
      if (!d.is_static() || __builtin_mul_overflow(n, d.value, &n)) all = false;
    }
    if (all) k = Dim(n);
  }
  dims.push_back(k);
  c.out[0].shape = SymShape(std::move(dims));
  return Status::Ok();
}

Status infer_same(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = c.type(0);
  return Status::Ok();
}

Status infer_label_encoder(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(parse_label_encoder_unchecked(c.node).inferred_dtype);
  c.out[0].shape = c.shape(0);
  return Status::Ok();
}

Status infer_tree_ensemble(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(c.dtype(0));
  if (!known_tensor(c, 0) || c.shape(0).rank() != 2) return Status::Ok();
  const int64_t targets = parse_tree_ensemble_unchecked(c.node).n_targets;
  c.out[0].shape = SymShape({c.shape(0).dims[0], targets > 0 ? Dim(targets) : Dim()});
  return Status::Ok();
}

}  // namespace

void add_ml_ops(std::vector<OpDef>& t) {
  const std::string ml = "ai.onnx.ml";
  t.push_back(OpDef{"ArrayFeatureExtractor", ml, 1, infer_array_feature_extractor, "native"});
  t.push_back(OpDef{"Binarizer", ml, 1, infer_same, "native"});
  t.push_back(OpDef{"LabelEncoder", ml, 1, infer_label_encoder, "native"});
  t.push_back(OpDef{"TreeEnsemble", ml, 5, infer_tree_ensemble, "native"});
}

}  // namespace kiln::ops
