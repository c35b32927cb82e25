#include "onnx/importer.h"

#include <cctype>
#include <climits>
#include <filesystem>
#include <future>
#include <map>
#include <new>
#include <set>

#include <omp.h>

#include "onnx/functions.h"
#include "onnx/onnx.pb.h"
#include "onnx/proto_nesting.h"
#include "onnx/sha256.h"
#include "onnx/tensor_proto.h"
#include "ops/op_table.h"
#include "util/file.h"
#include "util/guard.h"
#include "util/utf8.h"

namespace kiln::onnx {

namespace fs = std::filesystem;

// The newest ai.onnx opset of the pinned onnx release (onnx 1.22: onnx.defs.onnx_opset_version()).
int max_supported_opset() { return 27; }

namespace {

constexpr size_t kMaxProtoBytes = size_t{INT_MAX};  // protobuf's own limit for one message

std::string quote(const std::string& s) { return "'" + s + "'"; }

std::string node_label(const ::onnx::NodeProto& n, const std::string& name) {
  const std::string d = normalize_domain(n.domain());
  return "node '" + name + "' (" + (d.empty() ? n.op_type() : d + "." + n.op_type()) + ")";
}

class Importer {
 public:
  explicit Importer(const ImportOptions& options) : opt_(options) {}
  // `raw`: the main graph's initializers' raw_data taken out before parsing (model_without_weights),
  // per initializer in order; an empty view where the parsed proto holds it.
  Expected<ir::Model> run(const ::onnx::ModelProto& m, const std::vector<std::string_view>* raw = nullptr);

 private:
  Status read_opsets(const ::onnx::ModelProto& m, OpsetMap& opsets);
  Status build_graph(const ::onnx::GraphProto& gp, ir::Graph& g);
  Status zipmap_outputs(ir::Graph& g, std::map<std::string, std::string>& metadata);
  Status dict_vectorizer_inputs(ir::Graph& g, std::map<std::string, std::string>& metadata);
  Status cast_map_inputs(ir::Graph& g, std::map<std::string, std::string>& metadata);
  Status check_sole_map_reader(const ir::Graph& g, const ir::Value& v, const ir::Node& n) const;
  Status convert_attribute(const ::onnx::AttributeProto& a, ir::Graph& g, const std::string& where,
                           ir::Attribute& out);
  Expected<std::shared_ptr<ir::Graph>> build_subgraph(const ::onnx::GraphProto& gp, ir::Graph& parent,
                                                      const std::string& where);
  Status check_capture_order(const ir::Graph& g, const std::string& where);
  std::string where(const ir::Graph& g) const {
    return g.parent ? opt_.source_name + ": subgraph " + quote(g.name) : opt_.source_name;
  }

