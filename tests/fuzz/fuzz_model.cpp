// tests/fuzz/fuzz_model.cpp — the structure-aware model fuzzer (issue #49). The input is an ONNX
// ModelProto; a custom mutator parses it and changes the model, not its bytes: attribute values
// (0, ±1, ±2^31, ±2^63-1, huge and tiny, NaN and ±inf floats, empty and long lists, values of the
// wrong attribute type), tensor dims, dtypes and data lengths (initializers, Constant values, the
// feeds below), node arity (inputs and outputs dropped, added, emptied, rewired), value infos'
// dtypes and shapes and the opset version; then it serializes the model again. Inputs that do not
// parse get libFuzzer's byte mutator. The target imports the model, builds a CPU engine (no tuning,
// one thread, a build time limit) and runs it (0.5 s limit) on generated inputs, so the kernels run,
// not just the importer. A round trip through the engine file follows for a quarter of the inputs.
//
// Feeds: an initializer named as a graph input is taken out of the model before the build and fed
// as that input (tests/fuzz/make_model_seeds.py stores the onnx node tests' input data that way),
// so the mutator changes the runs' data too. Inputs without one get data from a generator seeded by
// the input's hash. Seeds: tests/fuzz/make_model_seeds.py (at job time) and tests/fuzz/corpus/model.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "fuzz/fuzz_common.h"
#include "onnx/onnx.pb.h"
#include "onnx/tensor_proto.h"

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace {

using ::onnx::AttributeProto;
using ::onnx::GraphProto;
using ::onnx::ModelProto;
using ::onnx::NodeProto;
using ::onnx::TensorProto;
using ::onnx::ValueInfoProto;

// splitmix64: the mutator's choices follow libFuzzer's seed, the generated data the input's hash.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
  bool one_in(size_t n) { return below(n) == 0; }
};

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
const int64_t kInts[] = {0, 1, -1, 2, -2, 3, 7, 255, 256, 65535, 1 << 20, 1 << 30, int64_t{1} << 31, -(int64_t{1} << 31),
                         (int64_t{1} << 31) - 1, int64_t{1} << 32, int64_t{1} << 62, kI64Max, kI64Min, kI64Max - 1, kI64Min + 1};
