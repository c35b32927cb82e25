// backends/cpu/ml_forest.h — a tree ensemble compiled for scoring (TreeEnsemble 5 and the legacy
// TreeEnsembleClassifier/Regressor): the checked node list of ops::TreeEnsembleParams laid out flat.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "ops/params_ml.h"

namespace kiln::cpu {

// The summed (or averaged) scores of an ensemble whose aggregate is SUM or AVERAGE, whose nodes have
// no membership sets and whose trees have no cycle: what scikit-learn, LightGBM and XGBoost converters
// write. A node is 20 bytes (float thresholds, when X is float32 and every threshold is a float) or 24
// (double); each leaf is a sink node after the branch nodes, so a walk is branch-free: eight (tree, row)
// pairs are walked at once, their chains of dependent loads overlapping. Where every node has the same
// mode the walk is compiled for it. The trees are summed in fixed chunks of kChunk, each chunk's sum
// added to the row's in chunk order, so the result is the same for every batch size and thread count:
// few rows are split over the threads by chunk of trees, many rows by block of rows.
class CompiledForest {
 public:
  static constexpr int64_t kChunk = 32;

  // nullptr where the ensemble has another aggregate, more than 256 targets, a membership node, a
  // cycle or more than 2^31 nodes or votes: the caller keeps its generic walk.
  static std::unique_ptr<CompiledForest> compile(const ops::TreeEnsembleParams& e);

  // The largest feature index a node reads (-1 for none): X needs more columns than this.
  int64_t max_feature() const;

  // out[rows * n_targets] = the scores of X ([rows, feats] of a numeric dtype; out zeroed by the
  // caller), base values added, before the post transform. The caller (backends/cpu/ml.cpp,
  // ensemble_scores) has checked X's rank, dtype and columns and the size of out. False only where
  // X's dtype cannot be read as reals.
  bool scores(const Tensor& x, int64_t rows, int64_t feats, double* out) const;

  struct Impl;
  ~CompiledForest();

 private:
  explicit CompiledForest(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::cpu
