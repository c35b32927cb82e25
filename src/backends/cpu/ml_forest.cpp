// backends/cpu/ml_forest.cpp — CompiledForest: flat node arrays, a walk compiled per branch mode, and
// the trees summed in fixed chunks (over chunks of trees for few rows, over blocks of rows for many).
#include "backends/cpu/ml_forest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "backends/cpu/numeric.h"

namespace kiln::cpu {

namespace {

using Ensemble = ops::TreeEnsembleParams;
using Branch = Ensemble::Branch;

template <typename T>
struct FlatNode {
  T split;
  int32_t feature;
  int32_t child[2];  // [false, true]: a node index (leaves are sink nodes after the branches)
  uint8_t mode;      // Branch (never kMember)
  uint8_t missing_true;
};

constexpr int kGeneric = -1;  // nodes of several modes (or EQ/NEQ): the mode is read per node
constexpr int64_t kFewRows = 32;  // below this, the threads split the trees rather than the rows
constexpr int64_t kRowBlock = 16;  // rows walked through one tree before the next
// Each chunk's sums are cleared and added per row over every target, so the compiled walk is for
// ensembles of few targets (classes): beyond this the generic walk, whose cost does not grow with them.
constexpr int64_t kMaxTargets = 256;

template <typename T, int M>
inline bool take_true(const FlatNode<T>& n, T x) {
  bool t;
  if constexpr (M == static_cast<int>(Branch::kLeq)) {
    t = x <= n.split;
  } else if constexpr (M == static_cast<int>(Branch::kLt)) {
    t = x < n.split;
  } else if constexpr (M == static_cast<int>(Branch::kGte)) {
    t = x >= n.split;
  } else if constexpr (M == static_cast<int>(Branch::kGt)) {
    t = x > n.split;
  } else {
    switch (static_cast<Branch>(n.mode)) {
      case Branch::kLeq: t = x <= n.split; break;
      case Branch::kLt: t = x < n.split; break;
      case Branch::kGte: t = x >= n.split; break;
      case Branch::kGt: t = x > n.split; break;
      case Branch::kEq: t = x == n.split; break;
      case Branch::kNeq: t = x != n.split; break;
      default: t = false; break;
    }
  }
  // A NaN feature compares false (true for NEQ); missing_true sends it to the true branch.
  return t | (n.missing_true & std::isnan(x));
}

// Walks `n` (tree, row) pairs at once, each lane its own chain of dependent loads, so the core overlaps
// them; a leaf is a sink node (both children itself) at index >= inner, and the lanes step together
// until every one has reached its leaf. leaves[i] receives lane i's leaf.
template <typename T, int M, int W>
inline void walk_lanes(const FlatNode<T>* nodes, int32_t inner, const int32_t* roots, const T* const* rows, int n,
                       int32_t* leaves) {
  int32_t at[W];
  const T* row[W];
  for (int i = 0; i < W; ++i) {
    at[i] = i < n ? roots[i] : roots[0];
    row[i] = i < n ? rows[i] : rows[0];
  }
  bool done;
  do {
    done = true;
    for (int i = 0; i < W; ++i) {
      const FlatNode<T>& nd = nodes[at[i]];
      at[i] = nd.child[take_true<T, M>(nd, row[i][nd.feature]) ? 1 : 0];
      done &= at[i] >= inner;
    }
  } while (!done);
  for (int i = 0; i < n; ++i) leaves[i] = at[i] - inner;
}

}  // namespace

struct CompiledForest::Impl {
  std::vector<FlatNode<double>> dnodes;  // the branch nodes, then one sink per leaf
  std::vector<FlatNode<float>> fnodes;  // empty unless every threshold is a float
  std::vector<int32_t> roots;
  std::vector<int32_t> first;  // leaf l casts the votes [first[l], first[l + 1])
  std::vector<int32_t> target;
  std::vector<double> weight;
  std::vector<double> base;
  int32_t inner = 0;  // nodes [0, inner) branch; node inner + l is leaf l's sink
  int64_t n_targets = 0;
  int64_t max_feature = -1;
  int mode = kGeneric;
  bool average = false;

  // Adds the trees of chunk c to acc [(r1 - r0), n_targets] for rows [r0, r1) of x [rows, feats]: the
  // (tree, row) pairs walked kLanes at a time, each row's votes added in tree order.
  template <typename T, int M>
  void add_chunk(const FlatNode<T>* nodes, int64_t c, const T* x, int64_t feats, int64_t r0, int64_t r1,
                 double* acc) const {
    constexpr int kLanes = 8;
    const int64_t t0 = c * kChunk, t1 = std::min<int64_t>(t0 + kChunk, static_cast<int64_t>(roots.size()));
    const int64_t nr = r1 - r0, pairs = (t1 - t0) * nr;
    const int32_t* fi = first.data();
    const int32_t* tg = target.data();
    const double* w = weight.data();
    int32_t lane_roots[kLanes], leaves[kLanes];
    const T* lane_rows[kLanes];
    int64_t lane_row[kLanes];
    int64_t t = t0, r = r0;  // the next pair, tree-major (counted, not divided out: two 64-bit
                             // divisions per pair cost more than walking a shallow tree)
    for (int64_t p0 = 0; p0 < pairs; p0 += kLanes) {
      const int n = static_cast<int>(std::min<int64_t>(kLanes, pairs - p0));
      for (int i = 0; i < n; ++i) {
        lane_roots[i] = roots[t];
        lane_rows[i] = x + r * feats;
        lane_row[i] = r - r0;
        if (++r == r1) r = r0, ++t;
      }
      walk_lanes<T, M, kLanes>(nodes, inner, lane_roots, lane_rows, n, leaves);
      for (int i = 0; i < n; ++i) {
        double* a = acc + lane_row[i] * n_targets;
        for (int32_t v = fi[leaves[i]]; v < fi[leaves[i] + 1]; ++v) a[tg[v]] += w[v];
      }
    }
  }