  ImportOptions opt_;
  FunctionInliner inliner_;
  const std::vector<std::string_view>* main_raw_ = nullptr;  // run()'s `raw`, for the main graph only
};

// The value `name` as seen from `g`: its own, or one of an enclosing graph captured into `g` (and
// into every graph in between, so each graph's captures resolve in its direct parent).
// Cast before opset 6 names its target type as a string ("FLOAT", "INT64", ...): rewrite it to the
// TensorProto code later opsets use, so kernels and shape functions see one form.
Status normalize_legacy_cast(ir::Node& n, const std::string& label) {
  if (!n.domain.empty() || n.op_type != "Cast" || n.opset >= 6) return Status::Ok();
  auto it = n.attrs.find("to");
  if (it == n.attrs.end() || it->second.kind != ir::Attribute::Kind::kString) return Status::Ok();
  std::string name = it->second.s;
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static const std::map<std::string, int64_t> kCodes = {
      {"FLOAT", 1}, {"UINT8", 2}, {"INT8", 3}, {"UINT16", 4}, {"INT16", 5}, {"INT32", 6}, {"INT64", 7},
      {"STRING", 8}, {"BOOL", 9}, {"FLOAT16", 10}, {"DOUBLE", 11}, {"UINT32", 12}, {"UINT64", 13},
      {"COMPLEX64", 14}, {"COMPLEX128", 15}};
  auto code = kCodes.find(name);
  if (code == kCodes.end()) return invalid_model(label + ": Cast 'to' = " + quote(it->second.s) + " is not a type name");
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kInt;
  a.i = code->second;
  it->second = a;
  return Status::Ok();
}

ir::Value* resolve(ir::Graph& g, const std::string& name) {
  if (ir::Value* v = g.find_value(name)) return v;
  if (!g.parent) return nullptr;
  ir::Value* outer = resolve(*g.parent, name);
  if (!outer) return nullptr;
  ir::Value* c = g.add_value(name, outer->type);
  c->is_capture = true;
  g.captures.push_back(c);
  return c;
}

Status Importer::read_opsets(const ::onnx::ModelProto& m, OpsetMap& opsets) {
  const std::string range = "[" + std::to_string(kMinOpset) + ", " + std::to_string(max_supported_opset()) + "]";
  for (const auto& o : m.opset_import()) {
    const std::string domain = normalize_domain(o.domain());
    if (o.version() < 1 || o.version() > 1'000'000)
      return invalid_model(opt_.source_name + ": opset_import of domain " + quote(o.domain()) + " has version " +
                           std::to_string(o.version()));
    auto [it, fresh] = opsets.emplace(domain, static_cast<int>(o.version()));
    if (!fresh && it->second != o.version())
      return invalid_model(opt_.source_name + ": domain " + quote(o.domain()) + " is imported twice, as opsets " +
                           std::to_string(it->second) + " and " + std::to_string(o.version()));
  }
  // IR versions before 3 had no opset_import: such models use ai.onnx opset 1.
  if (m.opset_import_size() == 0 && m.ir_version() < 3) opsets.emplace("", 1);
  // A model may import only other domains (ai.onnx.ml, training); its ai.onnx nodes are refused later.
  auto check = [&](int v, const std::string& who) -> Status {
    if (v >= kMinOpset && v <= max_supported_opset()) return Status::Ok();
    return unsupported(opt_.source_name + ": " + who + " uses ai.onnx opset " + std::to_string(v) +
                       "; kiln supports opsets " + range);
  };
  auto def = opsets.find("");
  if (def != opsets.end()) KILN_RETURN_IF_ERROR(check(def->second, "the model"));
  // Domains only a function imports become known to the graph too.
  for (const OpsetMap* f : inliner_.function_opsets()) {
    auto fd = f->find("");
    if (fd != f->end()) KILN_RETURN_IF_ERROR(check(fd->second, "a model-local function"));
    for (const auto& [d, v] : *f) opsets.emplace(d, v);
  }
  return Status::Ok();
}

namespace {

// s as a JSON string. A byte outside valid UTF-8 (a model's strings can hold anything; overlong forms
// and surrogates included, util/utf8.h) becomes \udcXX, the code point Python's 'surrogateescape' reads
// it as, so the record always parses and names the key a Python caller gives for those bytes.
std::string quote_json(const std::string& s) {
  std::string q = "\"";
  auto escape = [&](unsigned v) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\u%04x", v);
    q += buf;
  };
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      escape(0xDC00u | c);
      ++i;
    } else if (n == 1) {
      if (c == '"' || c == '\\') q += '\\', q += static_cast<char>(c);
      else if (c < 0x20) escape(c);
      else q += static_cast<char>(c);
      ++i;
    } else {
      q.append(s, i, n);
      i += n;
    }
  }
  return q + "\"";
}

// Whether a subgraph of g (at any depth) captures the value `name` of g.
bool captured(const ir::Graph& g, const std::string& name) {
  for (const ir::Node* n : g.nodes())
    for (const auto& [key, a] : n->attrs) {
      std::vector<const ir::Graph*> bodies;
      if (a.g) bodies.push_back(a.g.get());
      for (const auto& sub : a.graphs) bodies.push_back(sub.get());
      for (const ir::Graph* b : bodies) {
        for (const ir::Value* c : b->captures)
          if (c && c->name == name) return true;
        if (captured(*b, name)) return true;
      }
    }
  return false;
}

// kiln's records of the maps at a graph's edges, in the model's metadata (written from the graph below;
// a model's own metadata cannot claim them).
constexpr const char* kZipMapRecord = "kiln.zipmap.";
constexpr const char* kDictVectorizerRecord = "kiln.dictvectorizer.";
constexpr const char* kCastMapRecord = "kiln.castmap.";

// The ai.onnx.ml `op` node (one input, one output) that alone reads graph input `v` of map type, or null.
ir::Node* sole_map_reader(const ir::Value* v, const char* op) {
  if (!v || v->type.kind != ir::Type::Kind::kMap || v->uses.size() != 1) return nullptr;
  ir::Node* n = v->uses[0].node;
  if (n->domain != "ai.onnx.ml" || n->op_type != op || n->inputs.size() != 1 || n->outputs.size() != 1 || !n->has_output(0))
    return nullptr;
  return n;
}

// A ZipMap, DictVectorizer or CastMap at a map edge becomes an ONNX Identity: its output is a tensor
// now, whose type inference gives it from the input.
void become_identity(ir::Graph& g, ir::Node& n) {
  n.op_type = "Identity";
  n.domain.clear();
  n.opset = g.opsets.count("") ? g.opsets.at("") : 13;
  n.attrs.clear();
  n.outputs[0]->type = ir::Type{};
}

}  // namespace

