// ops/params_ml.h — the attributes of the ai.onnx.ml ops (ops/ml.cpp), the quantization, RNN/GRU/LSTM,
// loss, ROI (with DeformConv), LpNormalization and TfIdfVectorizer ops (ops/quant.cpp, rnn_infer.cpp,
// loss.cpp, roi.cpp, nn_norm_lp.cpp, tfidf.cpp) and of the control and sequence ops
// (ops/control.cpp), parsed once per node into typed structs. Shape functions
// and the CPU and CUDA kernels read these instead of the node's attributes. The optimizers' attributes
// are ops::parse_optimizer's (ops/rnn.h); subgraph bodies are read from the node.
//
// parse_<op> returns Expected where kernels reject attribute values (invalid_model naming the node).
// Shape functions have always typed nodes that kernels then reject (a TreeEnsemble with only n_targets,
// a LabelEncoder without keys), so parse_<op>_unchecked reads the fields its shape function uses (named
// beside it) the same way, without the kernels' checks; the other fields may keep their defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "ops/rnn_math.h"

namespace kiln::ops {

// ---------------------------------------------------------------- ai.onnx.ml

struct BinarizerParams {
  double threshold = 0;  // elements greater than this become 1
};
BinarizerParams parse_binarizer(const ir::Node& n);

// LabelEncoder 1/2/4: keys_* / values_* / default_* (or default_tensor), or opset 1's classes_strings
// (string <-> int64 by position, the direction chosen by the input's dtype).
struct LabelEncoderParams {
  Tensor keys;           // 1-D: string, int64/32/16, float or double
  Tensor values;         // 1-D, one per key; its dtype is the output's
  Tensor default_value;  // one element of values' dtype, for inputs no key matches
  // The output dtype shape inference gives: values_* first, else classes_strings against a known input
  // dtype at any opset; undefined when neither. (The kernels take classes_strings only before opset 2.)
  DataType inferred_dtype = DataType::kUndefined;
};
Expected<LabelEncoderParams> parse_label_encoder(const ir::Node& n);
LabelEncoderParams parse_label_encoder_unchecked(const ir::Node& n);  // inferred_dtype

// TreeEnsemble 5: the node arrays as a checked list of tree nodes (ids in range, one membership set per
// BRANCH_MEMBER node), so a walk needs no bounds checks other than its step limit.
struct TreeEnsembleParams {
  enum class Branch : uint8_t { kLeq, kLt, kGte, kGt, kEq, kNeq, kMember };  // nodes_modes 0..6
  enum class Aggregate { kAverage, kSum, kMin, kMax };                       // aggregate_function 0..3
  enum class Post { kNone, kSoftmax, kLogistic, kSoftmaxZero, kProbit };     // post_transform 0..4
  struct Node {
    Branch mode = Branch::kLeq;
    int64_t feature = 0;
    double split = 0;
    bool missing_true = false;    // a NaN feature takes the true branch
    std::vector<double> members;  // kMember: the set, sorted
    int64_t child[2] = {0, 0};    // [false, true]: a node index, or a leaf index where leaf[] says so
    bool leaf[2] = {false, false};
  };
  std::vector<Node> nodes;
  std::vector<int64_t> roots;         // tree_roots: node indices
  std::vector<double> leaf_weights;   // per leaf
  std::vector<int64_t> leaf_targets;  // per leaf, in [0, n_targets)
  // The legacy forms (below): leaf i casts the votes [votes[i], votes[i + 1]) of leaf_weights and
  // leaf_targets, any number of them. Empty (TreeEnsemble 5): leaf i casts vote i.
  std::vector<int64_t> votes;
  std::vector<double> base_values;    // empty, or one per target: added after aggregating
  // The legacy forms: a target no leaf votes for scores 0 under MIN and MAX, base value not added (as
  // onnxruntime does); TreeEnsemble 5 leaves it at the type's largest / lowest value.
  bool unvoted_zero = false;
  int64_t n_targets = 0;              // positive once checked; unchecked: as written, 0 when absent
  Aggregate aggregate = Aggregate::kSum;
  Post post_transform = Post::kNone;
};
Expected<TreeEnsembleParams> parse_tree_ensemble(const ir::Node& n);
TreeEnsembleParams parse_tree_ensemble_unchecked(const ir::Node& n);  // n_targets

// TreeEnsembleRegressor / TreeEnsembleClassifier 1 and 3 (and 5, deprecated): the (tree id, node id)
// lists, floats or the *_as_tensor doubles, rebuilt as a checked TreeEnsembleParams. Each tree's root is
// its first node in the lists; a LEAF node becomes a leaf with its votes (target_* / class_*); a tree
// that is a single leaf gets a branch node whose two children are that leaf.
Expected<TreeEnsembleParams> parse_tree_ensemble_regressor(const ir::Node& n);
TreeEnsembleParams parse_tree_ensemble_regressor_unchecked(const ir::Node& n);  // n_targets (default 1)

struct TreeEnsembleClassifierParams {
  TreeEnsembleParams ensemble;              // n_targets: the number of class labels
  std::vector<int64_t> labels_int;          // classlabels_int64s, or
  std::vector<std::string> labels_str;      // classlabels_strings: one of the two is non-empty
  // Two labels and every vote for class 0 (how converters write a binary model): that score s is the
  // second label's, and the first label's is 1 - s where the weights are all >= 0 and post_transform
  // is NONE or PROBIT, else -s (as onnxruntime does).
  bool binary = false;
  bool one_minus = false;  // binary: the first label's score is 1 - s (else -s)
  bool string_labels() const { return !labels_str.empty(); }
};
Expected<TreeEnsembleClassifierParams> parse_tree_ensemble_classifier(const ir::Node& n);
// The labels (their dtype and count) only.
TreeEnsembleClassifierParams parse_tree_ensemble_classifier_unchecked(const ir::Node& n);

// post_transform as the legacy ops write it ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT").
Expected<TreeEnsembleParams::Post> parse_post_transform(const ir::Node& n);

// LinearClassifier 1: scores = X * coefficients^T + intercepts, [N, C] for C coefficient rows.
struct LinearClassifierParams {
  std::vector<double> coefficients;  // [classes, features], row-major
  std::vector<double> intercepts;    // empty or one per class
  int64_t classes = 0;               // coefficient rows: the label count, or 1 for two labels
  std::vector<int64_t> labels_int;   // classlabels_ints, or
  std::vector<std::string> labels_str;  // classlabels_strings: one of the two is non-empty
  TreeEnsembleParams::Post post_transform = TreeEnsembleParams::Post::kNone;
  bool string_labels() const { return !labels_str.empty(); }
};
Expected<LinearClassifierParams> parse_linear_classifier(const ir::Node& n);
LinearClassifierParams parse_linear_classifier_unchecked(const ir::Node& n);  // labels

// LinearRegressor 1: Y = X * coefficients^T + intercepts, [N, targets].
struct LinearRegressorParams {
  std::vector<double> coefficients;  // [targets, features], row-major
  std::vector<double> intercepts;    // empty or one per target
  int64_t targets = 1;               // positive once checked
  TreeEnsembleParams::Post post_transform = TreeEnsembleParams::Post::kNone;
};
Expected<LinearRegressorParams> parse_linear_regressor(const ir::Node& n);
LinearRegressorParams parse_linear_regressor_unchecked(const ir::Node& n);  // targets

// Scaler 1: Y = (X - offset) * scale, each one value or one per feature (the last axis).
struct ScalerParams {
  std::vector<double> offset, scale;
};
Expected<ScalerParams> parse_scaler(const ir::Node& n);

// Normalizer 1: each row divided by its max |x|, L1 or L2 norm.
struct NormalizerParams {
  enum class Norm { kMax, kL1, kL2 };
  Norm norm = Norm::kMax;
};
Expected<NormalizerParams> parse_normalizer(const ir::Node& n);

// Imputer 1: values equal to the replaced value (NaN matches NaN) become the feature's imputed value.
struct ImputerParams {
  bool ints = false;            // imputed_value_int64s / replaced_value_int64 (else the float forms)
  std::vector<double> floats;   // one value, or one per feature
  std::vector<int64_t> int64s;
  double replaced_float = 0;
  int64_t replaced_int = 0;
};
Expected<ImputerParams> parse_imputer(const ir::Node& n);

// OneHotEncoder 1: Y = X's shape plus a last axis of the categories, 1 where X equals the category.
struct OneHotEncoderParams {
  std::vector<int64_t> cats_int;        // cats_int64s, or
  std::vector<std::string> cats_str;    // cats_strings: one of the two is non-empty once checked
  bool zeros = true;                    // an unknown value gives a row of zeros (else an error)
  int64_t size() const { return static_cast<int64_t>(cats_str.empty() ? cats_int.size() : cats_str.size()); }
};
Expected<OneHotEncoderParams> parse_one_hot_encoder(const ir::Node& n);
OneHotEncoderParams parse_one_hot_encoder_unchecked(const ir::Node& n);  // the categories

// SVMRegressor / SVMClassifier 1: the kernel K(x, v) of kernel_type and kernel_params [gamma, coef0,
// degree]: LINEAR x·v, POLY (gamma x·v + coef0)^degree, RBF exp(-gamma |x - v|^2), SIGMOID
// tanh(gamma x·v + coef0).
struct SvmKernel {
  enum class Type { kLinear, kPoly, kRbf, kSigmoid };
  Type type = Type::kLinear;
  double gamma = 0, coef0 = 0, degree = 0;  // zeros where kernel_params is absent
};

// SVMRegressor 1: Y [N, 1] = sum_v coefficients[v] K(x, support_vectors[v]) + rho[0], or with no
// support vectors (n_supports = 0) the linear x·coefficients + rho[0], whatever the kernel (as
// onnxruntime does). one_class: Y is 1 where that sum is > 0, else -1.
struct SvmRegressorParams {
  SvmKernel kernel;
  std::vector<double> support_vectors;  // [n_supports, features] row-major; empty: linear
  std::vector<double> coefficients;     // one per support vector, or (linear) one per feature
  int64_t n_supports = 0;
  int64_t features = 0;                 // X's last axis, once checked
  double rho = 0;
  bool one_class = false;
  // Checked and kept, but not applied: onnxruntime leaves the regressor's output untransformed.
  TreeEnsembleParams::Post post_transform = TreeEnsembleParams::Post::kNone;
};
Expected<SvmRegressorParams> parse_svm_regressor(const ir::Node& n);

// SVMClassifier 1 over C class labels. With vectors_per_class (SVC): libsvm's one-vs-one layout — the
// support vectors grouped by class, coefficients [C - 1, vectors], one rho (and prob_a / prob_b) per
// class pair (i, j), i < j in row-major order; each pair's decision value votes for i where > 0, else
// for j, and the label is the first class with the most votes. Without (linear): coefficients
// [C, features], each class's score x·w + rho[0] (the kernel unused, as onnxruntime does).
struct SvmClassifierParams {
  SvmKernel kernel;
  std::vector<int64_t> labels_int;      // classlabels_ints, or
  std::vector<std::string> labels_str;  // classlabels_strings: one of the two is non-empty
  std::vector<int64_t> vectors_per_class;  // empty: linear
  std::vector<int64_t> class_start;        // SVC: each class's first support vector
  std::vector<double> support_vectors;     // SVC: [vectors, features]
  std::vector<double> coefficients;
  std::vector<double> rho;                 // SVC: one per pair; linear: rho[0] is used
  std::vector<double> prob_a, prob_b;      // SVC: empty, or one per pair (Platt scaling)
  int64_t vectors = 0;                     // sum of vectors_per_class
  int64_t features = 0;                    // X's last axis, once checked
  bool all_positive = false;               // every coefficient >= 0 (the linear binary label rule)
  TreeEnsembleParams::Post post_transform = TreeEnsembleParams::Post::kNone;
  bool string_labels() const { return !labels_str.empty(); }
  int64_t classes() const { return static_cast<int64_t>(string_labels() ? labels_str.size() : labels_int.size()); }
  bool svc() const { return !vectors_per_class.empty(); }
  bool probabilities() const { return svc() && !prob_a.empty(); }
  // Z's width: C probabilities; SVC without them 2 scores for two classes, else one per pair; linear C.
  int64_t score_count() const {
    const int64_t c = classes();
    if (!svc() || probabilities()) return c;
    return c == 2 ? 2 : c * (c - 1) / 2;
  }
};
Expected<SvmClassifierParams> parse_svm_classifier(const ir::Node& n);
SvmClassifierParams parse_svm_classifier_unchecked(const ir::Node& n);  // labels, vectors_per_class, prob_a

// FeatureVectorizer 1: Y float [N, sum(inputdimensions)], input i's row (its values after the first
// axis; a 1-D input is one row) cut or zero-padded to inputdimensions[i] values, in input order.
struct FeatureVectorizerParams {
  std::vector<int64_t> dims;  // inputdimensions: one count >= 0 per input, once checked
  int64_t total = 0;          // their sum; unchecked: -1 where absent, negative or overflowing
};
Expected<FeatureVectorizerParams> parse_feature_vectorizer(const ir::Node& n);
FeatureVectorizerParams parse_feature_vectorizer_unchecked(const ir::Node& n);  // total

// CategoryMapper 1: cats_strings[i] <-> cats_int64s[i] (a repeated key maps to its last partner), the
// direction chosen by X's dtype (string: Y int64, else Y string); unmatched values take the default.
struct CategoryMapperParams {
  std::vector<int64_t> ints;
  std::vector<std::string> strings;  // as long as ints, both non-empty once checked
  int64_t default_int = -1;
  std::string default_string = "_Unused";
};
Expected<CategoryMapperParams> parse_category_mapper(const ir::Node& n);

// ------------------------------------ ops/quant.cpp, rnn_infer.cpp, loss.cpp, roi.cpp, nn_norm_lp.cpp, tfidf.cpp

// QuantizeLinear / DequantizeLinear.
struct QuantizeParams {
  int64_t axis = 1;        // as written, may be negative; unused for a per-tensor scale
  int64_t block_size = 0;  // 0: per tensor or per axis; as written (kernels reject negative values)
  bool saturate = true;    // float8 outputs: clamp to the largest finite value
  DataType output_dtype = DataType::kUndefined;  // as written (0: not given), not checked as a dtype code
  DataType precision = DataType::kUndefined;     // as written (0: not given)
};
QuantizeParams parse_quantize(const ir::Node& n);

// RNN / GRU / LSTM (opset 7+; layout from 14).
struct RnnParams {
  enum Cell : int { kRnn = 0, kGru = 1, kLstm = 2 };  // from the op type
  Cell cell = kLstm;
  int num_dir = 1;            // 2 for bidirectional
  bool reverse_only = false;  // direction "reverse"
  int64_t hidden_size = 0;    // 0: not given (taken from R's shape)
  bool has_hidden_size = false;
  int64_t layout = 0;  // 1: X is [batch, seq, input], the states [batch, dirs, hidden]
  bool linear_before_reset = false;  // GRU
  bool input_forget = false;         // LSTM: f = 1 - i
  bool has_clip = false;
  double clip = 0;                       // gate inputs are clamped to [-clip, clip] when has_clip
  std::vector<rnn::Activation> acts;     // ops::parse_rnn_activations: per direction, forward first
};
// Rejects an unknown direction and activation lists of the wrong length (unsupported: unknown names).
Expected<RnnParams> parse_rnn(const ir::Node& n);
RnnParams parse_rnn_unchecked(const ir::Node& n);  // num_dir, has_hidden_size / hidden_size, layout

// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss.
struct LossParams {
  enum class Reduction { kNone, kSum, kMean };
  Reduction reduction = Reduction::kMean;  // unchecked: kNone only for "none" (anything else reads as kMean)
  bool has_ignore_index = false;
  int64_t ignore_index = 0;  // labels equal to it count as zero with zero weight, when has_ignore_index
};
Expected<LossParams> parse_loss(const ir::Node& n);
LossParams parse_loss_unchecked(const ir::Node& n);  // reduction

struct RoiAlignParams {
  bool max_mode = false;    // mode "max" (else "avg")
  bool half_pixel = true;   // coordinate_transformation_mode "half_pixel"; opset < 16 defaults to "output_half_pixel"
  int64_t output_height = 1, output_width = 1;  // positive once checked
  int64_t sampling_ratio = 0;  // 0: adaptive, ceil(roi extent / bins); never negative once checked
  double spatial_scale = 1;   // finite once checked
};
Expected<RoiAlignParams> parse_roi_align(const ir::Node& n);
RoiAlignParams parse_roi_align_unchecked(const ir::Node& n);  // output_height, output_width

struct MaxRoiPoolParams {
  std::vector<int64_t> pooled_shape;  // [height, width]; two positive values once checked
  double spatial_scale = 1;
};
Expected<MaxRoiPoolParams> parse_max_roi_pool(const ir::Node& n);
MaxRoiPoolParams parse_max_roi_pool_unchecked(const ir::Node& n);  // pooled_shape as written

// DeformConv (2-D): the window attributes as written (empty: the defaults, kernel from W's shape).
struct DeformConvParams {
  std::vector<int64_t> dilations, pads, strides, kernel_shape;
  int64_t group = 1, offset_group = 1;
};
DeformConvParams parse_deform_conv(const ir::Node& n);

struct LpNormalizationParams {
  int64_t axis = -1;  // as written, may be negative
  int64_t p = 2;      // as written; the kernels support 1 and 2
};
LpNormalizationParams parse_lp_normalization(const ir::Node& n);

// TfIdfVectorizer 9.
struct TfIdfParams {
  enum class Mode { kTF, kIDF, kTFIDF };
  struct NGram {
    int64_t begin = 0, size = 1;  // pool[begin, begin + size)
    int64_t column = 0;           // the output column it counts into
  };
  int64_t min_gram_length = 1, max_gram_length = 1, max_skip_count = 0;
  Mode mode = Mode::kTF;
  bool strings = false;  // the pool is pool_strings (else pool_int64s)
  std::vector<int64_t> pool_int64s;
  std::vector<std::string> pool_strings;
  std::vector<NGram> ngrams;   // the pool's n-grams of length min..max_gram_length, in pool order
  std::vector<float> weights;  // per output column; empty: 1
  int64_t out_size = 0;        // output columns: max(ngram_indexes) + 1
};
Expected<TfIdfParams> parse_tfidf(const ir::Node& n);
TfIdfParams parse_tfidf_unchecked(const ir::Node& n);  // out_size

// ---------------------------------------------------------------- ops/control.cpp

// Scan 8/9+ (the body is the node's graph attribute).
struct ScanParams {
  bool opset8 = false;  // inputs start with sequence_lens; axis 0 is the batch and axis 1 the sequence
  int num_scan_inputs = 0;  // 0 when absent (unchecked); within the node's input count once checked
  std::vector<int64_t> input_axes, input_directions;    // opset 8: input_directions only ("directions")
  std::vector<int64_t> output_axes, output_directions;  // empty at opset 8
};
Expected<ScanParams> parse_scan(const ir::Node& n);
ScanParams parse_scan_unchecked(const ir::Node& n);  // opset8, num_scan_inputs, output_axes

struct SequenceEmptyParams {
  DataType dtype = DataType::kFloat32;  // a tensor element type once checked
};
Expected<SequenceEmptyParams> parse_sequence_empty(const ir::Node& n);
SequenceEmptyParams parse_sequence_empty_unchecked(const ir::Node& n);  // dtype as written

struct SplitToSequenceParams {
  int64_t axis = 0;  // as written, may be negative
  bool keepdims = true;  // without a split input: keep the split axis (of length 1)
};
SplitToSequenceParams parse_split_to_sequence(const ir::Node& n);

struct ConcatFromSequenceParams {
  int64_t axis = 0;  // as written, may be negative; required (unchecked: 0 when absent)
  bool new_axis = false;  // stack along a new axis instead of concatenating
};
Expected<ConcatFromSequenceParams> parse_concat_from_sequence(const ir::Node& n);
ConcatFromSequenceParams parse_concat_from_sequence_unchecked(const ir::Node& n);  // axis, new_axis

// Optional 15: the element type declared by the `type` attribute (used without an input).
struct OptionalParams {
  bool has_type = false;
  ir::Type type;
};
OptionalParams parse_optional(const ir::Node& n);

}  // namespace kiln::ops