const float kFloats[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 1e-30f, 1e-45f, 1e30f, -1e30f, 3.4e38f, -3.4e38f,
                         2147483648.0f, 9.3e18f, -9.3e18f, std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
const char* const kStrings[] = {"", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "linear", "nearest", "cubic",
                                "constant", "reflect", "edge", "wrap", "DCR", "CRD", "half_pixel", "align_corners",
                                "asymmetric", "floor", "ceil", "round_prefer_floor", "tanh", "Relu", "none", "x"};
const char* const kAttrNames[] = {"axis", "axes", "perm", "keepdims", "to", "alpha", "beta", "gamma", "epsilon",
                                  "kernel_shape", "strides", "pads", "dilations", "group", "mode", "value", "k",
                                  "num_outputs", "split", "transA", "transB", "blocksize", "seed", "dtype", "shape",
                                  "auto_pad", "ceil_mode", "count_include_pad", "output_padding", "output_shape",
                                  "select_last_index", "noop_with_empty_axes", "reduction", "largest", "sorted",
                                  "direction", "hidden_size", "layout", "batch_dims", "starts", "ends", "extrapolation_value"};

int64_t pick_int(Rng& r, int64_t old) {
  switch (r.below(4)) {
    case 0: return static_cast<int64_t>(static_cast<uint64_t>(old) + 1);
    case 1: return static_cast<int64_t>(static_cast<uint64_t>(old) - 1);
    case 2: return static_cast<int64_t>(0 - static_cast<uint64_t>(old));
    default: return kInts[r.below(std::size(kInts))];
  }
}
float pick_float(Rng& r, float old) {
  if (r.one_in(4)) return -old;
  if (r.one_in(4)) return old * 1e10f;
  return kFloats[r.below(std::size(kFloats))];
}

// Every graph of the model (the main graph, subgraphs of attributes, at any depth) and every node.
void collect(GraphProto* g, std::vector<GraphProto*>& graphs, std::vector<NodeProto*>& nodes, int depth) {
  if (depth > 8) return;
  graphs.push_back(g);
  for (NodeProto& n : *g->mutable_node()) {
    nodes.push_back(&n);
    for (AttributeProto& a : *n.mutable_attribute()) {
      if (a.has_g()) collect(a.mutable_g(), graphs, nodes, depth + 1);
      for (GraphProto& sg : *a.mutable_graphs()) collect(&sg, graphs, nodes, depth + 1);
    }
  }
}

struct Model {
  ModelProto* m;
  std::vector<GraphProto*> graphs;
  std::vector<NodeProto*> nodes;
  std::vector<TensorProto*> tensors;  // initializers and tensor attributes
  std::vector<ValueInfoProto*> infos;
  explicit Model(ModelProto* mp) : m(mp) {
    if (m->has_graph()) collect(m->mutable_graph(), graphs, nodes, 0);
    for (auto& f : *m->mutable_functions())
      for (NodeProto& n : *f.mutable_node()) nodes.push_back(&n);
    for (GraphProto* g : graphs) {
      for (auto& t : *g->mutable_initializer()) tensors.push_back(&t);
      for (auto* l : {g->mutable_input(), g->mutable_output(), g->mutable_value_info()})
        for (auto& v : *l) infos.push_back(&v);
    }
    for (NodeProto* n : nodes)
      for (AttributeProto& a : *n->mutable_attribute()) {
        if (a.has_t()) tensors.push_back(a.mutable_t());
        for (auto& t : *a.mutable_tensors()) tensors.push_back(&t);
      }
  }
  // A value name some node of the model uses (for rewiring), or "".
  std::string some_value(Rng& r) const {
    if (nodes.empty()) return "";
    const NodeProto* n = nodes[r.below(nodes.size())];
    const int total = n->input_size() + n->output_size();
    if (total == 0) return "";
    const size_t i = r.below(total);
    return i < size_t(n->input_size()) ? n->input(i) : n->output(i - n->input_size());
  }
};

int32_t pick_dtype(Rng& r) {
  static const int32_t common[] = {1, 1, 7, 6, 9, 10, 11, 2, 3, 16, 12, 13, 4, 5, 8};
  if (r.one_in(8)) return static_cast<int32_t>(r.below(30));  // any code, invalid ones too
  return common[r.below(std::size(common))];
}

// Writes an extreme value of the tensor's type over one element of its raw data.
void poke_raw(Rng& r, TensorProto* t) {
  std::string& raw = *t->mutable_raw_data();
  if (raw.empty()) return;
  switch (t->data_type()) {
    case TensorProto::FLOAT: {
      if (raw.size() < 4) return;
      const float v = kFloats[r.below(std::size(kFloats))];
      std::memcpy(&raw[4 * r.below(raw.size() / 4)], &v, 4);
      return;
    }
    case TensorProto::DOUBLE: {
      if (raw.size() < 8) return;
      const double v = kFloats[r.below(std::size(kFloats))];
      std::memcpy(&raw[8 * r.below(raw.size() / 8)], &v, 8);
      return;
    }
    case TensorProto::INT64: case TensorProto::UINT64: {
      if (raw.size() < 8) return;
      const int64_t v = kInts[r.below(std::size(kInts))];
      std::memcpy(&raw[8 * r.below(raw.size() / 8)], &v, 8);
      return;
    }
    case TensorProto::INT32: case TensorProto::UINT32: {
      if (raw.size() < 4) return;
      const int32_t v = static_cast<int32_t>(kInts[r.below(std::size(kInts))]);
      std::memcpy(&raw[4 * r.below(raw.size() / 4)], &v, 4);
      return;
    }
    default:
      raw[r.below(raw.size())] = static_cast<char>(r.next());
  }
}

void mutate_tensor(Rng& r, TensorProto* t) {
  switch (r.below(10)) {
    case 0: case 1: {  // one dim
      if (t->dims_size() == 0) { t->add_dims(pick_int(r, 1)); return; }
      const int i = static_cast<int>(r.below(t->dims_size()));
      t->set_dims(i, r.one_in(2) ? static_cast<int64_t>(r.below(4)) : pick_int(r, t->dims(i)));
      return;
    }
    case 2:  // rank
      if (t->dims_size() > 0 && r.one_in(2)) t->mutable_dims()->RemoveLast();
      else t->add_dims(r.one_in(2) ? 1 : pick_int(r, 1));
      return;
    case 3: t->set_data_type(pick_dtype(r)); return;
    case 4: {  // data length
      std::string& raw = *t->mutable_raw_data();
      switch (r.below(4)) {
        case 0: raw.clear(); return;
        case 1: raw.resize(raw.size() / 2); return;
        case 2: raw.resize(raw.size() + 1 + r.below(16)); return;
        default: raw.resize(raw.size() * 2 + 8); return;
      }
    }
    case 5: case 6: poke_raw(r, t); return;
    case 7: {  // the typed fields
      if (t->float_data_size() > 0) t->set_float_data(r.below(t->float_data_size()), pick_float(r, 1));
      else if (t->int64_data_size() > 0) t->set_int64_data(r.below(t->int64_data_size()), pick_int(r, 0));
      else if (t->int32_data_size() > 0) t->set_int32_data(r.below(t->int32_data_size()), static_cast<int32_t>(pick_int(r, 0)));
      else if (r.one_in(2)) t->add_int64_data(pick_int(r, 0));
      else t->add_float_data(pick_float(r, 0));
      return;
    }
    case 8:  // raw and typed both, or neither
      if (r.one_in(2)) { t->clear_float_data(); t->clear_int64_data(); t->clear_int32_data(); }
      else t->add_int32_data(static_cast<int32_t>(pick_int(r, 0)));
      return;
    default:  // a scalar of the same type
      t->clear_dims();
      if (t->raw_data().size() > 16) t->mutable_raw_data()->resize(16);
      return;
  }
}

void set_value(Rng& r, AttributeProto* a, AttributeProto::AttributeType type) {
  a->set_type(type);
  switch (type) {
    case AttributeProto::INT: a->set_i(pick_int(r, a->i())); return;
    case AttributeProto::FLOAT: a->set_f(pick_float(r, a->f())); return;
    case AttributeProto::STRING: a->set_s(kStrings[r.below(std::size(kStrings))]); return;
    case AttributeProto::INTS: {
      switch (r.below(6)) {
        case 0: a->clear_ints(); return;
        case 1: a->add_ints(pick_int(r, 1)); return;
        case 2: if (a->ints_size() > 0) a->mutable_ints()->RemoveLast(); return;
        case 3: {  // long
          const int64_t v = r.one_in(2) ? 1 : pick_int(r, 0);
          for (int k = 0; k < 64 + static_cast<int>(r.below(1024)); ++k) a->add_ints(v);
          return;
        }
        default:
          if (a->ints_size() == 0) a->add_ints(pick_int(r, 0));
          else { const int i = static_cast<int>(r.below(a->ints_size())); a->set_ints(i, pick_int(r, a->ints(i))); }
          return;
      }
    }
    case AttributeProto::FLOATS:
      if (a->floats_size() == 0 || r.one_in(4)) a->add_floats(pick_float(r, 0));
      else if (r.one_in(3)) a->clear_floats();
      else { const int i = static_cast<int>(r.below(a->floats_size())); a->set_floats(i, pick_float(r, a->floats(i))); }
      return;
    case AttributeProto::STRINGS:
      if (r.one_in(3)) a->clear_strings();
      else a->add_strings(kStrings[r.below(std::size(kStrings))]);
      return;
    case AttributeProto::TENSOR:
      if (!a->has_t()) { a->mutable_t()->set_data_type(pick_dtype(r)); a->mutable_t()->set_raw_data(std::string(8, '\0')); }
      mutate_tensor(r, a->mutable_t());
      return;
    default: return;  // graphs are mutated through the graph list
  }
}

AttributeProto::AttributeType any_type(Rng& r) {
  static const AttributeProto::AttributeType t[] = {AttributeProto::INT, AttributeProto::FLOAT, AttributeProto::STRING,
                                                    AttributeProto::INTS, AttributeProto::FLOATS, AttributeProto::STRINGS,
                                                    AttributeProto::TENSOR, AttributeProto::GRAPH};
  return t[r.below(std::size(t))];
}

void mutate_attribute(Rng& r, Model& md) {
  if (md.nodes.empty()) return;
  NodeProto* n = md.nodes[r.below(md.nodes.size())];
  if (n->attribute_size() == 0 || r.one_in(5)) {  // a new attribute (known names, any type)
    AttributeProto* a = n->add_attribute();
    a->set_name(kAttrNames[r.below(std::size(kAttrNames))]);
    const AttributeProto::AttributeType ty = any_type(r);
    set_value(r, a, ty == AttributeProto::GRAPH ? AttributeProto::INT : ty);
    return;
  }
  const int ai = static_cast<int>(r.below(n->attribute_size()));
  AttributeProto* a = n->mutable_attribute(ai);
  switch (r.below(10)) {
    case 0:  // the wrong type: another type's value, or the type field alone
      if (r.one_in(2)) set_value(r, a, any_type(r));
      else a->set_type(any_type(r));
      return;
    case 1:  // gone
      n->mutable_attribute()->DeleteSubrange(ai, 1);
      return;
    default:
      set_value(r, a, a->type());
  }
}

void mutate_info(Rng& r, Model& md) {
  if (md.infos.empty()) return;
  ValueInfoProto* v = md.infos[r.below(md.infos.size())];
  auto* tt = v->mutable_type()->mutable_tensor_type();
  switch (r.below(5)) {
    case 0: tt->set_elem_type(pick_dtype(r)); return;
    case 1: tt->clear_shape(); return;
    case 2: {
      auto* s = tt->mutable_shape();
      if (s->dim_size() > 0 && r.one_in(2)) s->mutable_dim()->RemoveLast();
      else s->add_dim()->set_dim_value(r.one_in(2) ? 1 : static_cast<int64_t>(r.below(5)));
      return;
    }
    default: {
      auto* s = tt->mutable_shape();
      if (s->dim_size() == 0) { s->add_dim()->set_dim_param("N"); return; }
      auto* d = s->mutable_dim(static_cast<int>(r.below(s->dim_size())));
      if (r.one_in(4)) d->set_dim_param(r.one_in(2) ? "N" : "");
      else d->set_dim_value(r.one_in(2) ? static_cast<int64_t>(r.below(5)) : pick_int(r, d->dim_value()));
      return;
    }
  }
}

void mutate_arity(Rng& r, Model& md) {
  if (md.nodes.empty()) return;
  NodeProto* n = md.nodes[r.below(md.nodes.size())];
  switch (r.below(8)) {
    case 0: if (n->input_size() > 0) n->mutable_input()->RemoveLast(); return;
    case 1: n->add_input(r.one_in(3) ? std::string() : md.some_value(r)); return;
    case 2: if (n->input_size() > 0) n->set_input(static_cast<int>(r.below(n->input_size())), ""); return;
    case 3: if (n->input_size() > 0) n->set_input(static_cast<int>(r.below(n->input_size())), md.some_value(r)); return;
    case 4: if (n->output_size() > 0) n->mutable_output()->RemoveLast(); return;
    case 5: n->add_output(r.one_in(3) ? std::string() : "fz" + std::to_string(r.below(1000))); return;
    case 6: if (n->output_size() > 0) n->set_output(static_cast<int>(r.below(n->output_size())), ""); return;
    default:  // another node's op
      n->set_op_type(md.nodes[r.below(md.nodes.size())]->op_type());
      return;
  }
}

void mutate_model_level(Rng& r, Model& md) {
  ModelProto* m = md.m;
  switch (r.below(4)) {
    case 0: {
      if (m->opset_import_size() == 0) { m->add_opset_import()->set_version(1 + static_cast<int64_t>(r.below(25))); return; }
      auto* o = m->mutable_opset_import(static_cast<int>(r.below(m->opset_import_size())));
      o->set_version(r.one_in(4) ? pick_int(r, o->version()) : 1 + static_cast<int64_t>(r.below(25)));
      return;
    }
    case 1: m->set_ir_version(r.one_in(2) ? 3 + static_cast<int64_t>(r.below(9)) : pick_int(r, m->ir_version())); return;
    case 2: {  // a node dropped or doubled
      if (md.graphs.empty()) return;
      GraphProto* g = md.graphs[r.below(md.graphs.size())];
      if (g->node_size() == 0) return;
      const int i = static_cast<int>(r.below(g->node_size()));
      if (r.one_in(2)) g->mutable_node()->DeleteSubrange(i, 1);
      else *g->add_node() = NodeProto(g->node(i));
      return;
    }
    default: {  // an initializer dropped or renamed onto another value
      if (md.graphs.empty()) return;
      GraphProto* g = md.graphs[r.below(md.graphs.size())];
      if (g->initializer_size() == 0) return;
      const int i = static_cast<int>(r.below(g->initializer_size()));
      if (r.one_in(2)) g->mutable_initializer()->DeleteSubrange(i, 1);
      else g->mutable_initializer(i)->set_name(md.some_value(r));
      return;
    }
  }
}

void mutate(Rng& r, ModelProto* m) {
  const int count = 1 + static_cast<int>(r.below(3));
  for (int k = 0; k < count; ++k) {
    Model md(m);  // rebuilt each time: a mutation may delete what the last one pointed at
    const size_t what = r.below(20);
    if (what < 8) mutate_attribute(r, md);
    else if (what < 12) { if (!md.tensors.empty()) mutate_tensor(r, md.tensors[r.below(md.tensors.size())]); }
    else if (what < 15) mutate_info(r, md);
    else if (what < 18) mutate_arity(r, md);
    else mutate_model_level(r, md);
  }
}

bool parse(const uint8_t* data, size_t size, ModelProto* m) {
  return size > 0 && m->ParseFromArray(data, static_cast<int>(size)) && m->has_graph() && m->graph().node_size() > 0;
}

size_t serialize_into(const ModelProto& m, uint8_t* data, size_t max_size) {
  const size_t n = m.ByteSizeLong();
  if (n == 0 || n > max_size) return 0;
  return m.SerializeToArray(data, static_cast<int>(n)) ? n : 0;
}

// The data of an input without a feed: small values, now and then an extreme one.
kiln::Tensor generated(Rng& r, kiln::DataType dt, const kiln::Shape& s) {
  kiln::Tensor t = kiln::Tensor::empty(dt, s);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const bool odd = r.one_in(64);
    const int64_t iv = odd ? kInts[r.below(std::size(kInts))] : static_cast<int64_t>(r.below(6)) - 2;
    const double fv = odd ? kFloats[r.below(std::size(kFloats))] : (static_cast<double>(r.below(2001)) - 1000) / 400;
    switch (dt) {
      case kiln::DataType::kFloat32: t.data<float>()[i] = static_cast<float>(fv); break;
      case kiln::DataType::kFloat64: t.data<double>()[i] = fv; break;
      case kiln::DataType::kInt64: t.data<int64_t>()[i] = iv; break;
      case kiln::DataType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(iv); break;
      case kiln::DataType::kBool: t.data<uint8_t>()[i] = static_cast<uint8_t>(r.below(2)); break;
      default:  // other types: bytes (all bit patterns are values of the small types; bool above)
        if (dt != kiln::DataType::kString)
          for (size_t b = 0; b < kiln::dtype_size(dt); ++b) t.data<uint8_t>()[i * kiln::dtype_size(dt) + b] = static_cast<uint8_t>(r.next());
    }
  }
  return t;
}