// A map input read by one DictVectorizer or CastMap becomes that node's tensor; one the graph also
// returns, or a subgraph reads, would have to stay a map there, and kiln's values hold no maps:
// refused by name.
Status Importer::check_sole_map_reader(const ir::Graph& g, const ir::Value& v, const ir::Node& n) const {
  if (v.is_output || captured(g, v.name))
    return unsupported(opt_.source_name + ": map input '" + v.name + "' is read by " + n.describe() + " and " +
                       (v.is_output ? "is also a graph output" : "is read inside a subgraph") +
                       ": kiln takes a map input only where a DictVectorizer or a CastMap is all that reads it");
  return Status::Ok();
}

// ai.onnx.ml DictVectorizer reading a graph input of map type (scikit-learn's DictVectorizer converted
// by skl2onnx: one {key: value} map per run, as ONNX Runtime takes it). kiln's values hold no maps, so
// the input becomes the dense row the node makes, a tensor [1, vocabulary size] of the map's value
// type, the node an Identity, and the vocabulary is recorded in the model's metadata
// ("kiln.dictvectorizer.<input>": JSON {"keys": "int64" | "string", "vocabulary": [...]}): the Python
// session turns the map it is given into that row (keys not in the vocabulary are left out, as ONNX
// Runtime does), the C++ API and the CLI take the row. A map input anything else reads stays a map
// (and its model cannot be built).
Status Importer::dict_vectorizer_inputs(ir::Graph& g, std::map<std::string, std::string>& metadata) {
  for (ir::Value* v : g.inputs) {
    ir::Node* n = sole_map_reader(v, "DictVectorizer");
    if (!n) continue;
    KILN_RETURN_IF_ERROR(check_sole_map_reader(g, *v, *n));
    const ir::Attribute* ints = n->attr("int64_vocabulary");
    const ir::Attribute* strs = n->attr("string_vocabulary");
    const bool int_keys = v->type.key_dtype == DataType::kInt64;
    if ((ints != nullptr) == (strs != nullptr) || (int_keys ? !ints : !strs) ||
        (!int_keys && v->type.key_dtype != DataType::kString))
      return invalid_model(opt_.source_name + ": " + n->describe() + " needs exactly one vocabulary, of its map's key type (" +
                           dtype_name(v->type.key_dtype) + ")");
    const ir::Type* value = v->type.elem.get();
    if (!value || !value->is_tensor() ||
        (value->dtype != DataType::kFloat32 && value->dtype != DataType::kFloat64 && value->dtype != DataType::kInt64 &&
         value->dtype != DataType::kString))
      return invalid_model(opt_.source_name + ": " + n->describe() +
                           ": the map's values must be float, double, int64 or string tensors");
    std::string vocabulary;
    const size_t size = ints ? ints->ints.size() : strs->strings.size();
    if (ints)
      for (int64_t k : ints->ints) vocabulary += (vocabulary.empty() ? "" : ",") + std::to_string(k);
    else
      for (const std::string& k : strs->strings) vocabulary += (vocabulary.empty() ? "" : ",") + quote_json(k);
    metadata[kDictVectorizerRecord + v->name] =
        std::string("{\"keys\":\"") + (ints ? "int64" : "string") + "\",\"vocabulary\":[" + vocabulary + "]}";
    v->type = ir::Type::tensor(value->dtype, ir::SymShape({ir::Dim(1), ir::Dim(static_cast<int64_t>(size))}));
    become_identity(g, *n);
  }
  return Status::Ok();
}

