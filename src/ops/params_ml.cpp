// ops/params_ml.cpp — parse_<op> for the structs of ops/params_ml.h. One reader per op serves both
// parse_<op> and parse_<op>_unchecked, so they cannot drift apart: it sets the fields the shape function
// uses first, stops there when `all` is false (shape inference runs after every pass that fires, and a
// tree ensemble's node list is large), else reads the rest and returns the first rejection.
#include "ops/params_ml.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "ops/rnn.h"
#include "ops/shape_infer_util.h"

namespace kiln::ops {
namespace {

template <typename P>
Expected<P> checked(const ir::Node& n, Status (*read)(const ir::Node&, P&, bool)) {
  P p;
  KILN_RETURN_IF_ERROR(read(n, p, true));
  return p;
}

template <typename P>
P unchecked(const ir::Node& n, Status (*read)(const ir::Node&, P&, bool)) {
  P p;
  (void)read(n, p, false);  // reads no further than the shape function's fields: nothing to reject
  return p;
}

// ---------------------------------------------------------------- LabelEncoder

Tensor strings_tensor(const std::vector<std::string>& v) {
  Tensor t = Tensor::empty(DataType::kString, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}

Tensor ints_tensor(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty(DataType::kInt64, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

Tensor floats_tensor(const std::vector<float>& v) {
  Tensor t = Tensor::empty(DataType::kFloat32, {static_cast<int64_t>(v.size())});
  if (!v.empty()) std::memcpy(t.raw(), v.data(), v.size() * sizeof(float));
  return t;
}

// A one-element tensor of `dt` holding the spec's default: "_Unused", -1 or -0.0.
Tensor spec_default(DataType dt) {
  Tensor t = Tensor::empty(dt, {1});
  switch (dt) {
    case DataType::kString: t.data<std::string>()[0] = "_Unused"; break;
    case DataType::kInt64: t.data<int64_t>()[0] = -1; break;
    case DataType::kInt32: t.data<int32_t>()[0] = -1; break;
    case DataType::kInt16: t.data<int16_t>()[0] = -1; break;
    case DataType::kFloat32: t.data<float>()[0] = -0.0f; break;
    case DataType::kFloat64: t.data<double>()[0] = -0.0; break;
    default: break;
  }
  return t;
}

bool label_dtype(DataType dt) {
  switch (dt) {
    case DataType::kString: case DataType::kInt64: case DataType::kInt32: case DataType::kInt16:
    case DataType::kFloat32: case DataType::kFloat64: return true;
    default: return false;
  }
}

Status read_label_encoder(const ir::Node& n, LabelEncoderParams& p, bool all) {
  const DataType in = n.inputs.empty() || !n.inputs[0] ? DataType::kUndefined : n.inputs[0]->type.dtype;
  const ir::Attribute* classes = n.attr("classes_strings");
  if (n.attr("values_strings")) p.inferred_dtype = DataType::kString;
  else if (n.attr("values_int64s")) p.inferred_dtype = DataType::kInt64;
  else if (n.attr("values_floats")) p.inferred_dtype = DataType::kFloat32;
  else if (const ir::Attribute* a = n.attr("values_tensor")) p.inferred_dtype = a->t.dtype();
  else if (classes && in != DataType::kUndefined)
    p.inferred_dtype = in == DataType::kString ? DataType::kInt64 : DataType::kString;
  if (!all) return Status::Ok();

  if (classes && n.opset < 2) {
    std::vector<int64_t> pos(classes->strings.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int64_t>(i);
    if (in == DataType::kString) {
      p.keys = strings_tensor(classes->strings);
      p.values = ints_tensor(pos);
      p.default_value = ints_tensor({n.attr_int("default_int64", -1)});
    } else {
      p.keys = ints_tensor(pos);
      p.values = strings_tensor(classes->strings);
      p.default_value = strings_tensor({n.attr_string("default_string", "_Unused")});
    }
  } else {
    if (const ir::Attribute* a = n.attr("keys_strings")) p.keys = strings_tensor(a->strings);
    else if (const ir::Attribute* a = n.attr("keys_int64s")) p.keys = ints_tensor(a->ints);
    else if (const ir::Attribute* a = n.attr("keys_floats")) p.keys = floats_tensor(a->floats);
    else if (const ir::Attribute* a = n.attr("keys_tensor")) p.keys = a->t;
    if (const ir::Attribute* a = n.attr("values_strings")) {
      p.values = strings_tensor(a->strings);
      p.default_value = strings_tensor({n.attr_string("default_string", "_Unused")});
    } else if (const ir::Attribute* a = n.attr("values_int64s")) {
      p.values = ints_tensor(a->ints);
      p.default_value = ints_tensor({n.attr_int("default_int64", -1)});
    } else if (const ir::Attribute* a = n.attr("values_floats")) {
      p.values = floats_tensor(a->floats);
      p.default_value = floats_tensor({n.attr_float("default_float", -0.0f)});
    } else if (const ir::Attribute* a = n.attr("values_tensor")) {
      p.values = a->t;
      const ir::Attribute* d = n.attr("default_tensor");
      p.default_value = d ? d->t : spec_default(p.values.dtype());
      if (p.default_value.dtype() != p.values.dtype() || p.default_value.numel() != 1)
        return invalid_model(n.describe() + ": default_tensor must hold one value of the values' dtype");
    }
  }
  if (!p.keys.defined() || !p.values.defined())
    return invalid_model(n.describe() + ": needs one keys_* and one values_* attribute");
  if (p.keys.numel() != p.values.numel())
    return invalid_model(n.describe() + ": " + std::to_string(p.keys.numel()) + " keys but " +
                         std::to_string(p.values.numel()) + " values");
  if (!label_dtype(p.keys.dtype()) || !label_dtype(p.values.dtype()))
    return invalid_model(n.describe() + ": keys and values must be string, int64/32/16, float or double");
  return Status::Ok();
}

// ---------------------------------------------------------------- TreeEnsemble

// A real-valued attribute: floats, or a numeric tensor (how opset 5 writes them).
Expected<std::vector<double>> reals_attr(const ir::Node& n, const char* name, bool required) {
  std::vector<double> v;
  const ir::Attribute* a = n.attr(name);
  if (!a) {
    if (required) return invalid_model(n.describe() + ": needs the '" + std::string(name) + "' attribute");
    return v;
  }
  if (a->kind == ir::Attribute::Kind::kFloats) return std::vector<double>(a->floats.begin(), a->floats.end());
  if (a->kind != ir::Attribute::Kind::kTensor || !read_doubles(a->t, v))
    return invalid_model(n.describe() + ": '" + std::string(name) + "' must be a float, double or float16 tensor");
  return v;
}

Status read_tree_ensemble(const ir::Node& n, TreeEnsembleParams& e, bool all) {
  using Tree = TreeEnsembleParams;
  e.n_targets = n.attr_int("n_targets", 0);
  if (!all) return Status::Ok();
  auto bad = [&](const std::string& why) { return invalid_model(n.describe() + ": " + why); };
  KILN_ASSIGN_OR_RETURN(std::vector<double> splits, reals_attr(n, "nodes_splits", true));
  KILN_ASSIGN_OR_RETURN(e.leaf_weights, reals_attr(n, "leaf_weights", true));
  KILN_ASSIGN_OR_RETURN(std::vector<double> members, reals_attr(n, "membership_values", false));
  const ir::Attribute* modes_attr = n.attr("nodes_modes");
  if (!modes_attr || modes_attr->kind != ir::Attribute::Kind::kTensor || modes_attr->t.dtype() != DataType::kUInt8)
    return bad("nodes_modes must be a uint8 tensor");
  const Tensor& modes = modes_attr->t;
  const auto features = n.attr_ints("nodes_featureids"), true_ids = n.attr_ints("nodes_truenodeids"),
             false_ids = n.attr_ints("nodes_falsenodeids"), true_leafs = n.attr_ints("nodes_trueleafs"),
             false_leafs = n.attr_ints("nodes_falseleafs"), missing = n.attr_ints("nodes_missing_value_tracks_true");
  e.leaf_targets = n.attr_ints("leaf_targetids");
  e.roots = n.attr_ints("tree_roots");
  const size_t count = splits.size();
  if (modes.numel() != static_cast<int64_t>(count) || features.size() != count || true_ids.size() != count ||
      false_ids.size() != count || true_leafs.size() != count || false_leafs.size() != count ||
      (!missing.empty() && missing.size() != count))
    return bad("the nodes_* attributes must all have the same length");
  if (e.leaf_targets.size() != e.leaf_weights.size()) return bad("leaf_targetids and leaf_weights differ in length");
  if (e.n_targets <= 0) return bad("n_targets must be positive");
  for (int64_t t : e.leaf_targets)
    if (t < 0 || t >= e.n_targets) return bad("leaf target id " + std::to_string(t) + " is outside [0, n_targets)");
  for (int64_t r : e.roots)
    if (r < 0 || r >= static_cast<int64_t>(count)) return bad("tree root " + std::to_string(r) + " is not a node");
  const int64_t agg = n.attr_int("aggregate_function", 1), post = n.attr_int("post_transform", 0);
  if (agg < 0 || agg > 3) return bad("aggregate_function must be 0..3");
  if (post < 0 || post > 4) return bad("post_transform must be 0..4");
  e.aggregate = static_cast<Tree::Aggregate>(agg);
  e.post_transform = static_cast<Tree::Post>(post);
  size_t next_member = 0;
  for (size_t i = 0; i < count; ++i) {
    Tree::Node t;
    const uint8_t mode = modes.data<uint8_t>()[i];
    if (mode > 6) return bad("node mode " + std::to_string(mode) + " is not 0..6");
    t.mode = static_cast<Tree::Branch>(mode);
    t.feature = features[i];
    if (t.feature < 0) return bad("negative feature id");
    t.split = splits[i];
    t.missing_true = !missing.empty() && missing[i] != 0;
    t.child[0] = false_ids[i];
    t.child[1] = true_ids[i];
    t.leaf[0] = false_leafs[i] != 0;
    t.leaf[1] = true_leafs[i] != 0;
    for (int b = 0; b < 2; ++b) {
      const int64_t limit = t.leaf[b] ? static_cast<int64_t>(e.leaf_weights.size()) : static_cast<int64_t>(count);
      if (t.child[b] < 0 || t.child[b] >= limit)
        return bad("node " + std::to_string(i) + " points to " + (t.leaf[b] ? "leaf " : "node ") +
                   std::to_string(t.child[b]) + ", which does not exist");
    }
    if (t.mode == Tree::Branch::kMember) {  // the next NaN-terminated run of membership_values
      if (next_member >= members.size()) return bad("membership_values has too few sets for the BRANCH_MEMBER nodes");
      while (next_member < members.size() && !std::isnan(members[next_member]))
        t.members.push_back(members[next_member++]);
      ++next_member;  // the NaN
      std::sort(t.members.begin(), t.members.end());
    }
    e.nodes.push_back(std::move(t));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- the legacy tree ensembles

// String attribute `name` (default `dflt`) as its position in `names`, or an error listing them.
Expected<int> choice_attr(const ir::Node& n, const char* name, const char* dflt, std::initializer_list<const char*> names) {
  const std::string s = n.attr_string(name, dflt);
  std::string listed;
  int at = 0;
  for (const char* c : names) {
    if (s == c) return at;
    listed += std::string(at == 0 ? "" : at + 1 == static_cast<int>(names.size()) ? " or " : ", ") + c;
    ++at;
  }
  return invalid_model(n.describe() + ": " + name + " '" + s + "' is not " + listed);
}

Expected<TreeEnsembleParams::Post> read_post(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const int post, choice_attr(n, "post_transform", "NONE",
                                                    {"NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"}));
  return static_cast<TreeEnsembleParams::Post>(post);
}

// `name` as floats, or `name`_as_tensor as doubles (one of the two; empty when neither is given).
Expected<std::vector<double>> floats_or_tensor(const ir::Node& n, const std::string& name) {
  const ir::Attribute* t = n.attr(name + "_as_tensor");
  if (!t) return reals_attr(n, name.c_str(), false);
  if (n.attr(name)) return invalid_model(n.describe() + ": gives both '" + name + "' and '" + name + "_as_tensor'");
  return reals_attr(n, (name + "_as_tensor").c_str(), false);
}

// The nodes_* and <votes>_* lists (votes: "target" or "class") as a TreeEnsembleParams, checked.
Status read_legacy_trees(const ir::Node& n, const std::string& votes, TreeEnsembleParams& e) {
  using Tree = TreeEnsembleParams;
  auto bad = [&](const std::string& why) { return invalid_model(n.describe() + ": " + why); };
  const auto tree_ids = n.attr_ints("nodes_treeids"), node_ids = n.attr_ints("nodes_nodeids"),
             features = n.attr_ints("nodes_featureids"), true_ids = n.attr_ints("nodes_truenodeids"),
             false_ids = n.attr_ints("nodes_falsenodeids"), missing = n.attr_ints("nodes_missing_value_tracks_true");
  const ir::Attribute* modes_attr = n.attr("nodes_modes");
  const std::vector<std::string> modes = modes_attr ? modes_attr->strings : std::vector<std::string>{};
  KILN_ASSIGN_OR_RETURN(std::vector<double> splits, floats_or_tensor(n, "nodes_values"));
  KILN_ASSIGN_OR_RETURN(std::vector<double> weights, floats_or_tensor(n, votes + "_weights"));
  KILN_ASSIGN_OR_RETURN(e.base_values, floats_or_tensor(n, "base_values"));
  const auto vote_trees = n.attr_ints(votes + "_treeids"), vote_nodes = n.attr_ints(votes + "_nodeids"),
             vote_targets = n.attr_ints(votes + "_ids");
  const size_t count = tree_ids.size();
  if (count == 0) return bad("has no nodes (nodes_treeids is empty)");
  if (node_ids.size() != count || features.size() != count || modes.size() != count ||
      true_ids.size() != count || false_ids.size() != count || (!splits.empty() && splits.size() != count) ||
      (!missing.empty() && missing.size() != count))
    return bad("the nodes_* attributes must all have the same length");
  if (vote_nodes.size() != vote_trees.size() || vote_targets.size() != vote_trees.size() ||
      weights.size() != vote_trees.size())
    return bad("the " + votes + "_* attributes must all have the same length");
  if (!e.base_values.empty() && static_cast<int64_t>(e.base_values.size()) != e.n_targets &&
      e.base_values.size() != 1)
    return bad("base_values must hold one value per " + votes + " (or one value)");

  // Where each (tree, node) is, and each tree's root (its first node), trees in id order.
  std::map<std::pair<int64_t, int64_t>, size_t> where;
  std::map<int64_t, size_t> first;
  for (size_t i = 0; i < count; ++i) {
    if (!where.emplace(std::make_pair(tree_ids[i], node_ids[i]), i).second)
      return bad("node " + std::to_string(node_ids[i]) + " of tree " + std::to_string(tree_ids[i]) + " is listed twice");
    first.emplace(tree_ids[i], i);
  }
  // Branch nodes and leaves get their own numbering.
  std::vector<int64_t> index(count);
  std::vector<bool> is_leaf(count);
  int64_t branches = 0, leaves = 0;
  for (size_t i = 0; i < count; ++i) {
    is_leaf[i] = modes[i] == "LEAF";
    index[i] = is_leaf[i] ? leaves++ : branches++;
  }
  for (size_t i = 0; i < count; ++i) {
    if (is_leaf[i]) continue;
    static const char* kModes[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"};
    Tree::Node t;
    const auto m = std::find(std::begin(kModes), std::end(kModes), modes[i]);
    if (m == std::end(kModes)) return bad("node mode '" + modes[i] + "' is not LEAF or BRANCH_LEQ/LT/GTE/GT/EQ/NEQ");
    t.mode = static_cast<Tree::Branch>(m - std::begin(kModes));
    t.feature = features[i];
    if (t.feature < 0) return bad("negative feature id");
    t.split = splits.empty() ? 0.0 : splits[i];
    t.missing_true = !missing.empty() && missing[i] != 0;
    const int64_t kids[2] = {false_ids[i], true_ids[i]};
    for (int b = 0; b < 2; ++b) {
      const auto it = where.find({tree_ids[i], kids[b]});
      if (it == where.end())
        return bad("node " + std::to_string(node_ids[i]) + " of tree " + std::to_string(tree_ids[i]) +
                   " points to node " + std::to_string(kids[b]) + ", which does not exist");
      t.leaf[b] = is_leaf[it->second];
      t.child[b] = index[it->second];
    }
    e.nodes.push_back(std::move(t));
  }
  for (const auto& [tree, at] : first) {
    if (!is_leaf[at]) {
      e.roots.push_back(index[at]);
      continue;
    }
    Tree::Node t;  // a single-leaf tree: both branches of a dummy node end in the leaf
    t.leaf[0] = t.leaf[1] = true;
    t.child[0] = t.child[1] = index[at];
    e.roots.push_back(static_cast<int64_t>(e.nodes.size()));
    e.nodes.push_back(std::move(t));
  }
  // The votes, grouped by leaf in the order they are listed.
  std::vector<int64_t> leaf_of(vote_trees.size());
  e.votes.assign(static_cast<size_t>(leaves) + 1, 0);
  for (size_t v = 0; v < vote_trees.size(); ++v) {
    const auto it = where.find({vote_trees[v], vote_nodes[v]});
    if (it == where.end() || !is_leaf[it->second])
      return bad(votes + " vote " + std::to_string(v) + " names node " + std::to_string(vote_nodes[v]) + " of tree " +
                 std::to_string(vote_trees[v]) + ", which is not a leaf");
    if (vote_targets[v] < 0 || vote_targets[v] >= e.n_targets)
      return bad(votes + " id " + std::to_string(vote_targets[v]) + " is outside [0, " + std::to_string(e.n_targets) + ")");
    leaf_of[v] = index[it->second];
    ++e.votes[static_cast<size_t>(leaf_of[v]) + 1];
  }
  for (int64_t l = 0; l < leaves; ++l) e.votes[l + 1] += e.votes[l];
  e.leaf_weights.resize(weights.size());
  e.leaf_targets.resize(weights.size());
  std::vector<int64_t> fill(e.votes.begin(), e.votes.end() - 1);
  for (size_t v = 0; v < weights.size(); ++v) {
    const int64_t at = fill[leaf_of[v]]++;
    e.leaf_weights[at] = weights[v];
    e.leaf_targets[at] = vote_targets[v];
  }
  if (e.base_values.size() == 1 && e.n_targets > 1) e.base_values.assign(e.n_targets, e.base_values[0]);
  e.unvoted_zero = true;
  KILN_ASSIGN_OR_RETURN(e.post_transform, read_post(n));
  return Status::Ok();
}

Status read_tree_regressor(const ir::Node& n, TreeEnsembleParams& e, bool all) {
  e.n_targets = n.attr_int("n_targets", 1);
  if (!all) return Status::Ok();
  if (e.n_targets <= 0) return invalid_model(n.describe() + ": n_targets must be positive");
  // In the order of TreeEnsembleParams::Aggregate.
  KILN_ASSIGN_OR_RETURN(const int agg, choice_attr(n, "aggregate_function", "SUM", {"AVERAGE", "SUM", "MIN", "MAX"}));
  e.aggregate = static_cast<TreeEnsembleParams::Aggregate>(agg);
  return read_legacy_trees(n, "target", e);
}

Status read_tree_classifier(const ir::Node& n, TreeEnsembleClassifierParams& p, bool all) {
  p.labels_int = n.attr_ints("classlabels_int64s");
  if (const ir::Attribute* a = n.attr("classlabels_strings")) p.labels_str = a->strings;
  TreeEnsembleParams& e = p.ensemble;
  e.n_targets = static_cast<int64_t>(p.string_labels() ? p.labels_str.size() : p.labels_int.size());
  if (!all) return Status::Ok();
  if (p.labels_str.empty() == p.labels_int.empty())
    return invalid_model(n.describe() + ": needs one of classlabels_int64s and classlabels_strings, not empty");
  KILN_RETURN_IF_ERROR(read_legacy_trees(n, "class", e));
  const auto ids = n.attr_ints("class_ids");
  p.binary = e.n_targets == 2 && !ids.empty() && std::all_of(ids.begin(), ids.end(), [](int64_t c) { return c == 0; });
  const bool positive = std::all_of(e.leaf_weights.begin(), e.leaf_weights.end(), [](double w) { return w >= 0; });
  p.one_minus = positive && (e.post_transform == TreeEnsembleParams::Post::kNone ||
                             e.post_transform == TreeEnsembleParams::Post::kProbit);
  return Status::Ok();
}

// ---------------------------------------------------------------- LinearClassifier / LinearRegressor

Status read_linear_classifier(const ir::Node& n, LinearClassifierParams& p, bool all) {
  p.labels_int = n.attr_ints("classlabels_ints");
  if (const ir::Attribute* a = n.attr("classlabels_strings")) p.labels_str = a->strings;
  if (!all) return Status::Ok();
  auto bad = [&](const std::string& why) { return invalid_model(n.describe() + ": " + why); };
  if (p.labels_str.empty() == p.labels_int.empty())
    return bad("needs one of classlabels_ints and classlabels_strings, not empty");
  KILN_ASSIGN_OR_RETURN(p.coefficients, reals_attr(n, "coefficients", true));
  KILN_ASSIGN_OR_RETURN(p.intercepts, reals_attr(n, "intercepts", false));
  const int64_t labels = static_cast<int64_t>(p.string_labels() ? p.labels_str.size() : p.labels_int.size());
  // One row per label, or one row (the second label's score) for two labels; intercepts say which.
  p.classes = !p.intercepts.empty() ? static_cast<int64_t>(p.intercepts.size()) : labels;
  if (p.classes != labels && !(labels == 2 && p.classes == 1))
    return bad(std::to_string(p.classes) + " intercepts for " + std::to_string(labels) + " class labels");
  if (p.coefficients.empty() || p.coefficients.size() % static_cast<size_t>(p.classes) != 0)
    return bad("coefficients must hold one row of features per class");
  KILN_ASSIGN_OR_RETURN(p.post_transform, read_post(n));
  return Status::Ok();
}

Status read_linear_regressor(const ir::Node& n, LinearRegressorParams& p, bool all) {
  p.targets = n.attr_int("targets", 1);
  if (!all) return Status::Ok();
  if (p.targets <= 0) return invalid_model(n.describe() + ": targets must be positive");
  KILN_ASSIGN_OR_RETURN(p.coefficients, reals_attr(n, "coefficients", true));
  KILN_ASSIGN_OR_RETURN(p.intercepts, reals_attr(n, "intercepts", false));
  if (p.coefficients.empty() || p.coefficients.size() % static_cast<size_t>(p.targets) != 0)
    return invalid_model(n.describe() + ": coefficients must hold one row of features per target");
  if (!p.intercepts.empty() && static_cast<int64_t>(p.intercepts.size()) != p.targets)
    return invalid_model(n.describe() + ": intercepts must hold one value per target");
  KILN_ASSIGN_OR_RETURN(p.post_transform, read_post(n));
  return Status::Ok();
}

// ---------------------------------------------------------------- SVMRegressor / SVMClassifier

Status read_svm_kernel(const ir::Node& n, SvmKernel& k) {
  KILN_ASSIGN_OR_RETURN(const int type, choice_attr(n, "kernel_type", "LINEAR", {"LINEAR", "POLY", "RBF", "SIGMOID"}));
  k.type = static_cast<SvmKernel::Type>(type);
  KILN_ASSIGN_OR_RETURN(const std::vector<double> kp, reals_attr(n, "kernel_params", false));
  if (kp.empty()) return Status::Ok();
  if (kp.size() != 3)
    return invalid_model(n.describe() + ": kernel_params must be [gamma, coef0, degree], got " +
                         std::to_string(kp.size()) + " values");
  k.gamma = kp[0];
  k.coef0 = kp[1];
  k.degree = kp[2];
  return Status::Ok();
}

// `values` holds rows of `count` entries: the row length, or an error naming `what`.
Expected<int64_t> row_length(const ir::Node& n, const std::vector<double>& values, int64_t count, const std::string& what) {
  if (count <= 0 || values.empty() || values.size() % static_cast<uint64_t>(count) != 0)
    return invalid_model(n.describe() + ": " + what + " holds " + std::to_string(values.size()) +
                         " values, not a whole number of rows for " + std::to_string(count));
  return static_cast<int64_t>(values.size() / static_cast<uint64_t>(count));
}

Expected<SvmRegressorParams> read_svm_regressor(const ir::Node& n) {
  SvmRegressorParams p;
  auto bad = [&](const std::string& why) { return invalid_model(n.describe() + ": " + why); };
  KILN_RETURN_IF_ERROR(read_svm_kernel(n, p.kernel));
  KILN_ASSIGN_OR_RETURN(p.coefficients, reals_attr(n, "coefficients", true));
  KILN_ASSIGN_OR_RETURN(p.support_vectors, reals_attr(n, "support_vectors", false));
  KILN_ASSIGN_OR_RETURN(const std::vector<double> rho, reals_attr(n, "rho", true));
  KILN_ASSIGN_OR_RETURN(p.post_transform, read_post(n));
  if (rho.empty()) return bad("rho must hold a value");
  p.rho = rho[0];
  p.one_class = n.attr_int("one_class", 0) != 0;
  p.n_supports = n.attr_int("n_supports", 0);
  if (p.n_supports < 0) return bad("n_supports is " + std::to_string(p.n_supports) + ", must not be negative");
  if (p.n_supports == 0) {  // linear: one coefficient per feature
    if (!p.support_vectors.empty()) return bad("support_vectors are given but n_supports is 0");
    if (p.coefficients.empty()) return bad("coefficients must not be empty");
    p.features = static_cast<int64_t>(p.coefficients.size());
    return p;
  }
  if (static_cast<uint64_t>(p.n_supports) != p.coefficients.size())
    return bad("n_supports is " + std::to_string(p.n_supports) + " but coefficients holds " +
               std::to_string(p.coefficients.size()) + " values (one per support vector)");
  KILN_ASSIGN_OR_RETURN(p.features, row_length(n, p.support_vectors, p.n_supports, "support_vectors"));
  return p;
}

Status read_svm_classifier(const ir::Node& n, SvmClassifierParams& p, bool all) {
  p.labels_int = n.attr_ints("classlabels_ints");
  if (const ir::Attribute* a = n.attr("classlabels_strings")) p.labels_str = a->strings;
  p.vectors_per_class = n.attr_ints("vectors_per_class");
  if (const ir::Attribute* a = n.attr("prob_a"); a && !a->floats.empty()) p.prob_a = {a->floats[0]};
  if (!all) return Status::Ok();
  auto bad = [&](const std::string& why) { return invalid_model(n.describe() + ": " + why); };
  if (p.labels_str.empty() == p.labels_int.empty())
    return bad("needs one of classlabels_ints and classlabels_strings, not empty");
  KILN_RETURN_IF_ERROR(read_svm_kernel(n, p.kernel));
  KILN_ASSIGN_OR_RETURN(p.coefficients, reals_attr(n, "coefficients", true));
  KILN_ASSIGN_OR_RETURN(p.support_vectors, reals_attr(n, "support_vectors", false));
  KILN_ASSIGN_OR_RETURN(p.rho, reals_attr(n, "rho", true));
  KILN_ASSIGN_OR_RETURN(p.prob_a, reals_attr(n, "prob_a", false));
  KILN_ASSIGN_OR_RETURN(p.prob_b, reals_attr(n, "prob_b", false));
  KILN_ASSIGN_OR_RETURN(p.post_transform, read_post(n));
  p.all_positive = std::all_of(p.coefficients.begin(), p.coefficients.end(), [](double w) { return w >= 0; });
  const int64_t c = p.classes();
  if (p.rho.empty()) return bad("rho must hold a value");
  if (!p.svc()) {  // linear: one coefficient row per class; prob_a / prob_b unused (as onnxruntime does)
    if (!p.support_vectors.empty()) return bad("support_vectors are given without vectors_per_class");
    KILN_ASSIGN_OR_RETURN(p.features, row_length(n, p.coefficients, c, "coefficients"));
    p.prob_a.clear();
    p.prob_b.clear();
    return Status::Ok();
  }
  if (c < 2) return bad("an SVM with support vectors needs at least two class labels");
  if (static_cast<int64_t>(p.vectors_per_class.size()) != c)
    return bad("vectors_per_class holds " + std::to_string(p.vectors_per_class.size()) + " counts for " +
               std::to_string(c) + " class labels");
  for (int64_t v : p.vectors_per_class) {
    // Each count is at most the number of support-vector values, so the sum cannot overflow.
    if (v < 0 || static_cast<uint64_t>(v) > p.support_vectors.size())
      return bad("vectors_per_class holds " + std::to_string(v) + ", not a count of the support vectors");
    p.class_start.push_back(p.vectors);
    p.vectors += v;
  }
  KILN_ASSIGN_OR_RETURN(p.features, row_length(n, p.support_vectors, p.vectors, "support_vectors"));
  const uint64_t pairs = static_cast<uint64_t>(c) * static_cast<uint64_t>(c - 1) / 2;
  if (p.coefficients.size() != static_cast<uint64_t>(c - 1) * static_cast<uint64_t>(p.vectors))
    return bad("coefficients holds " + std::to_string(p.coefficients.size()) + " values, not [classes - 1 = " +
               std::to_string(c - 1) + ", vectors = " + std::to_string(p.vectors) + "]");
  if (p.rho.size() != pairs)
    return bad("rho holds " + std::to_string(p.rho.size()) + " values, not one per class pair (" +
               std::to_string(pairs) + ")");
  if (p.prob_a.size() != p.prob_b.size() || (!p.prob_a.empty() && p.prob_a.size() != pairs))
    return bad("prob_a and prob_b must both be empty or both hold one value per class pair (" +
               std::to_string(pairs) + ")");
  return Status::Ok();
}

// ---------------------------------------------------------------- FeatureVectorizer / CategoryMapper

Status read_feature_vectorizer(const ir::Node& n, FeatureVectorizerParams& p, bool all) {
  p.dims = n.attr_ints("inputdimensions");
  bool valid = true;
  for (int64_t d : p.dims)
    if (d < 0 || __builtin_add_overflow(p.total, d, &p.total)) valid = false;
  const bool given = n.attr("inputdimensions") != nullptr;
  if (!valid || !given) p.total = -1;
  if (!all) return Status::Ok();
  if (!given) return invalid_model(n.describe() + ": needs the 'inputdimensions' attribute");
  if (p.dims.size() != n.inputs.size())
    return invalid_model(n.describe() + ": inputdimensions holds " + std::to_string(p.dims.size()) + " counts for " +
                         std::to_string(n.inputs.size()) + " inputs");
  if (!valid) return invalid_model(n.describe() + ": inputdimensions must be counts >= 0 with a sum that fits int64");
  return Status::Ok();
}

// ---------------------------------------------------------------- OneHotEncoder

Status read_one_hot_encoder(const ir::Node& n, OneHotEncoderParams& p, bool all) {
  p.cats_int = n.attr_ints("cats_int64s");
  if (const ir::Attribute* a = n.attr("cats_strings")) p.cats_str = a->strings;
  p.zeros = n.attr_int("zeros", 1) != 0;
  if (!all) return Status::Ok();
  if (p.cats_str.empty() == p.cats_int.empty())
    return invalid_model(n.describe() + ": needs one of cats_int64s and cats_strings, not empty");
  return Status::Ok();
}

// ---------------------------------------------------------------- RNN / GRU / LSTM

Status read_rnn(const ir::Node& n, RnnParams& p, bool all) {
  const ir::Attribute* h = n.attr("hidden_size");
  p.has_hidden_size = h != nullptr;
  p.hidden_size = h ? h->i : 0;
  p.layout = n.attr_int("layout", 0);
  const std::string dir = n.attr_string("direction", "forward");
  p.num_dir = dir == "bidirectional" ? 2 : 1;
  if (!all) return Status::Ok();
  p.cell = n.op_type == "RNN" ? RnnParams::kRnn : n.op_type == "GRU" ? RnnParams::kGru : RnnParams::kLstm;
  p.reverse_only = dir == "reverse";
  p.linear_before_reset = n.attr_int("linear_before_reset", 0) != 0;
  p.input_forget = n.attr_int("input_forget", 0) != 0;
  if (n.attr("clip")) {
    p.has_clip = true;
    p.clip = n.attr_float("clip", 0);
  }
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    return invalid_model(n.describe() + ": unknown direction '" + dir + "'");
  const int per = p.cell == RnnParams::kRnn ? 1 : p.cell == RnnParams::kGru ? 2 : 3;
  KILN_ASSIGN_OR_RETURN(p.acts, parse_rnn_activations(n, per, p.num_dir));
  return Status::Ok();
}

// ---------------------------------------------------------------- losses, ROI, TfIdf

Status read_loss(const ir::Node& n, LossParams& p, bool all) {
  const std::string r = n.attr_string("reduction", "mean");
  p.reduction = r == "none" ? LossParams::Reduction::kNone
                : r == "sum" ? LossParams::Reduction::kSum
                             : LossParams::Reduction::kMean;
  if (!all) return Status::Ok();
  p.has_ignore_index = n.attr("ignore_index") != nullptr;
  p.ignore_index = n.attr_int("ignore_index", 0);
  if (r != "none" && r != "sum" && r != "mean")
    return invalid_model(n.describe() + ": reduction must be none, sum or mean, got '" + r + "'");
  return Status::Ok();
}

Status read_roi_align(const ir::Node& n, RoiAlignParams& p, bool all) {
  p.output_height = n.attr_int("output_height", 1);
  p.output_width = n.attr_int("output_width", 1);
  if (!all) return Status::Ok();
  p.sampling_ratio = n.attr_int("sampling_ratio", 0);
  p.spatial_scale = n.attr_float("spatial_scale", 1.0f);
  const std::string mode = n.attr_string("mode", "avg");
  p.max_mode = mode == "max";
  const std::string ctm =
      n.attr_string("coordinate_transformation_mode", n.opset && n.opset < 16 ? "output_half_pixel" : "half_pixel");
  p.half_pixel = ctm == "half_pixel";
  if (mode != "avg" && mode != "max") return invalid_model(n.describe() + ": mode must be avg or max");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    return invalid_model(n.describe() + ": unknown coordinate_transformation_mode '" + ctm + "'");
  if (p.output_height <= 0 || p.output_width <= 0)
    return invalid_model(n.describe() + ": output size must be positive");
  // ONNX: sampling_ratio 0 is adaptive, a positive one fixed; a negative one is invalid (onnxruntime
  // refuses it too). A spatial_scale of NaN or inf makes every roi non-finite.
  if (p.sampling_ratio < 0)
    return invalid_model(n.describe() + ": sampling_ratio must be >= 0, got " + std::to_string(p.sampling_ratio));
  if (!std::isfinite(p.spatial_scale)) return invalid_model(n.describe() + ": spatial_scale must be a finite number");
  return Status::Ok();
}

Status read_max_roi_pool(const ir::Node& n, MaxRoiPoolParams& p, bool all) {
  p.pooled_shape = n.attr_ints("pooled_shape");
  if (!all) return Status::Ok();
  p.spatial_scale = n.attr_float("spatial_scale", 1.0f);
  const std::vector<int64_t>& ps = p.pooled_shape;
  if (ps.size() != 2 || ps[0] <= 0 || ps[1] <= 0)
    return invalid_model(n.describe() + ": pooled_shape must be 2 positive ints");
  return Status::Ok();
}

Status read_tfidf(const ir::Node& n, TfIdfParams& p, bool all) {
  const std::vector<int64_t> indexes = n.attr_ints("ngram_indexes");
  // A column is in [0, INT64_MAX): a negative one would be written before the row, and + 1 overflows
  // past it. Such an index is skipped here and refused below.
  const auto is_column = [](int64_t v) { return v >= 0 && v < std::numeric_limits<int64_t>::max(); };
  for (int64_t v : indexes)
    if (is_column(v)) p.out_size = std::max(p.out_size, v + 1);
  if (!all) return Status::Ok();
  for (int64_t v : indexes)
    if (!is_column(v))
      return invalid_model(n.describe() + ": ngram_indexes holds " + std::to_string(v) + ", not an output column");
  const std::vector<int64_t> counts = n.attr_ints("ngram_counts");
  p.min_gram_length = n.attr_int("min_gram_length", 1);
  p.max_gram_length = n.attr_int("max_gram_length", 1);
  p.max_skip_count = n.attr_int("max_skip_count", 0);
  const std::string mode = n.attr_string("mode", "TF");
  if (mode == "TF") p.mode = TfIdfParams::Mode::kTF;
  else if (mode == "IDF") p.mode = TfIdfParams::Mode::kIDF;
  else if (mode == "TFIDF") p.mode = TfIdfParams::Mode::kTFIDF;
  else return invalid_model(n.describe() + ": mode must be TF, IDF or TFIDF");
  if (p.min_gram_length < 1 || p.max_gram_length < p.min_gram_length || p.max_skip_count < 0)
    return invalid_model(n.describe() + ": need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
  p.pool_int64s = n.attr_ints("pool_int64s");
  if (const ir::Attribute* ps = n.attr("pool_strings")) p.pool_strings = ps->strings;
  p.strings = !p.pool_strings.empty();
  p.weights = n.attr_floats("weights");
  const int64_t total =
      p.strings ? static_cast<int64_t>(p.pool_strings.size()) : static_cast<int64_t>(p.pool_int64s.size());
  // ngram_counts[i]: where the pool's (i+1)-grams start; ngram_indexes: each n-gram's column, in pool order.
  int64_t gram_id = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const int64_t size = static_cast<int64_t>(i) + 1, begin = counts[i];
    const int64_t end = i + 1 < counts.size() ? counts[i + 1] : total;
    if (begin < 0 || end > total || end < begin)
      return invalid_model(n.describe() + ": ngram_counts out of the pool's range");
    for (int64_t at = begin; at + size <= end; at += size, ++gram_id) {
      if (gram_id >= static_cast<int64_t>(indexes.size()))
        return invalid_model(n.describe() + ": ngram_indexes too short");
      if (size < p.min_gram_length || size > p.max_gram_length) continue;
      p.ngrams.push_back({at, size, indexes[gram_id]});
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- control and sequences

Status read_scan(const ir::Node& n, ScanParams& p, bool all) {
  p.opset8 = n.opset > 0 && n.opset < 9;
  const ir::Attribute* ns = n.attr("num_scan_inputs");
  // Saturated into int's range (out of range either way): 2^32 + 1 narrowed to int was 1, a valid count.
  p.num_scan_inputs = ns ? static_cast<int>(std::clamp<int64_t>(ns->i, -1, std::numeric_limits<int>::max())) : 0;
  if (p.opset8) {
    p.input_directions = n.attr_ints("directions");
  } else {
    p.input_axes = n.attr_ints("scan_input_axes");
    p.input_directions = n.attr_ints("scan_input_directions");
    p.output_axes = n.attr_ints("scan_output_axes");
    p.output_directions = n.attr_ints("scan_output_directions");
  }
  if (!all) return Status::Ok();
  if (!ns) return invalid_model(n.describe() + ": missing attribute num_scan_inputs");
  if (p.num_scan_inputs < 0 || static_cast<size_t>(p.num_scan_inputs) > n.inputs.size())
    return invalid_model(n.describe() + ": num_scan_inputs is out of range");
  return Status::Ok();
}

Status read_sequence_empty(const ir::Node& n, SequenceEmptyParams& p, bool all) {
  const ir::Attribute* a = n.attr("dtype");
  p.dtype = a ? static_cast<DataType>(a->i) : DataType::kFloat32;
  if (!all) return Status::Ok();
  if (!dtype_is_valid(static_cast<int32_t>(p.dtype)) || p.dtype == DataType::kUndefined)
    return invalid_model(n.describe() + ": dtype " + std::to_string(static_cast<int>(p.dtype)) +
                         " is not a tensor type");
  return Status::Ok();
}

Status read_concat_from_sequence(const ir::Node& n, ConcatFromSequenceParams& p, bool all) {
  const ir::Attribute* a = n.attr("axis");
  p.axis = a ? a->i : 0;
  p.new_axis = n.attr_int("new_axis", 0) != 0;
  if (!all) return Status::Ok();
  if (!a) return invalid_model(n.describe() + ": missing attribute 'axis'");
  return Status::Ok();
}

}  // namespace

BinarizerParams parse_binarizer(const ir::Node& n) {
  BinarizerParams p;
  p.threshold = n.attr_float("threshold", 0.0f);
  return p;
}

Expected<LabelEncoderParams> parse_label_encoder(const ir::Node& n) { return checked(n, read_label_encoder); }
LabelEncoderParams parse_label_encoder_unchecked(const ir::Node& n) { return unchecked(n, read_label_encoder); }

Expected<TreeEnsembleParams> parse_tree_ensemble(const ir::Node& n) { return checked(n, read_tree_ensemble); }
TreeEnsembleParams parse_tree_ensemble_unchecked(const ir::Node& n) { return unchecked(n, read_tree_ensemble); }

Expected<TreeEnsembleParams> parse_tree_ensemble_regressor(const ir::Node& n) { return checked(n, read_tree_regressor); }
TreeEnsembleParams parse_tree_ensemble_regressor_unchecked(const ir::Node& n) { return unchecked(n, read_tree_regressor); }
Expected<TreeEnsembleClassifierParams> parse_tree_ensemble_classifier(const ir::Node& n) {
  return checked(n, read_tree_classifier);
}
TreeEnsembleClassifierParams parse_tree_ensemble_classifier_unchecked(const ir::Node& n) {
  return unchecked(n, read_tree_classifier);
}
Expected<TreeEnsembleParams::Post> parse_post_transform(const ir::Node& n) { return read_post(n); }

Expected<LinearClassifierParams> parse_linear_classifier(const ir::Node& n) { return checked(n, read_linear_classifier); }
LinearClassifierParams parse_linear_classifier_unchecked(const ir::Node& n) { return unchecked(n, read_linear_classifier); }
Expected<LinearRegressorParams> parse_linear_regressor(const ir::Node& n) { return checked(n, read_linear_regressor); }
LinearRegressorParams parse_linear_regressor_unchecked(const ir::Node& n) { return unchecked(n, read_linear_regressor); }

Expected<SvmRegressorParams> parse_svm_regressor(const ir::Node& n) { return read_svm_regressor(n); }
Expected<SvmClassifierParams> parse_svm_classifier(const ir::Node& n) { return checked(n, read_svm_classifier); }
SvmClassifierParams parse_svm_classifier_unchecked(const ir::Node& n) { return unchecked(n, read_svm_classifier); }

Expected<FeatureVectorizerParams> parse_feature_vectorizer(const ir::Node& n) {
  return checked(n, read_feature_vectorizer);
}
FeatureVectorizerParams parse_feature_vectorizer_unchecked(const ir::Node& n) {
  return unchecked(n, read_feature_vectorizer);
}

Expected<CategoryMapperParams> parse_category_mapper(const ir::Node& n) {
  CategoryMapperParams p;
  p.ints = n.attr_ints("cats_int64s");
  if (const ir::Attribute* a = n.attr("cats_strings")) p.strings = a->strings;
  p.default_int = n.attr_int("default_int64", -1);
  p.default_string = n.attr_string("default_string", "_Unused");
  if (p.ints.empty() || p.strings.size() != p.ints.size())
    return invalid_model(n.describe() + ": cats_int64s (" + std::to_string(p.ints.size()) + ") and cats_strings (" +
                         std::to_string(p.strings.size()) + ") must be non-empty and of the same length");
  return p;
}

Expected<ScalerParams> parse_scaler(const ir::Node& n) {
  ScalerParams p;
  KILN_ASSIGN_OR_RETURN(p.offset, reals_attr(n, "offset", false));
  KILN_ASSIGN_OR_RETURN(p.scale, reals_attr(n, "scale", false));
  if (p.offset.empty()) p.offset = {0.0};
  if (p.scale.empty()) p.scale = {1.0};
  return p;
}

Expected<NormalizerParams> parse_normalizer(const ir::Node& n) {
  NormalizerParams p;
  const std::string s = n.attr_string("norm", "MAX");
  if (s == "MAX") p.norm = NormalizerParams::Norm::kMax;
  else if (s == "L1") p.norm = NormalizerParams::Norm::kL1;
  else if (s == "L2") p.norm = NormalizerParams::Norm::kL2;
  else return invalid_model(n.describe() + ": norm '" + s + "' is not MAX, L1 or L2");
  return p;
}

Expected<ImputerParams> parse_imputer(const ir::Node& n) {
  ImputerParams p;
  p.int64s = n.attr_ints("imputed_value_int64s");
  const std::vector<float> f = n.attr_floats("imputed_value_floats");
  p.floats.assign(f.begin(), f.end());
  if (p.floats.empty() == p.int64s.empty())
    return invalid_model(n.describe() + ": needs one of imputed_value_floats and imputed_value_int64s, not empty");
  p.ints = !p.int64s.empty();
  p.replaced_float = n.attr_float("replaced_value_float", 0.0f);
  p.replaced_int = n.attr_int("replaced_value_int64", 0);
  return p;
}

Expected<OneHotEncoderParams> parse_one_hot_encoder(const ir::Node& n) { return checked(n, read_one_hot_encoder); }
OneHotEncoderParams parse_one_hot_encoder_unchecked(const ir::Node& n) { return unchecked(n, read_one_hot_encoder); }

QuantizeParams parse_quantize(const ir::Node& n) {
  QuantizeParams p;
  p.axis = n.attr_int("axis", 1);
  p.block_size = n.attr_int("block_size", 0);
  p.saturate = n.attr_int("saturate", 1) != 0;
  p.output_dtype = static_cast<DataType>(n.attr_int("output_dtype", 0));
  p.precision = static_cast<DataType>(n.attr_int("precision", 0));
  return p;
}

Expected<RnnParams> parse_rnn(const ir::Node& n) { return checked(n, read_rnn); }
RnnParams parse_rnn_unchecked(const ir::Node& n) { return unchecked(n, read_rnn); }

Expected<LossParams> parse_loss(const ir::Node& n) { return checked(n, read_loss); }
LossParams parse_loss_unchecked(const ir::Node& n) { return unchecked(n, read_loss); }

Expected<RoiAlignParams> parse_roi_align(const ir::Node& n) { return checked(n, read_roi_align); }
RoiAlignParams parse_roi_align_unchecked(const ir::Node& n) { return unchecked(n, read_roi_align); }

Expected<MaxRoiPoolParams> parse_max_roi_pool(const ir::Node& n) { return checked(n, read_max_roi_pool); }
MaxRoiPoolParams parse_max_roi_pool_unchecked(const ir::Node& n) { return unchecked(n, read_max_roi_pool); }

DeformConvParams parse_deform_conv(const ir::Node& n) {
  DeformConvParams p;
  p.dilations = n.attr_ints("dilations");
  p.pads = n.attr_ints("pads");
  p.strides = n.attr_ints("strides");
  p.kernel_shape = n.attr_ints("kernel_shape");
  p.group = n.attr_int("group", 1);
  p.offset_group = n.attr_int("offset_group", 1);
  return p;
}

LpNormalizationParams parse_lp_normalization(const ir::Node& n) {
  LpNormalizationParams p;
  p.axis = n.attr_int("axis", -1);
  p.p = n.attr_int("p", 2);
  return p;
}

Expected<TfIdfParams> parse_tfidf(const ir::Node& n) { return checked(n, read_tfidf); }
TfIdfParams parse_tfidf_unchecked(const ir::Node& n) { return unchecked(n, read_tfidf); }

Expected<ScanParams> parse_scan(const ir::Node& n) { return checked(n, read_scan); }
ScanParams parse_scan_unchecked(const ir::Node& n) { return unchecked(n, read_scan); }

Expected<SequenceEmptyParams> parse_sequence_empty(const ir::Node& n) { return checked(n, read_sequence_empty); }
SequenceEmptyParams parse_sequence_empty_unchecked(const ir::Node& n) { return unchecked(n, read_sequence_empty); }

SplitToSequenceParams parse_split_to_sequence(const ir::Node& n) {
  SplitToSequenceParams p;
  p.axis = n.attr_int("axis", 0);
  p.keepdims = n.attr_int("keepdims", 1) != 0;
  return p;
}

Expected<ConcatFromSequenceParams> parse_concat_from_sequence(const ir::Node& n) {
  return checked(n, read_concat_from_sequence);
}
ConcatFromSequenceParams parse_concat_from_sequence_unchecked(const ir::Node& n) {
  return unchecked(n, read_concat_from_sequence);
}

OptionalParams parse_optional(const ir::Node& n) {
  OptionalParams p;
  if (const ir::Attribute* a = n.attr("type"); a && !a->types.empty()) {
    p.has_type = true;
    p.type = a->types[0];
  }
  return p;
}

}  // namespace kiln::ops