uint64_t hash_bytes(const uint8_t* data, size_t size) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

void run(const kiln::Engine& engine, const std::map<std::string, kiln::Tensor>& feeds, Rng& r) {
  std::map<std::string, kiln::Value> feed;
  size_t bytes = 0;
  for (const kiln::TensorInfo& t : engine.inputs()) {
    if (t.kind != "tensor" || t.dtype == kiln::DataType::kString || t.dtype == kiln::DataType::kUndefined) return;
    auto it = feeds.find(t.name);
    if (it != feeds.end() && it->second.dtype() == t.dtype) {
      bytes += it->second.nbytes();
      feed[t.name] = kiln::Value::of(it->second);
      continue;
    }
    if (!t.rank_known) return;
    kiln::Shape s;
    for (int64_t d : t.shape) s.push_back(d < 0 ? 1 + static_cast<int64_t>(r.below(3)) : d);
    if (!kiln::check_tensor_size(t.dtype, s).empty()) return;
    bytes += kiln::shape_nbytes(t.dtype, s);
    if (bytes > (size_t{1} << 20)) return;
    feed[t.name] = kiln::Value::of(generated(r, t.dtype, s));
  }
  if (bytes > (size_t{4} << 20)) return;
  auto ctx = engine.create_context();
  if (!ctx.ok()) return;
  (*ctx)->set_run_timeout(0.5);  // a Loop may run as long as it likes; the run limit is the answer
  (void)(*ctx)->run(feed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::init_limits();
  Rng r{hash_bytes(data, size)};
  ModelProto m;
  std::string bytes;
  std::map<std::string, kiln::Tensor> feeds;
  if (size > 0 && m.ParseFromArray(data, static_cast<int>(size)) && m.has_graph()) {
    // Initializers named as graph inputs are the feeds: out of the model, into the run.
    GraphProto* g = m.mutable_graph();
    std::set<std::string> inputs;
    for (const auto& v : g->input()) inputs.insert(v.name());
    for (int i = g->initializer_size() - 1; i >= 0; --i) {
      if (!inputs.count(g->initializer(i).name())) continue;
      auto t = kiln::onnx::tensor_from_proto(g->initializer(i), {"", "feed"});
      if (t.ok() && t->dtype() != kiln::DataType::kString) feeds[g->initializer(i).name()] = std::move(*t);
      g->mutable_initializer()->DeleteSubrange(i, 1);
    }
    bytes = m.SerializeAsString();
  } else {
    bytes.assign(reinterpret_cast<const char*>(data), size);
  }
  kiln::BuildOptions o;
  o.tune = 0;
  o.threads = 1;
  o.timeout_s = 2.0;
  auto engine = kiln::Engine::build_from_bytes(bytes, o);
  if (!engine.ok()) return 0;
  run(**engine, feeds, r);
  if (r.one_in(4)) {  // the engine file of a mutated model: saved, loaded, run
    auto file = (*engine)->serialize();
    if (file.ok()) {
      auto loaded = kiln::Engine::load_from_bytes(*file);
      if (loaded.ok()) run(**loaded, feeds, r);
    }
  }
  return 0;
}

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rng r{seed};
  ModelProto m;
  if (r.one_in(16) || !parse(data, size, &m)) return LLVMFuzzerMutate(data, size, max_size);
  mutate(r, &m);
  const size_t n = serialize_into(m, data, max_size);
  return n > 0 ? n : LLVMFuzzerMutate(data, size, max_size);
}