// ai.onnx.ml CastMap reading a graph input of map type (map(int64, float) or map(int64, string): one
// map per run). As for DictVectorizer, the input becomes the row the node makes, a tensor [1, n] of
// its cast_to type (DENSE: n = the map's size, dynamic; SPARSE: n = max_map), the node an Identity,
// and the node's attributes are recorded in the model's metadata ("kiln.castmap.<input>": JSON
// {"values": "float" | "string", "cast_to", "map_form", "max_map"}): the Python session makes the row
// from the map it is given as onnxruntime's kernel does, the C++ API and the CLI take the row.
Status Importer::cast_map_inputs(ir::Graph& g, std::map<std::string, std::string>& metadata) {
  for (ir::Value* v : g.inputs) {
    ir::Node* n = sole_map_reader(v, "CastMap");
    if (!n) continue;
    KILN_RETURN_IF_ERROR(check_sole_map_reader(g, *v, *n));
    const ir::Type* value = v->type.elem.get();
    if (v->type.key_dtype != DataType::kInt64 || !value || !value->is_tensor() ||
        (value->dtype != DataType::kFloat32 && value->dtype != DataType::kString))
      return invalid_model(opt_.source_name + ": " + n->describe() + " reads map(int64, float) or map(int64, string); '" +
                           v->name + "' is a map of " + std::string(dtype_name(v->type.key_dtype)) + " keys" +
                           (value && value->is_tensor() ? " and " + std::string(dtype_name(value->dtype)) + " values" : ""));
    const std::string cast_to = n->attr_string("cast_to", "TO_FLOAT");
    const std::string form = n->attr_string("map_form", "DENSE");
    const int64_t max_map = n->attr_int("max_map", 1);
    const DataType out = cast_to == "TO_FLOAT" ? DataType::kFloat32 : cast_to == "TO_STRING" ? DataType::kString
                         : cast_to == "TO_INT64" ? DataType::kInt64 : DataType::kUndefined;
    if (out == DataType::kUndefined)
      return invalid_model(opt_.source_name + ": " + n->describe() + ": cast_to '" + cast_to + "' is not TO_FLOAT, TO_STRING or TO_INT64");
    if (form != "DENSE" && form != "SPARSE")
      return invalid_model(opt_.source_name + ": " + n->describe() + ": map_form '" + form + "' is not DENSE or SPARSE");
    // A SPARSE row has max_map entries: at least one, and a size the row can be allocated at.
    if (form == "SPARSE" && (max_map < 1 || max_map > (int64_t{1} << 31) - 1))
      return invalid_model(opt_.source_name + ": " + n->describe() + ": max_map " + std::to_string(max_map) +
                           " must be between 1 and 2^31 - 1 for the SPARSE form");
    metadata[kCastMapRecord + v->name] = std::string("{\"values\":\"") + (value->dtype == DataType::kString ? "string" : "float") +
                                          "\",\"cast_to\":\"" + cast_to + "\",\"map_form\":\"" + form +
                                          "\",\"max_map\":" + std::to_string(max_map) + "}";
    v->type = ir::Type::tensor(out, ir::SymShape({ir::Dim(1), form == "SPARSE" ? ir::Dim(max_map) : ir::Dim(v->name + "_entries")}));
    become_identity(g, *n);
  }
  return Status::Ok();
}

// ai.onnx.ml ZipMap writing a graph output (scikit-learn classifiers converted by skl2onnx with its
// defaults: their probabilities as a list of {label: probability} maps). kiln's values hold no maps,
// so the output stays the probability tensor [N, C] (an Identity of ZipMap's input under the output's
// name) and the labels are recorded in the model's metadata ("kiln.zipmap.<output>": JSON {"keys":
// "int64" | "string", "labels": [...]}); the Python session turns the tensor into ONNX Runtime's list
// of dicts, the C++ API and the CLI give the tensor. A ZipMap whose output anything else reads stays
// (and has no kernel).
Status Importer::zipmap_outputs(ir::Graph& g, std::map<std::string, std::string>& metadata) {
  for (ir::Node* n : g.nodes()) {
    if (n->domain != "ai.onnx.ml" || n->op_type != "ZipMap" || n->inputs.size() != 1 || !n->has_input(0) ||
        n->outputs.size() != 1 || !n->has_output(0))
      continue;
    ir::Value* z = n->outputs[0];
    if (!z->is_output || !z->uses.empty()) continue;
    const ir::Attribute* ints = n->attr("classlabels_int64s");
    const ir::Attribute* strs = n->attr("classlabels_strings");
    if ((ints != nullptr) == (strs != nullptr))
      return invalid_model(opt_.source_name + ": " + n->describe() + " needs exactly one of classlabels_int64s and classlabels_strings");
    std::string labels;
    if (ints)
      for (int64_t v : ints->ints) labels += (labels.empty() ? "" : ",") + std::to_string(v);
    else
      for (const std::string& v : strs->strings) labels += (labels.empty() ? "" : ",") + quote_json(v);
    metadata[kZipMapRecord + z->name] = std::string("{\"keys\":\"") + (ints ? "int64" : "string") + "\",\"labels\":[" + labels + "]}";
    become_identity(g, *n);  // z is a tensor now: inference gives it ZipMap's input type
  }
  return Status::Ok();
}

Expected<ir::Model> Importer::run(const ::onnx::ModelProto& m, const std::vector<std::string_view>* raw) {
  if (!m.has_graph()) return invalid_model(opt_.source_name + ": the model has no graph");
  KILN_RETURN_IF_ERROR(inliner_.init(m, opt_.source_name));
  ir::Model model;
  model.ir_version = m.ir_version();
  model.producer_name = m.producer_name();
  model.producer_version = m.producer_version();
  model.domain = m.domain();
  model.doc = m.doc_string();
  model.model_version = m.model_version();
  for (const auto& kv : m.metadata_props()) {
    // kiln's own records of ZipMap outputs and DictVectorizer and CastMap inputs are written below from the graph;
    // a model's metadata cannot claim them.
    const std::string& key = kv.key();
    if (key.rfind(kZipMapRecord, 0) == 0 || key.rfind(kDictVectorizerRecord, 0) == 0 || key.rfind(kCastMapRecord, 0) == 0)
      continue;
    model.metadata[kv.key()] = kv.value();
  }
  model.graph = std::make_unique<ir::Graph>();
  KILN_RETURN_IF_ERROR(read_opsets(m, model.graph->opsets));
  main_raw_ = raw;  // taken by the first build_graph, the main graph's
  KILN_RETURN_IF_ERROR(build_graph(m.graph(), *model.graph));
  KILN_RETURN_IF_ERROR(zipmap_outputs(*model.graph, model.metadata));
  KILN_RETURN_IF_ERROR(dict_vectorizer_inputs(*model.graph, model.metadata));
  KILN_RETURN_IF_ERROR(cast_map_inputs(*model.graph, model.metadata));
  Status st = ops::infer_graph(*model.graph);
  if (!st.ok()) return st.with_context(opt_.source_name);
  return model;
}

