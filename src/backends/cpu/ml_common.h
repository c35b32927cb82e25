// backends/cpu/ml_common.h — what the ai.onnx.ml kernels of ml.cpp, ml_linear.cpp and ml_svm.cpp
// share: X's rows, the post transforms and the classifiers' (label, scores) rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "ops/params_ml.h"

namespace kiln::cpu {

// post_transform on one row of n scores, in place. SOFTMAX_ZERO leaves zero scores at zero; PROBIT is
// the inverse normal CDF.
void post_transform(ops::TreeEnsembleParams::Post post, double* v, int64_t n);

// The legacy classifiers' binary form: the positive class's score s becomes the row [1 - s, s] or
// [-s, s], before the post transform.
void binary_scores(double s, bool one_minus, double* two);

// Row r of a classifier's outputs: Y[r] the label of the first highest of the n scores (int64 labels,
// or strings where labels_str is not empty), Z[r, :] the scores as floats.
void write_class_row(const std::vector<int64_t>& labels_int, const std::vector<std::string>& labels_str,
                     const double* scores, int64_t n, int64_t r, Tensor& y, Tensor& z);

// A regressor's output: Y float [rows, n], each row of `scores` post-transformed (in place) first.
Tensor& write_regression(KernelContext& ctx, ops::TreeEnsembleParams::Post post, std::vector<double>& scores,
                         int64_t rows, int64_t n);

// X (input 0) as doubles with its row count and row length: [N, F], or [F] as one row.
Status rows_of(KernelContext& ctx, std::vector<double>& xs, int64_t* rows, int64_t* feats);

// The dtype check of the ml ops whose X is float, double, int64 or int32 (a KernelDef's supports).
std::string ml_input(const ir::Node& n);

// LinearClassifier/Regressor, Scaler, Normalizer, Imputer, OneHotEncoder, FeatureVectorizer,
// CategoryMapper (ml_linear.cpp); register_ml calls it.
void register_ml_linear(KernelRegistry& r);

// SVMClassifier, SVMRegressor (ml_svm.cpp); register_ml calls it.
void register_ml_svm(KernelRegistry& r);

}  // namespace kiln::cpu