  template <typename T, int M>
  void sum(const FlatNode<T>* nodes, const T* x, int64_t rows, int64_t feats, double* out) const {
    const int64_t nchunks = (static_cast<int64_t>(roots.size()) + kChunk - 1) / kChunk, nt = n_targets;
    int64_t partial_cells = 0;
    if (rows < kFewRows && nchunks > 1 && !__builtin_mul_overflow(nchunks, rows * nt, &partial_cells) &&
        static_cast<uint64_t>(partial_cells) <= max_tensor_bytes() / sizeof(double)) {
      std::vector<double> partial(static_cast<size_t>(partial_cells), 0.0);
      parallel_for(nchunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) add_chunk<T, M>(nodes, c, x, feats, 0, rows, partial.data() + c * rows * nt);
      });
      for (int64_t c = 0; c < nchunks; ++c)
        for (int64_t i = 0; i < rows * nt; ++i) out[i] += partial[c * rows * nt + i];
      return;
    }
    const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    parallel_for(blocks, 1, [&](int64_t b, int64_t e) {
      std::vector<double> local(static_cast<size_t>(std::min(rows, kRowBlock) * nt));
      for (int64_t blk = b; blk < e; ++blk) {
        const int64_t r0 = blk * kRowBlock, r1 = std::min(rows, r0 + kRowBlock), n = (r1 - r0) * nt;
        double* o = out + r0 * nt;
        for (int64_t c = 0; c < nchunks; ++c) {
          std::fill(local.begin(), local.begin() + n, 0.0);
          add_chunk<T, M>(nodes, c, x, feats, r0, r1, local.data());
          for (int64_t i = 0; i < n; ++i) o[i] += local[i];
        }
      }
    });
  }

  template <typename T>
  void sum_any_mode(const FlatNode<T>* nodes, const T* x, int64_t rows, int64_t feats, double* out) const {
    switch (mode) {
      case static_cast<int>(Branch::kLeq): return sum<T, static_cast<int>(Branch::kLeq)>(nodes, x, rows, feats, out);
      case static_cast<int>(Branch::kLt): return sum<T, static_cast<int>(Branch::kLt)>(nodes, x, rows, feats, out);
      case static_cast<int>(Branch::kGte): return sum<T, static_cast<int>(Branch::kGte)>(nodes, x, rows, feats, out);
      case static_cast<int>(Branch::kGt): return sum<T, static_cast<int>(Branch::kGt)>(nodes, x, rows, feats, out);
      default: return sum<T, kGeneric>(nodes, x, rows, feats, out);
    }
  }
};