Status Importer::build_graph(const ::onnx::GraphProto& gp, ir::Graph& g) {
  g.name = gp.name();
  const std::string w = where(g);
  std::map<std::string, std::string> defined_by;  // value name → what defines it, for duplicate errors
  auto define = [&](const std::string& name, const std::string& by) -> Status {
    if (name.empty()) return invalid_model(w + ": " + by + " has an empty name");
    auto [it, fresh] = defined_by.emplace(name, by);
    if (!fresh) return invalid_model(w + ": duplicate definition of " + quote(name) + ": by " + it->second + " and by " + by);
    return Status::Ok();
  };

  // Initializers (dense and sparse) are constants. The main graph's large raw_data come from the
  // model's bytes (run()'s `raw`); subgraphs' are in their protos.
  const std::vector<std::string_view>* raw = main_raw_;
  main_raw_ = nullptr;
  for (int k = 0; k < gp.initializer_size(); ++k) {
    const ::onnx::TensorProto& tp = gp.initializer(k);
    const std::string what = "initializer " + quote(tp.name());
    KILN_RETURN_IF_ERROR(define(tp.name(), what));
    const std::string_view aside = raw && static_cast<size_t>(k) < raw->size() ? (*raw)[static_cast<size_t>(k)] : std::string_view();
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(tp, {opt_.base_dir, w + ": " + what}, aside));
    ir::Value* v = g.add_value(tp.name(), ir::Type::tensor(t.dtype(), ir::SymShape::of(t.shape())));
    v->constant = std::move(t);
  }
  for (const auto& sp : gp.sparse_initializer()) {
    const std::string& name = sp.values().name();
    const std::string what = "sparse initializer " + quote(name);
    KILN_RETURN_IF_ERROR(define(name, what));
    KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_sparse(sp, {opt_.base_dir, w + ": " + what}));
    ir::Value* v = g.add_value(name, ir::Type::tensor(t.dtype(), ir::SymShape::of(t.shape())));
    v->constant = std::move(t);
  }

  // Inputs. Before IR 4 initializers were also listed as inputs: those are inputs with a default.
  std::set<std::string> input_names;
  for (const auto& vi : gp.input()) {
    const std::string what = "input " + quote(vi.name());
    if (vi.name().empty()) return invalid_model(w + ": a graph input has an empty name");
    if (!input_names.insert(vi.name()).second) return invalid_model(w + ": input " + quote(vi.name()) + " is listed twice");
    ir::Value* v = g.find_value(vi.name());
    if (!v) {
      KILN_RETURN_IF_ERROR(define(vi.name(), what));
      v = g.add_value(vi.name());
    }
    if (vi.has_type()) {
      KILN_ASSIGN_OR_RETURN(v->type, type_from_proto(vi.type(), w + ": " + what));
    }
    v->is_input = true;
    g.inputs.push_back(v);
  }

  std::map<std::string, const ::onnx::TypeProto*> value_info;
  for (const auto& vi : gp.value_info())
    if (vi.has_type()) value_info[vi.name()] = &vi.type();

  std::vector<FlatNode> flat;
  KILN_RETURN_IF_ERROR(inliner_.expand(gp.node(), w, flat));

  // Pass 1: every node's outputs exist before any input is resolved (so nodes may come in any order,
  // and subgraphs can see every value of their enclosing graphs).
  std::vector<std::string> names(flat.size());
  std::vector<std::vector<ir::Value*>> outs(flat.size());
  for (size_t i = 0; i < flat.size(); ++i) {
    const ::onnx::NodeProto& np = *flat[i].node;
    names[i] = np.name().empty() ? np.op_type() + "_" + std::to_string(i) : np.name();
    const std::string label = node_label(np, names[i]);
    if (np.op_type().empty()) return invalid_model(w + ": node #" + std::to_string(i) + " (" + quote(np.name()) + ") has no op_type");
    for (const auto& o : np.output()) {
      if (o.empty()) {
        outs[i].push_back(nullptr);
        continue;
      }
      KILN_RETURN_IF_ERROR(define(o, label));
      ir::Value* v = g.add_value(o);
      auto vi = value_info.find(o);
      if (vi != value_info.end()) {
        KILN_ASSIGN_OR_RETURN(v->type, type_from_proto(*vi->second, w + ": value_info " + quote(o)));
      }
      outs[i].push_back(v);
    }
  }

  // Pass 2: inputs, nodes, attributes (subgraphs included).
  for (size_t i = 0; i < flat.size(); ++i) {
    const ::onnx::NodeProto& np = *flat[i].node;
    const std::string label = w + ": " + node_label(np, names[i]);
    std::vector<ir::Value*> ins;
    for (const auto& in : np.input()) {
      if (in.empty()) {
        ins.push_back(nullptr);
        continue;
      }
      ir::Value* v = resolve(g, in);
      if (!v)
        return invalid_model(label + ": dangling input " + quote(in) +
                             ": no node, graph input or initializer (here or in an enclosing graph) defines it");
      ins.push_back(v);
    }
    const std::string domain = normalize_domain(np.domain());
    ir::Node* n = g.add_node(np.op_type(), domain, std::move(ins), outs[i], names[i]);
    if (flat[i].opsets) {
      auto it = flat[i].opsets->find(domain);
      if (it != flat[i].opsets->end()) n->opset = it->second;
    }
    if (domain.empty() && n->opset == 0)
      return invalid_model(label + ": the model does not import the ai.onnx opset (no opset_import with domain '')");
    for (const auto& a : np.attribute()) {
      if (a.name().empty()) return invalid_model(label + ": an attribute has no name");
      if (n->attrs.count(a.name())) return invalid_model(label + ": attribute " + quote(a.name()) + " is given twice");
      ir::Attribute attr;
      KILN_RETURN_IF_ERROR(convert_attribute(a, g, label + ": attribute " + quote(a.name()), attr));
      n->attrs.emplace(a.name(), std::move(attr));
    }
    KILN_RETURN_IF_ERROR(normalize_legacy_cast(*n, label));
    KILN_RETURN_IF_ERROR(ops::check_arity(*n).with_context(w));
  }

  // Outputs.
  std::set<std::string> output_names;
  for (const auto& vi : gp.output()) {
    if (vi.name().empty()) return invalid_model(w + ": a graph output has an empty name");
    if (!output_names.insert(vi.name()).second)
      return invalid_model(w + ": duplicate graph output " + quote(vi.name()));
    ir::Value* v = resolve(g, vi.name());
    if (!v) return invalid_model(w + ": graph output " + quote(vi.name()) + " is never produced");
    if (vi.has_type() && (v->producer || v->type.kind == ir::Type::Kind::kUnknown ||
                          (v->type.is_tensor() && v->type.dtype == DataType::kUndefined))) {
      KILN_ASSIGN_OR_RETURN(v->type, type_from_proto(vi.type(), w + ": output " + quote(vi.name())));
    }
    v->is_output = true;
    g.outputs.push_back(v);
  }

  KILN_RETURN_IF_ERROR(g.sort().with_context(opt_.source_name));
  KILN_RETURN_IF_ERROR(check_capture_order(g, w));
  KILN_RETURN_IF_ERROR(g.verify().with_context(w));
  return Status::Ok();
}