// Crossover: a node of the other model grafted into this one (its inputs wired to this model's
// values), or one of its attributes copied onto a node of this one.
extern "C" size_t LLVMFuzzerCustomCrossOver(const uint8_t* data1, size_t size1, const uint8_t* data2, size_t size2,
                                            uint8_t* out, size_t max_out_size, unsigned int seed) {
  Rng r{seed};
  ModelProto a, b;
  if (!parse(data1, size1, &a) || !parse(data2, size2, &b)) return 0;
  Model ma(&a), mb(&b);
  if (ma.nodes.empty() || mb.nodes.empty()) return 0;
  const NodeProto& donor = *mb.nodes[r.below(mb.nodes.size())];
  if (r.one_in(2) && donor.attribute_size() > 0) {
    NodeProto* n = ma.nodes[r.below(ma.nodes.size())];
    *n->add_attribute() = donor.attribute(static_cast<int>(r.below(donor.attribute_size())));
  } else {
    NodeProto n(donor);
    for (int i = 0; i < n.input_size(); ++i) n.set_input(i, ma.some_value(r));
    for (int i = 0; i < n.output_size(); ++i) n.set_output(i, "fx" + std::to_string(i));
    GraphProto* g = a.mutable_graph();
    *g->add_node() = n;
    if (n.output_size() > 0 && r.one_in(2)) g->add_output()->set_name(n.output(0));  // so it is not dead code
  }
  return serialize_into(a, out, max_out_size);
}