CompiledForest::CompiledForest(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CompiledForest::~CompiledForest() = default;

std::unique_ptr<CompiledForest> CompiledForest::compile(const Ensemble& e) {
  if (e.aggregate != Ensemble::Aggregate::kSum && e.aggregate != Ensemble::Aggregate::kAverage) return nullptr;
  if (e.n_targets <= 0 || e.n_targets > kMaxTargets) return nullptr;
  constexpr size_t kMax = static_cast<size_t>(std::numeric_limits<int32_t>::max() - 1);
  const size_t leaves = e.votes.empty() ? e.leaf_weights.size() : e.votes.size() - 1;
  if (e.nodes.size() + leaves > kMax || e.leaf_weights.size() > kMax || e.votes.size() > kMax || e.roots.size() > kMax ||
      e.leaf_targets.size() != e.leaf_weights.size() || e.n_targets <= 0)
    return nullptr;
  auto f = std::make_unique<Impl>();
  f->n_targets = e.n_targets;
  f->average = e.aggregate == Ensemble::Aggregate::kAverage;
  f->base = e.base_values;
  if (!f->base.empty() && static_cast<int64_t>(f->base.size()) != e.n_targets) return nullptr;
  // Leaves and their votes.
  f->first.resize(leaves + 1);
  for (size_t l = 0; l <= leaves; ++l) {
    const int64_t v = e.votes.empty() ? static_cast<int64_t>(l) : e.votes[l];
    if (v < 0 || v > static_cast<int64_t>(e.leaf_weights.size()) || (l > 0 && v < f->first[l - 1])) return nullptr;
    f->first[l] = static_cast<int32_t>(v);
  }
  f->weight = e.leaf_weights;
  f->target.resize(e.leaf_targets.size());
  for (size_t v = 0; v < e.leaf_targets.size(); ++v) {
    if (e.leaf_targets[v] < 0 || e.leaf_targets[v] >= e.n_targets) return nullptr;
    f->target[v] = static_cast<int32_t>(e.leaf_targets[v]);
  }
  // Nodes.
  const int64_t n_nodes = static_cast<int64_t>(e.nodes.size());
  bool all_float = true;
  int mode = e.nodes.empty() ? kGeneric : static_cast<int>(e.nodes[0].mode);
  f->inner = static_cast<int32_t>(n_nodes);
  f->dnodes.resize(e.nodes.size() + leaves);
  for (size_t l = 0; l < leaves; ++l) {
    const int32_t self = static_cast<int32_t>(n_nodes + static_cast<int64_t>(l));
    f->dnodes[self] = {0.0, 0, {self, self}, static_cast<uint8_t>(Branch::kLeq), 0};
  }
  for (int64_t i = 0; i < n_nodes; ++i) {
    const Ensemble::Node& t = e.nodes[i];
    if (t.mode == Branch::kMember || t.feature < 0 || t.feature > std::numeric_limits<int32_t>::max()) return nullptr;
    FlatNode<double>& d = f->dnodes[i];
    d.split = t.split;
    d.feature = static_cast<int32_t>(t.feature);
    d.mode = static_cast<uint8_t>(t.mode);
    d.missing_true = t.missing_true ? 1 : 0;
    for (int b = 0; b < 2; ++b) {
      const int64_t c = t.child[b];
      if (c < 0 || (t.leaf[b] ? c >= static_cast<int64_t>(leaves) : c >= n_nodes)) return nullptr;
      d.child[b] = static_cast<int32_t>(t.leaf[b] ? n_nodes + c : c);
    }
    f->max_feature = std::max<int64_t>(f->max_feature, t.feature);
    if (static_cast<int>(t.mode) != mode) mode = kGeneric;
    if (!std::isnan(t.split) && static_cast<double>(static_cast<float>(t.split)) != t.split) all_float = false;
  }
  f->mode = mode == static_cast<int>(Branch::kEq) || mode == static_cast<int>(Branch::kNeq) ? kGeneric : mode;
  // Roots, and no cycle below any of them (a depth-first walk marking the nodes on its path): the walk
  // then ends at a leaf without counting its steps.
  std::vector<uint8_t> state(e.nodes.size(), 0);  // 0 unseen, 1 on the path, 2 done
  std::vector<std::pair<int32_t, int>> stack;
  for (int64_t root : e.roots) {
    if (root < 0 || root >= n_nodes) return nullptr;
    f->roots.push_back(static_cast<int32_t>(root));
    if (state[root] == 2) continue;
    stack.push_back({static_cast<int32_t>(root), 0});
    state[root] = 1;
    while (!stack.empty()) {
      auto& [at, next] = stack.back();
      if (next == 2) {
        state[at] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t c = f->dnodes[at].child[next++];
      if (c >= f->inner || state[c] == 2) continue;  // a leaf, or a node already checked
      if (state[c] == 1) return nullptr;  // a cycle: the generic walk reports it
      state[c] = 1;
      stack.push_back({c, 0});
    }
  }
  if (all_float) {
    f->fnodes.resize(f->dnodes.size());
    for (size_t i = 0; i < f->dnodes.size(); ++i) {
      const FlatNode<double>& d = f->dnodes[i];
      f->fnodes[i] = {static_cast<float>(d.split), d.feature, {d.child[0], d.child[1]}, d.mode, d.missing_true};
    }
  }
  return std::unique_ptr<CompiledForest>(new CompiledForest(std::move(f)));
}

int64_t CompiledForest::max_feature() const { return impl_->max_feature; }

bool CompiledForest::scores(const Tensor& x, int64_t rows, int64_t feats, double* out) const {
  const Impl& f = *impl_;
  const int64_t nt = f.n_targets;
  if (!f.roots.empty() && rows > 0) {
    if (x.dtype() == DataType::kFloat32 && !f.fnodes.empty()) {
      // Every threshold is a float and so is every feature: comparing them as floats is comparing them
      // exactly, as the double walk would.
      f.sum_any_mode<float>(f.fnodes.data(), x.data<float>(), rows, feats, out);
    } else if (x.dtype() == DataType::kFloat64) {
      f.sum_any_mode<double>(f.dnodes.data(), x.data<double>(), rows, feats, out);
    } else {
      std::vector<double> xs;
      if (!read_reals(x, xs)) return false;
      f.sum_any_mode<double>(f.dnodes.data(), xs.data(), rows, feats, out);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    double* acc = out + r * nt;
    if (f.average && !f.roots.empty())
      for (int64_t k = 0; k < nt; ++k) acc[k] /= static_cast<double>(f.roots.size());
    if (!f.base.empty())
      for (int64_t k = 0; k < nt; ++k) acc[k] += f.base[k];
  }
  return true;
}

}  // namespace kiln::cpu