// A node whose subgraph captures a value must come after that value's producer: the sort only sees
// explicit inputs, so an out-of-order capture is reported here rather than run in the wrong order.
Status Importer::check_capture_order(const ir::Graph& g, const std::string& where) {
  std::map<const ir::Node*, size_t> pos;
  for (size_t i = 0; i < g.nodes().size(); ++i) pos[g.nodes()[i]] = i;
  for (const ir::Node* n : g.nodes())
    for (const auto& [k, a] : n->attrs) {
      std::vector<const ir::Graph*> subs;
      if (a.g) subs.push_back(a.g.get());
      for (const auto& sg : a.graphs) subs.push_back(sg.get());
      for (const ir::Graph* sg : subs)
        for (const ir::Value* c : sg->captures) {
          const ir::Value* pv = g.find_value(c->name);
          if (pv && pv->producer && pos.at(pv->producer) >= pos.at(n))
            return invalid_model(where + ": " + n->describe() + ": its subgraph uses " + quote(c->name) +
                                 ", which is produced by " + pv->producer->describe() +
                                 (pv->producer == n ? " itself" : " after it"));
        }
    }
  return Status::Ok();
}

Expected<std::shared_ptr<ir::Graph>> Importer::build_subgraph(const ::onnx::GraphProto& gp, ir::Graph& parent,
                                                               const std::string& where) {
  auto sg = std::make_shared<ir::Graph>();
  sg->parent = &parent;
  sg->opsets = parent.opsets;
  Status st = build_graph(gp, *sg);
  if (!st.ok()) return st.code() == StatusCode::kInvalidModel || st.code() == StatusCode::kUnsupported
                           ? Status(st.code(), st.message() + " (in " + where + ")")
                           : st;
  return sg;
}

