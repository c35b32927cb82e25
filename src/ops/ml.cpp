// ops/ml.cpp — types and shapes of the ai.onnx.ml ops kiln runs: ArrayFeatureExtractor, Binarizer,
// CategoryMapper, FeatureVectorizer, LabelEncoder, TreeEnsemble, TreeEnsembleClassifier/Regressor,
// LinearClassifier/Regressor, SVMClassifier/Regressor, Scaler, Normalizer, Imputer, OneHotEncoder.
// (ZipMap, CastMap and DictVectorizer take or give maps, which kiln's runtime values do not hold; a
// ZipMap writing a graph output is imported as its probability tensor, and a DictVectorizer or CastMap
// reading a graph input as the row it makes: src/onnx/importer.cpp.)
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

// Rows of X: [N, F] gives N, [F] one row.
Dim rows_of(const InferContext& c) {
  if (!known_tensor(c, 0)) return Dim();
  if (c.shape(0).rank() == 1) return Dim(1);
  return c.shape(0).rank() == 2 ? c.shape(0).dims[0] : Dim();
}

// Y: a label per row; Z: a float score per row and label.
Status infer_classifier(InferContext& c, bool strings, int64_t labels) {
  if (!c.has(0)) return Status::Ok();
  const Dim n = rows_of(c);
  c.out[0] = Type::tensor(strings ? DataType::kString : DataType::kInt64, SymShape({n}));
  if (c.out.size() > 1)
    c.out[1] = Type::tensor(DataType::kFloat32, SymShape({n, labels > 0 ? Dim(labels) : Dim()}));
  return Status::Ok();
}

Status infer_tree_classifier(InferContext& c) {
  const TreeEnsembleClassifierParams p = parse_tree_ensemble_classifier_unchecked(c.node);
  return infer_classifier(c, p.string_labels(), p.ensemble.n_targets);
}

Status infer_linear_classifier(InferContext& c) {
  const LinearClassifierParams p = parse_linear_classifier_unchecked(c.node);
  return infer_classifier(c, p.string_labels(),
                          static_cast<int64_t>(p.string_labels() ? p.labels_str.size() : p.labels_int.size()));
}

// Y: [N, targets] floats.
Status infer_regressor(InferContext& c, int64_t targets) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(DataType::kFloat32, SymShape({rows_of(c), targets > 0 ? Dim(targets) : Dim()}));
  return Status::Ok();
}

Status infer_tree_regressor(InferContext& c) {
  return infer_regressor(c, parse_tree_ensemble_regressor_unchecked(c.node).n_targets);
}

Status infer_linear_regressor(InferContext& c) {
  return infer_regressor(c, parse_linear_regressor_unchecked(c.node).targets);
}

// Y: a label per row; Z: float [N, SvmClassifierParams::score_count()].
Status infer_svm_classifier(InferContext& c) {
  const SvmClassifierParams p = parse_svm_classifier_unchecked(c.node);
  return infer_classifier(c, p.string_labels(), p.score_count());
}

// Y: float [N, 1].
Status infer_svm_regressor(InferContext& c) { return infer_regressor(c, 1); }

// Y: float [N, sum(inputdimensions)], N the first input's first axis (1 for a 1-D input).
Status infer_feature_vectorizer(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const int64_t total = parse_feature_vectorizer_unchecked(c.node).total;
  Dim n;
  if (known_tensor(c, 0) && c.shape(0).rank() >= 1) n = c.shape(0).rank() == 1 ? Dim(1) : c.shape(0).dims[0];
  c.out[0] = Type::tensor(DataType::kFloat32, SymShape({n, total >= 0 ? Dim(total) : Dim()}));
  return Status::Ok();
}

// X's shape; strings become int64 and the other way round.
Status infer_category_mapper(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(c.dtype(0) == DataType::kString ? DataType::kInt64 : DataType::kString);
  if (c.type(0).is_tensor()) c.out[0].shape = c.shape(0);
  return Status::Ok();
}

// X's shape, as floats (Scaler, Normalizer).
Status infer_same_float(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(DataType::kFloat32);
  if (c.type(0).is_tensor()) c.out[0].shape = c.shape(0);
  return Status::Ok();
}

// X's shape and a last axis of the categories, floats.
Status infer_one_hot_encoder(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(DataType::kFloat32);
  if (!known_tensor(c, 0)) return Status::Ok();
  std::vector<Dim> dims = c.shape(0).dims;
  const int64_t cats = parse_one_hot_encoder_unchecked(c.node).size();
  dims.push_back(cats > 0 ? Dim(cats) : Dim());
  c.out[0].shape = SymShape(std::move(dims));
  return Status::Ok();
}

}  // namespace

void add_ml_ops(std::vector<OpDef>& t) {
  const std::string ml = "ai.onnx.ml";
  t.push_back(OpDef{"ArrayFeatureExtractor", ml, 1, infer_array_feature_extractor, "native"});
  t.push_back(OpDef{"Binarizer", ml, 1, infer_same, "native"});
  t.push_back(OpDef{"CategoryMapper", ml, 1, infer_category_mapper, "native"});
  t.push_back(OpDef{"FeatureVectorizer", ml, 1, infer_feature_vectorizer, "native"});
  t.push_back(OpDef{"LabelEncoder", ml, 1, infer_label_encoder, "native"});
  t.push_back(OpDef{"TreeEnsemble", ml, 5, infer_tree_ensemble, "native"});
  t.push_back(OpDef{"TreeEnsembleClassifier", ml, 1, infer_tree_classifier, "native"});
  t.push_back(OpDef{"TreeEnsembleRegressor", ml, 1, infer_tree_regressor, "native"});
  t.push_back(OpDef{"LinearClassifier", ml, 1, infer_linear_classifier, "native"});
  t.push_back(OpDef{"LinearRegressor", ml, 1, infer_linear_regressor, "native"});
  t.push_back(OpDef{"SVMClassifier", ml, 1, infer_svm_classifier, "native"});
  t.push_back(OpDef{"SVMRegressor", ml, 1, infer_svm_regressor, "native"});
  t.push_back(OpDef{"Scaler", ml, 1, infer_same_float, "native"});
  t.push_back(OpDef{"Normalizer", ml, 1, infer_same_float, "native"});
  t.push_back(OpDef{"Imputer", ml, 1, infer_same, "native"});
  t.push_back(OpDef{"OneHotEncoder", ml, 1, infer_one_hot_encoder, "native"});
}

}  // namespace kiln::ops