Status Importer::convert_attribute(const ::onnx::AttributeProto& a, ir::Graph& g, const std::string& where,
                                   ir::Attribute& out) {
  using AP = ::onnx::AttributeProto;
  if (!a.ref_attr_name().empty())
    return invalid_model(where + ": refers to " + quote(a.ref_attr_name()) +
                         ", but attribute references are only valid inside a function");
  AP::AttributeType type = a.type();
  if (type == AP::UNDEFINED) {  // very old writers leave the type out; infer it from the field set
    if (a.has_f()) type = AP::FLOAT;
    else if (a.has_i()) type = AP::INT;
    else if (a.has_s()) type = AP::STRING;
    else if (a.has_t()) type = AP::TENSOR;
    else if (a.has_g()) type = AP::GRAPH;
    else if (a.has_sparse_tensor()) type = AP::SPARSE_TENSOR;
    else if (a.has_tp()) type = AP::TYPE_PROTO;
    else if (a.floats_size()) type = AP::FLOATS;
    else if (a.ints_size()) type = AP::INTS;
    else if (a.strings_size()) type = AP::STRINGS;
    else if (a.tensors_size()) type = AP::TENSORS;
    else if (a.graphs_size()) type = AP::GRAPHS;
    else if (a.sparse_tensors_size()) type = AP::SPARSE_TENSORS;
    else if (a.type_protos_size()) type = AP::TYPE_PROTOS;
    else return invalid_model(where + ": has no type and no value");
  }
  const TensorSource src{opt_.base_dir, where};
  using K = ir::Attribute::Kind;
  switch (type) {
    case AP::FLOAT: out.kind = K::kFloat; out.f = a.f(); return Status::Ok();
    case AP::INT: out.kind = K::kInt; out.i = a.i(); return Status::Ok();
    case AP::STRING: out.kind = K::kString; out.s = a.s(); return Status::Ok();
    case AP::FLOATS: out.kind = K::kFloats; out.floats.assign(a.floats().begin(), a.floats().end()); return Status::Ok();
    case AP::INTS: out.kind = K::kInts; out.ints.assign(a.ints().begin(), a.ints().end()); return Status::Ok();
    case AP::STRINGS: out.kind = K::kStrings; out.strings.assign(a.strings().begin(), a.strings().end()); return Status::Ok();
    case AP::TENSOR: {
      out.kind = K::kTensor;
      if (!a.has_t()) return invalid_model(where + ": tensor attribute has no tensor");
      KILN_ASSIGN_OR_RETURN(out.t, tensor_from_proto(a.t(), src));
      return Status::Ok();
    }
    case AP::SPARSE_TENSOR: {
      out.kind = K::kSparseTensor;  // densified into `t`
      if (!a.has_sparse_tensor()) return invalid_model(where + ": sparse tensor attribute has no tensor");
      KILN_ASSIGN_OR_RETURN(out.t, tensor_from_sparse(a.sparse_tensor(), src));
      return Status::Ok();
    }
    case AP::TENSORS:
      out.kind = K::kTensors;
      for (int i = 0; i < a.tensors_size(); ++i) {
        KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_proto(a.tensors(i), {opt_.base_dir, where + "[" + std::to_string(i) + "]"}));
        out.tensors.push_back(std::move(t));
      }
      return Status::Ok();
    case AP::SPARSE_TENSORS:  // no list-of-sparse kind in the IR: densified into `tensors`
      out.kind = K::kTensors;
      for (int i = 0; i < a.sparse_tensors_size(); ++i) {
        KILN_ASSIGN_OR_RETURN(Tensor t, tensor_from_sparse(a.sparse_tensors(i), {opt_.base_dir, where + "[" + std::to_string(i) + "]"}));
        out.tensors.push_back(std::move(t));
      }
      return Status::Ok();
    case AP::GRAPH: {
      out.kind = K::kGraph;
      if (!a.has_g()) return invalid_model(where + ": graph attribute has no graph");
      KILN_ASSIGN_OR_RETURN(out.g, build_subgraph(a.g(), g, where));
      return Status::Ok();
    }
    case AP::GRAPHS:
      out.kind = K::kGraphs;
      for (const auto& sgp : a.graphs()) {
        KILN_ASSIGN_OR_RETURN(auto sg, build_subgraph(sgp, g, where));
        out.graphs.push_back(std::move(sg));
      }
      return Status::Ok();
    case AP::TYPE_PROTO: {
      out.kind = K::kTypeProto;
      KILN_ASSIGN_OR_RETURN(ir::Type t, type_from_proto(a.tp(), where));
      out.types.push_back(std::move(t));
      return Status::Ok();
    }
    case AP::TYPE_PROTOS:
      out.kind = K::kTypeProtos;
      for (const auto& tp : a.type_protos()) {
        KILN_ASSIGN_OR_RETURN(ir::Type t, type_from_proto(tp, where));
        out.types.push_back(std::move(t));
      }
      return Status::Ok();
    default:
      return invalid_model(where + ": unknown attribute type " + std::to_string(static_cast<int>(type)));
  }
}

}  // namespace

Expected<ir::Model> import_bytes(std::string_view bytes, const ImportOptions& options) {
  if (bytes.size() > kMaxProtoBytes)
    return invalid_model(options.source_name + ": the model is " + std::to_string(bytes.size()) +
                         " bytes; an ONNX protobuf is limited to 2 GiB (store the weights as external data)");
  // The structure first: a broken one is refused at the offset where it breaks, before protobuf
  // reads (and copies) everything up to it and says only that it failed.
  if (std::string why = model_wire_error(bytes); !why.empty())
    return invalid_model(options.source_name + ": not a valid ONNX model: " + why);
  return guarded("importing " + options.source_name, [&]() -> Expected<ir::Model> {
    ::onnx::ModelProto m;
    // The large weights stay where they are (read once into their tensors below); protobuf parses
    // the rest.
    std::vector<std::string_view> raw;
    const std::string skeleton = model_without_weights(bytes, std::max<size_t>(options.weights_aside_min_bytes, 1), raw);
    const std::string_view parsed = skeleton.empty() ? bytes : std::string_view(skeleton);
    if (!m.ParseFromArray(parsed.data(), static_cast<int>(parsed.size()))) {
      // protobuf says only that it failed; past its nesting limit the user needs to know that.
      const ProtoNesting n = model_proto_nesting(bytes);
      if (n.message_depth > kProtobufNestingLimit) {
        const bool subgraphs = n.subgraph_depth * 3 >= kProtobufNestingLimit - 10;
        return invalid_model(options.source_name + ": the model nests its messages " + std::to_string(n.message_depth) +
                             " deep, past protobuf's limit of " + std::to_string(kProtobufNestingLimit) +
                             " (onnxruntime and onnx.load have the same limit): " +
                             (subgraphs ? "its subgraphs (If/Loop/Scan bodies) are nested " + std::to_string(n.subgraph_depth) +
                                              " levels deep; each level takes 3 messages, so about 31 levels fit "
                                              "(flatten the innermost bodies)"
                                        : std::string("its types (sequence, map or optional inside each other) nest that deep")));
      }
      return invalid_model(options.source_name + ": not a valid ONNX model (protobuf parse failed: the messages' "
                           "structure is sound, so the contents of some field are not what its type needs)");
    }
    Importer importer(options);
    return importer.run(m, raw.empty() ? nullptr : &raw);
  });
}

Expected<ir::Model> import_file(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  // A FIFO would block the open for ever; a directory or device is not a model either (MappedFile
  // refuses them). Mapped, not read: nothing is copied before the structure is checked.
  auto mapped = MappedFile::map(path, "model");
  if (!mapped.ok())
    return mapped.status().code() == StatusCode::kNotFound ? io_error(mapped.status().message()) : mapped.status();
  const std::string_view bytes = mapped->bytes();
  if (bytes.size() > kMaxProtoBytes)
    return invalid_model(p.filename().string() + ": the file is " + std::to_string(bytes.size()) +
                         " bytes; an ONNX protobuf is limited to 2 GiB (store the weights as external data)");

  ImportOptions opt;
  opt.source_name = p.filename().string();
  opt.base_dir = fs::absolute(p, ec).parent_path().string();
  if (ec || opt.base_dir.empty()) opt.base_dir = ".";
  if (std::string why = model_wire_error(bytes); !why.empty())
    return invalid_model(opt.source_name + ": not a valid ONNX model: " + why);  // before hashing it all
  // The file's SHA-256 (the engine's model_hash: what `sha256sum model.onnx` prints) is computed on
  // another thread while the bytes are parsed: for ResNet-50 (100 MB) it was a quarter of the build.
  // Not for a small file (a thread costs more than hashing 8 MiB, ~15 ms), nor when the build was given
  // one thread (BuildOptions::threads, `kiln bench --threads 1`): then the process starts none.
  constexpr size_t kHashAsideBytes = size_t{8} << 20;
  const bool aside = bytes.size() >= kHashAsideBytes && omp_get_max_threads() > 1;
  auto hash = std::async(aside ? std::launch::async : std::launch::deferred,
                         [bytes] { return sha256_hex(bytes.data(), bytes.size()); });
  auto model = import_bytes(bytes, opt);
  std::string digest = hash.get();
  if (!model.ok()) return model.status();
  model->source_path = path;
  model->source_hash = std::move(digest);
  return std::move(model).value();
}

}  // namespace kiln::onnx
