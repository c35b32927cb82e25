// engine/serialize.cpp — the engine file: FlatBuffers schema engine.fbs, verified on load.
//
// The file holds the optimized graph (weights included) and the whole lowered plan: values with
// their devices, the steps with their kernels, tactics, buffers and release lists, and the build-time
// liveness. Loading checks the plan against the graph, instantiates each step's kernel from its
// registry row (the kernel's prepare) and uploads the weights device steps read: no pass, no
// placement, no memory planning runs (subgraph bodies of If/Loop/Scan are still lowered when their
// kernels are created).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/backend.h"
#include "engine/engine_file.h"
#include "engine/engine_generated.h"
#include "ir/host_memory.h"
#include "ops/op_table.h"
#include "util/checksum.h"
#include "util/guard.h"
#include "util/log.h"

namespace kiln {
namespace {

namespace fb = kiln::fb;
using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

// Weights are stored at this alignment (FlatBuffers' largest: 32; debug builds assert it) so that
// loading can use them in place.
constexpr size_t kWeightAlign = 32;
// After the FlatBuffer: "KILNSUM1", checksum64 of the buffer, the buffer's length.
constexpr char kTrailerMagic[8] = {'K', 'I', 'L', 'N', 'S', 'U', 'M', '1'};
constexpr size_t kTrailerBytes = 24;

// Host memory for the FlatBufferBuilder of write_engine_storage. The builder writes downward from the
// end of its block, so blocks kTrailerBytes longer than asked let the finished buffer take its trailer
// where it lies and become the file's storage without being copied. Blocks are the host allocator's
// (counted against max_memory_bytes, 64-byte aligned, huge pages when large) and the builder keeps
// their ends kWeightAlign-aligned, so the buffer starts at the alignment its weights need to be read
// in place, as in a loaded file.
class StorageAllocator final : public flatbuffers::Allocator {
 public:
  uint8_t* allocate(size_t size) override {
    std::shared_ptr<Storage> st = allocate_host_storage(size + kTrailerBytes, &why);
    if (!st) throw std::bad_alloc();  // write_engine_storage returns `why`
    blocks_.push_back(st);
    return static_cast<uint8_t*>(st->data);
  }
  void deallocate(uint8_t* p, size_t) override {
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it)
      if ((*it)->data == p) {
        blocks_.erase(it);
        return;
      }
  }
  // The block [p, p + bytes) lies in (null if none).
  std::shared_ptr<Storage> block_of(const uint8_t* p, size_t bytes) const {
    for (const auto& st : blocks_) {
      const auto* base = static_cast<const uint8_t*>(st->data);
      if (p >= base && p + bytes <= base + st->bytes) return st;
    }
    return nullptr;
  }
  std::string why;  // why the last allocation failed

 private:
  std::vector<std::shared_ptr<Storage>> blocks_;
};

// ---------------------------------------------------------------- writing

class Writer {
 public:
  // Sized for the weights up front: the builder grows by copying everything it holds, which for a
  // 100 MB model was seven copies of the weights. With an allocator (not owned), its blocks' ends
  // are kept kWeightAlign-aligned.
  explicit Writer(size_t expected_bytes = 0, flatbuffers::Allocator* allocator = nullptr)
      : b(std::max<size_t>(size_t{1} << 16, expected_bytes + (size_t{1} << 20)), allocator, false,
          allocator ? kWeightAlign : flatbuffers::AlignOf<flatbuffers::largest_scalar_t>()) {}
  FlatBufferBuilder b;

  Offset<fb::TypeDesc> type(const ir::Type& t) {
    std::vector<Offset<fb::Dim>> dims;
    for (const ir::Dim& d : t.shape.dims) dims.push_back(fb::CreateDim(b, d.value, b.CreateString(d.symbol)));
    auto dv = b.CreateVector(dims);
    Offset<fb::TypeDesc> elem = t.elem ? type(*t.elem) : 0;
    return fb::CreateTypeDesc(b, static_cast<int8_t>(t.kind), static_cast<int32_t>(t.dtype), t.shape.known, dv, elem,
                              static_cast<int32_t>(t.key_dtype));
  }

  Offset<fb::TensorData> tensor(const Tensor& t) {
    auto shape = b.CreateVector(t.shape());
    if (t.dtype() == DataType::kString) {
      std::vector<Offset<flatbuffers::String>> s;
      for (int64_t i = 0; i < t.numel(); ++i) s.push_back(b.CreateString(t.data<std::string>()[i]));
      return fb::CreateTensorData(b, static_cast<int32_t>(t.dtype()), shape, 0, b.CreateVector(s));
    }
    b.ForceVectorAlignment(t.nbytes(), 1, kWeightAlign);
    auto data = b.CreateVector(static_cast<const uint8_t*>(t.raw()), t.nbytes());
    return fb::CreateTensorData(b, static_cast<int32_t>(t.dtype()), shape, data);
  }

  Offset<fb::Attr> attr(const std::string& name, const ir::Attribute& a) {
    auto n = b.CreateString(name);
    auto s = b.CreateString(a.s);
    Offset<fb::TensorData> t = a.t.defined() && a.kind == ir::Attribute::Kind::kTensor ? tensor(a.t) : 0;
    if (a.kind == ir::Attribute::Kind::kSparseTensor && a.t.defined()) t = tensor(a.t);
    Offset<fb::GraphDesc> g = a.g ? graph(*a.g) : 0;
    auto floats = b.CreateVector(a.floats);
    auto ints = b.CreateVector(a.ints);
    auto strings = b.CreateVectorOfStrings(a.strings);
    std::vector<Offset<fb::TensorData>> ts;
    for (const Tensor& x : a.tensors) ts.push_back(tensor(x));
    auto tv = b.CreateVector(ts);
    std::vector<Offset<fb::GraphDesc>> gs;
    for (const auto& x : a.graphs) gs.push_back(graph(*x));
    auto gv = b.CreateVector(gs);
    std::vector<Offset<fb::TypeDesc>> ty;
    for (const ir::Type& x : a.types) ty.push_back(type(x));
    auto tyv = b.CreateVector(ty);
    return fb::CreateAttr(b, n, static_cast<int8_t>(a.kind), a.f, a.i, s, t, g, floats, ints, strings, tv, gv, tyv);
  }

  Offset<fb::GraphDesc> graph(const ir::Graph& g) {
    std::map<const ir::Value*, int> index;
    std::vector<Offset<fb::ValueDesc>> values;
    for (const ir::Value* v : g.values()) {
      index[v] = static_cast<int>(values.size());
      auto name = b.CreateString(v->name);
      auto ty = type(v->type);
      Offset<fb::TensorData> c = v->constant ? tensor(*v->constant) : 0;
      values.push_back(fb::CreateValueDesc(b, name, ty, c, v->is_input, v->is_output, v->is_capture));
    }
    std::vector<Offset<fb::NodeDesc>> nodes;
    for (const ir::Node* n : g.nodes()) {
      std::vector<int32_t> ins, outs;
      for (const ir::Value* v : n->inputs) ins.push_back(v ? index.at(v) : -1);
      for (const ir::Value* v : n->outputs) outs.push_back(v ? index.at(v) : -1);
      std::vector<Offset<fb::Attr>> attrs;
      for (const auto& [key, a] : n->attrs) attrs.push_back(attr(key, a));
      // The kernel each node runs is recorded by the plan (PlanStep), not here.
      nodes.push_back(fb::CreateNodeDesc(b, b.CreateString(n->name), b.CreateString(n->op_type), b.CreateString(n->domain),
                                         n->opset, b.CreateVector(ins), b.CreateVector(outs), b.CreateVector(attrs)));
    }
    std::vector<Offset<fb::Meta>> opsets;
    for (const auto& [d, v] : g.opsets) opsets.push_back(fb::CreateMeta(b, b.CreateString(d), b.CreateString(std::to_string(v))));
    auto idx = [&](const std::vector<ir::Value*>& vs) {
      std::vector<int32_t> r;
      for (const ir::Value* v : vs) r.push_back(index.at(v));
      return b.CreateVector(r);
    };
    auto vv = b.CreateVector(values);
    auto nv = b.CreateVector(nodes);
    auto ov = b.CreateVector(opsets);
    auto iv = idx(g.inputs), outv = idx(g.outputs), cv = idx(g.captures);
    return fb::CreateGraphDesc(b, b.CreateString(g.name), ov, vv, nv, iv, outv, cv);
  }
};

Offset<fb::PlanDesc> write_plan(Writer& w, const CompiledGraph& plan) {
  auto& b = w.b;
  std::vector<Offset<fb::PlanValue>> values;
  for (const PlannedValue& pv : plan.values)
    values.push_back(fb::CreatePlanValue(b, b.CreateString(pv.name), w.type(pv.type), static_cast<int8_t>(pv.device.type),
                                         pv.copy_of, pv.offset, pv.bytes));
  std::vector<Offset<fb::PlanStep>> steps;
  for (const Step& s : plan.steps) {
    steps.push_back(fb::CreatePlanStep(b, static_cast<int8_t>(s.kind == Step::Kind::kCopy ? 1 : 0), s.node,
                                       b.CreateString(s.kernel_name), 0, static_cast<int8_t>(s.device), b.CreateVector(s.in),
                                       b.CreateVector(s.out), b.CreateVector(s.implicit_in), b.CreateVector(s.release),
                                       s.data_dependent, s.sync_after,
                                       s.tactics.empty() ? 0 : b.CreateVectorOfStrings(s.tactics),
                                       s.tactic_ms.empty() ? 0 : b.CreateVector(s.tactic_ms),
                                       s.why_host.empty() ? 0 : b.CreateString(s.why_host)));
  }
  std::vector<Offset<fb::NameIndex>> names;
  for (const auto& [name, i] : plan.by_name) names.push_back(fb::CreateNameIndex(b, b.CreateString(name), i));
  std::vector<uint64_t> arena(plan.arena_bytes, plan.arena_bytes + 2);
  auto vv = b.CreateVector(values);
  auto sv = b.CreateVector(steps);
  auto iv = b.CreateVector(plan.inputs), ov = b.CreateVector(plan.outputs), cv = b.CreateVector(plan.captures);
  auto nv = b.CreateVector(names);
  auto fd = b.CreateVector(plan.first_def), lu = b.CreateVector(plan.last_use);
  auto av = b.CreateVector(arena);
  return fb::CreatePlanDesc(b, vv, sv, iv, ov, cv, nv, fd, lu, av);
}

// ---------------------------------------------------------------- reading

Status bad(const std::string& what) { return invalid_model("engine file is corrupt: " + what); }

template <typename V>
size_t vsize(const V* v) { return v ? v->size() : 0; }

// Element i of a vector of 8-byte scalars ([long], [ulong], [double]). The FlatBuffers verifier checks
// only the 4-byte alignment of a vector's length field, so in a damaged or hostile file these elements
// can sit at an address that is 4 mod 8, where Vector::Get would be a misaligned load (undefined
// behaviour; found by fuzz_engine). Copy the bytes instead; the format is little-endian, as the hosts.
template <typename T>
T scalar_at(const flatbuffers::Vector<T>* v, size_t i) {
  static_assert(std::is_arithmetic_v<T>);
  T x;
  std::memcpy(&x, v->Data() + i * sizeof(T), sizeof(T));
  return x;
}
template <typename T>
std::vector<T> scalars(const flatbuffers::Vector<T>* v) {
  std::vector<T> r(vsize(v));
  if (!r.empty()) std::memcpy(r.data(), v->Data(), r.size() * sizeof(T));
  return r;
}

Expected<ir::Type> read_type(const fb::TypeDesc* t, int depth = 0) {
  ir::Type r;
  if (!t) return r;
  if (depth > 16) return bad("type nesting too deep");
  if (t->kind() < 0 || t->kind() > static_cast<int>(ir::Type::Kind::kUnknown)) return bad("invalid type kind");
  r.kind = static_cast<ir::Type::Kind>(t->kind());
  if (t->dtype() != 0 && !dtype_is_valid(t->dtype())) return bad("invalid dtype " + std::to_string(t->dtype()));
  r.dtype = static_cast<DataType>(t->dtype());
  r.key_dtype = static_cast<DataType>(dtype_is_valid(t->key_dtype()) ? t->key_dtype() : 0);
  r.shape.known = t->shape_known();
  for (size_t i = 0; i < vsize(t->dims()); ++i) {
    const fb::Dim* d = t->dims()->Get(static_cast<flatbuffers::uoffset_t>(i));
    ir::Dim dim;
    dim.value = d->value();
    if (d->symbol()) dim.symbol = d->symbol()->str();
    r.shape.dims.push_back(dim);
  }
  if (t->elem()) {
    KILN_ASSIGN_OR_RETURN(ir::Type e, read_type(t->elem(), depth + 1));
    r.elem = std::make_shared<ir::Type>(std::move(e));
  }
  return r;
}

// A tensor of the engine file `file`. Weights whose bytes are suitably aligned are views into it (no
// copy: the file's storage, an mmap of it for Engine::load, stays alive as long as any of them).
Expected<Tensor> read_tensor(const fb::TensorData* t, const std::shared_ptr<Storage>& file) {
  if (!t) return bad("missing tensor");
  if (!dtype_is_valid(t->dtype())) return bad("invalid tensor dtype " + std::to_string(t->dtype()));
  const DataType dt = static_cast<DataType>(t->dtype());
  Shape shape;
  int64_t numel = 1;
  for (size_t i = 0; i < vsize(t->shape()); ++i) {
    const int64_t d = scalar_at(t->shape(), i);
    if (d < 0 || (d > 0 && numel > (int64_t{1} << 40) / d)) return bad("invalid tensor shape");
    numel *= d;
    shape.push_back(d);
  }
  if (dt == DataType::kString) {
    if (static_cast<int64_t>(vsize(t->strings())) != numel) return bad("string tensor size mismatch");
    Tensor r = Tensor::empty(dt, shape);
    for (int64_t i = 0; i < numel; ++i) r.data<std::string>()[i] = t->strings()->Get(static_cast<flatbuffers::uoffset_t>(i))->str();
    return r;
  }
  const size_t bytes = static_cast<size_t>(numel) * dtype_size(dt);
  if (vsize(t->data()) != bytes) return bad("tensor data has " + std::to_string(vsize(t->data())) + " bytes, shape needs " + std::to_string(bytes));
  // A bool is one byte that must be 0 or 1 (any other byte read as a C++ bool is undefined): bool
  // tensors are always copied and normalized, never viewed.
  if (file && bytes && dt != DataType::kBool) {
    const auto* base = static_cast<const uint8_t*>(file->data);
    const uint8_t* p = t->data()->data();
    const size_t align = std::max<size_t>(dtype_size(dt), 16);
    if (p >= base && p + bytes <= base + file->bytes && reinterpret_cast<uintptr_t>(p) % align == 0)
      return Tensor::view(file, static_cast<size_t>(p - base), dt, shape);
  }
  // Uninitialized memory (the copy writes every byte): zero-filling 100 MB of weights first would
  // double the load time.
  KILN_ASSIGN_OR_RETURN(auto storage, cpu_backend().allocate(bytes));
  Tensor r = Tensor::with_storage(dt, shape, storage);
  if (bytes) std::memcpy(r.raw(), t->data()->data(), bytes);
  if (dt == DataType::kBool) {
    auto* b = static_cast<uint8_t*>(r.raw());
    for (size_t i = 0; i < bytes; ++i) b[i] = b[i] != 0;
  }
  return r;
}

Expected<std::unique_ptr<ir::Graph>> read_graph(const fb::GraphDesc* gd, ir::Graph* parent, int depth,
                                                const std::shared_ptr<Storage>& file);

// A weight must be what its value's type says: shape functions and the planner read the type, kernels
// read the tensor. (The byte count already matched dtype x shape in read_tensor; the values themselves
// cannot be checked: any bytes are some weight.)
Status check_weight_type(const ir::Value& v) {
  const ir::Type& t = v.type;
  const Tensor& w = *v.constant;
  const std::string what = "weight '" + v.name + "' is stored as " + std::string(dtype_name(w.dtype())) + shape_to_string(w.shape()) +
                           " but its value's type is " + t.to_string();
  if (t.kind == ir::Type::Kind::kUnknown) return Status::Ok();
  if (!t.is_tensor()) return bad(what);
  if (t.dtype != DataType::kUndefined && t.dtype != w.dtype()) return bad(what);
  if (!t.shape.known) return Status::Ok();
  if (t.shape.rank() != w.rank()) return bad(what);
  for (int i = 0; i < w.rank(); ++i)
    if (t.shape.dims[i].is_static() && t.shape.dims[i].value != w.dim(i)) return bad(what);
  return Status::Ok();
}

Expected<ir::Attribute> read_attr(const fb::Attr* a, ir::Graph* owner, int depth, const std::shared_ptr<Storage>& file) {
  ir::Attribute r;
  if (a->kind() < 0 || a->kind() > static_cast<int>(ir::Attribute::Kind::kSparseTensor)) return bad("invalid attribute kind");
  r.kind = static_cast<ir::Attribute::Kind>(a->kind());
  r.f = a->f();
  r.i = a->i();
  if (a->s()) r.s = a->s()->str();
  if (a->t()) {KILN_ASSIGN_OR_RETURN(r.t, read_tensor(a->t(), file));}
  if (a->g()) {
    KILN_ASSIGN_OR_RETURN(auto g, read_graph(a->g(), owner, depth + 1, file));
    r.g = std::shared_ptr<ir::Graph>(std::move(g));
  }
  if (a->floats()) r.floats.assign(a->floats()->begin(), a->floats()->end());
  r.ints = scalars(a->ints());
  for (size_t i = 0; i < vsize(a->strings()); ++i) r.strings.push_back(a->strings()->Get(static_cast<flatbuffers::uoffset_t>(i))->str());
  for (size_t i = 0; i < vsize(a->tensors()); ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor t, read_tensor(a->tensors()->Get(static_cast<flatbuffers::uoffset_t>(i)), file));
    r.tensors.push_back(t);
  }
  for (size_t i = 0; i < vsize(a->graphs()); ++i) {
    KILN_ASSIGN_OR_RETURN(auto g, read_graph(a->graphs()->Get(static_cast<flatbuffers::uoffset_t>(i)), owner, depth + 1, file));
    r.graphs.push_back(std::shared_ptr<ir::Graph>(std::move(g)));
  }
  for (size_t i = 0; i < vsize(a->types()); ++i) {
    KILN_ASSIGN_OR_RETURN(ir::Type t, read_type(a->types()->Get(static_cast<flatbuffers::uoffset_t>(i))));
    r.types.push_back(std::move(t));
  }
  return r;
}

Expected<std::unique_ptr<ir::Graph>> read_graph(const fb::GraphDesc* gd, ir::Graph* parent, int depth,
                                                const std::shared_ptr<Storage>& file) {
  if (!gd) return bad("missing graph");
  if (depth > 32) return bad("subgraphs nested too deep");
  auto g = std::make_unique<ir::Graph>();
  g->parent = parent;
  if (gd->name()) g->name = gd->name()->str();
  for (size_t i = 0; i < vsize(gd->opsets()); ++i) {
    const fb::Meta* m = gd->opsets()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (!m->key() || !m->value()) return bad("opset entry");
    g->opsets[m->key()->str()] = std::atoi(m->value()->c_str());
  }
  std::vector<ir::Value*> values;
  for (size_t i = 0; i < vsize(gd->values()); ++i) {
    const fb::ValueDesc* vd = gd->values()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (!vd->name()) return bad("value without a name");
    if (g->find_value(vd->name()->str())) return bad("duplicate value '" + vd->name()->str() + "'");
    KILN_ASSIGN_OR_RETURN(ir::Type t, read_type(vd->type()));
    ir::Value* v = g->add_value(vd->name()->str(), std::move(t));
    v->is_input = vd->is_input();
    v->is_output = vd->is_output();
    v->is_capture = vd->is_capture();
    if (vd->constant()) {
      KILN_ASSIGN_OR_RETURN(v->constant, read_tensor(vd->constant(), file));
      if (!v->is_input) KILN_RETURN_IF_ERROR(check_weight_type(*v));
    }
    values.push_back(v);
  }
  auto value_at = [&](int32_t i, ir::Value** out) -> Status {
    if (i == -1) { *out = nullptr; return Status::Ok(); }
    if (i < 0 || static_cast<size_t>(i) >= values.size()) return bad("value index " + std::to_string(i) + " out of range");
    *out = values[static_cast<size_t>(i)];
    return Status::Ok();
  };
  for (size_t k = 0; k < vsize(gd->nodes()); ++k) {
    const fb::NodeDesc* nd = gd->nodes()->Get(static_cast<flatbuffers::uoffset_t>(k));
    if (!nd->op_type()) return bad("node without an op type");
    std::vector<ir::Value*> ins, outs;
    for (size_t i = 0; i < vsize(nd->inputs()); ++i) {
      ir::Value* v;
      KILN_RETURN_IF_ERROR(value_at(nd->inputs()->Get(static_cast<flatbuffers::uoffset_t>(i)), &v));
      ins.push_back(v);
    }
    for (size_t i = 0; i < vsize(nd->outputs()); ++i) {
      ir::Value* v;
      KILN_RETURN_IF_ERROR(value_at(nd->outputs()->Get(static_cast<flatbuffers::uoffset_t>(i)), &v));
      if (v && v->producer) return bad("value '" + v->name + "' produced twice");
      outs.push_back(v);
    }
    ir::Node* n = g->add_node(nd->op_type()->str(), nd->domain() ? nd->domain()->str() : "", ins, outs,
                              nd->name() ? nd->name()->str() : "");
    n->opset = nd->opset();
    for (size_t i = 0; i < vsize(nd->attrs()); ++i) {
      const fb::Attr* a = nd->attrs()->Get(static_cast<flatbuffers::uoffset_t>(i));
      if (!a->name()) return bad("attribute without a name");
      KILN_ASSIGN_OR_RETURN(ir::Attribute attr, read_attr(a, g.get(), depth, file));
      n->attrs[a->name()->str()] = std::move(attr);
    }
    Status arity = ops::check_arity(*n);
    if (!arity.ok()) return bad(arity.message());
    // What the importer checks of every node of a model, checked again: a file re-sealed after an edit
    // passes the checksum, and kernels parse attributes trusting these checks (a DepthToSpace blocksize
    // of 2^40, MaxUnpool pads that make no output). Bodies of subgraphs were checked as they were read.
    Status checked = ops::check_stored_node(*n);
    if (!checked.ok()) return bad(checked.message());
  }
  auto list = [&](const flatbuffers::Vector<int32_t>* v, std::vector<ir::Value*>& out) -> Status {
    for (size_t i = 0; i < vsize(v); ++i) {
      ir::Value* x;
      KILN_RETURN_IF_ERROR(value_at(v->Get(static_cast<flatbuffers::uoffset_t>(i)), &x));
      if (!x) return bad("missing graph input/output");
      out.push_back(x);
    }
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(list(gd->inputs(), g->inputs));
  KILN_RETURN_IF_ERROR(list(gd->outputs(), g->outputs));
  KILN_RETURN_IF_ERROR(list(gd->captures(), g->captures));
  Status st = g->verify();
  if (!st.ok()) return bad(st.message());
  return g;
}

// Rebuilds the plan stored in the file, checking every index against the graph (the file is
// untrusted), then creates each step's kernel from its recorded registry row (instantiate_kernels).
Expected<std::shared_ptr<CompiledGraph>> read_plan(const fb::PlanDesc* pd, std::shared_ptr<ir::Graph> graph) {
  if (!pd) return bad("missing plan");
  auto cg = std::make_shared<CompiledGraph>();
  cg->graph = graph;
  const std::vector<ir::Value*> gvals = graph->values();
  const std::vector<ir::Node*>& gnodes = graph->nodes();
  cg->nodes.assign(gnodes.begin(), gnodes.end());
  std::map<const ir::Value*, int> gindex;
  for (size_t i = 0; i < gvals.size(); ++i) gindex[gvals[i]] = static_cast<int>(i);
  const size_t nv = vsize(pd->values());
  if (nv < gvals.size() || nv > gvals.size() * 4 + 16) return bad("plan values do not match the graph");
  for (size_t i = 0; i < nv; ++i) {
    const fb::PlanValue* v = pd->values()->Get(static_cast<flatbuffers::uoffset_t>(i));
    PlannedValue pv;
    if (v->name()) pv.name = v->name()->str();
    KILN_ASSIGN_OR_RETURN(pv.type, read_type(v->type()));
    if (v->device() != 0 && v->device() != 1) return bad("invalid plan value device");
    pv.device.type = static_cast<DeviceType>(v->device());
    pv.copy_of = v->copy_of();
    pv.offset = v->offset();
    pv.bytes = v->bytes();
    if (i < gvals.size()) {
      if (pv.name != gvals[i]->name || pv.copy_of != -1) return bad("plan value " + std::to_string(i) + " is not graph value '" + gvals[i]->name + "'");
      if (gvals[i]->constant && !gvals[i]->is_input) {
        if (!pv.device.is_cpu()) return bad("a weight placed off the host");
        pv.is_constant = true;
        pv.constant = Slot::of(*gvals[i]->constant);
      }
    } else if (pv.copy_of < 0 || static_cast<size_t>(pv.copy_of) >= i || pv.device == cg->values[pv.copy_of].device) {
      return bad("plan value " + std::to_string(i) + " is not a copy of an earlier value on another device");
    }
    cg->values.push_back(std::move(pv));
  }
  auto index_list = [&](const flatbuffers::Vector<int32_t>* v, std::vector<int>& out, bool allow_missing) -> Status {
    for (size_t i = 0; i < vsize(v); ++i) {
      const int x = v->Get(static_cast<flatbuffers::uoffset_t>(i));
      if ((x == -1 && allow_missing) || (x >= 0 && static_cast<size_t>(x) < nv)) out.push_back(x);
      else return bad("plan value index " + std::to_string(x) + " out of range");
    }
    return Status::Ok();
  };
  // The graph value a plan value stands for (through its copies).
  auto origin = [&](int v) {
    while (v >= 0 && cg->values[v].copy_of >= 0) v = cg->values[v].copy_of;
    return v;
  };
  std::vector<char> node_seen(gnodes.size(), 0);
  for (size_t k = 0; k < vsize(pd->steps()); ++k) {
    const fb::PlanStep* ps = pd->steps()->Get(static_cast<flatbuffers::uoffset_t>(k));
    Step s;
    if (ps->kind() != 0 && ps->kind() != 1) return bad("invalid step kind");
    s.kind = ps->kind() == 1 ? Step::Kind::kCopy : Step::Kind::kKernel;
    if (ps->device() != 0 && ps->device() != 1) return bad("invalid step device");
    s.device = static_cast<DeviceType>(ps->device());
    KILN_ASSIGN_OR_RETURN(Backend * backend, backend_for(s.device));
    s.kernel_name = ps->kernel() ? ps->kernel()->str() : "";
    for (size_t t = 0; t < vsize(ps->tactics()); ++t) {
      const auto* name = ps->tactics()->Get(static_cast<flatbuffers::uoffset_t>(t));
      s.tactics.push_back(name ? name->str() : std::string());
      if (s.tactics.back().size() > 256) return bad("step " + std::to_string(k) + ": tactic name too long");
    }
    s.tactic_ms = scalars(ps->tactic_ms());
    if (ps->why_host()) s.why_host = ps->why_host()->str();
    KILN_RETURN_IF_ERROR(index_list(ps->inputs(), s.in, s.kind == Step::Kind::kKernel));
    KILN_RETURN_IF_ERROR(index_list(ps->outputs(), s.out, s.kind == Step::Kind::kKernel));
    KILN_RETURN_IF_ERROR(index_list(ps->implicit_inputs(), s.implicit_in, false));
    KILN_RETURN_IF_ERROR(index_list(ps->release(), s.release, false));
    s.data_dependent = ps->data_dependent();
    s.sync_after = ps->sync_after();
    if (s.kind == Step::Kind::kCopy) {
      if (s.in.size() != 1 || s.out.size() != 1 || cg->values[s.out[0]].copy_of != s.in[0])
        return bad("copy step " + std::to_string(k) + " does not match its values");
      cg->steps.push_back(std::move(s));
      continue;
    }
    const int ni = ps->node();
    if (ni < 0 || static_cast<size_t>(ni) >= gnodes.size() || node_seen[ni]) return bad("step " + std::to_string(k) + ": bad node index");
    node_seen[ni] = 1;
    const ir::Node& n = *gnodes[ni];
    // Every buffer must be the node's own value (or a device copy of it) on the step's device.
    if (s.in.size() != n.inputs.size() || s.out.size() != n.outputs.size()) return bad(n.describe() + ": step arity differs from the node");
    // The row must exist here, be the node's op's and accept the node, as instantiate_kernels checks
    // again; a file that fails it is corrupt (or, for a missing row, written by another kiln).
    auto row = step_kernel_row(*backend, s, n);
    if (!row.ok()) return row.status().code() == StatusCode::kEngineMismatch ? row.status() : bad(row.status().message());
    const KernelDef* def = *row;
    s.host_inputs = def->host_inputs;
    for (size_t i = 0; i < s.in.size(); ++i) {
      const int want = n.inputs[i] ? gindex.at(n.inputs[i]) : -1;
      if ((s.in[i] < 0 ? -1 : origin(s.in[i])) != want) return bad(n.describe() + ": step input " + std::to_string(i) + " is not the node's");
      // Inputs live on the step's device, except host inputs (host memory) and shape-only inputs (anywhere).
      const int ii = static_cast<int>(i);
      const Device need = def->host_input(ii) ? Device{} : backend->device();
      if (s.in[i] >= 0 && !def->shape_input(ii) && cg->values[s.in[i]].device != need)
        return bad(n.describe() + ": input on another device");
    }
    for (size_t i = 0; i < s.out.size(); ++i) {
      const int want = n.outputs[i] ? gindex.at(n.outputs[i]) : -1;
      if (s.out[i] != want) return bad(n.describe() + ": step output " + std::to_string(i) + " is not the node's");
      if (want >= 0 && cg->values[want].device != backend->device()) return bad(n.describe() + ": output on another device");
    }
    s.node = ni;
    cg->steps.push_back(std::move(s));
  }
  for (size_t i = 0; i < node_seen.size(); ++i)
    if (!node_seen[i]) return bad(gnodes[i]->describe() + " has no step");
  KILN_RETURN_IF_ERROR(index_list(pd->inputs(), cg->inputs, false));
  KILN_RETURN_IF_ERROR(index_list(pd->outputs(), cg->outputs, false));
  KILN_RETURN_IF_ERROR(index_list(pd->captures(), cg->captures, false));
  if (cg->inputs.size() != graph->inputs.size() || cg->outputs.size() != graph->outputs.size())
    return bad("plan inputs/outputs do not match the graph");
  for (size_t i = 0; i < cg->inputs.size(); ++i)
    if (cg->inputs[i] != gindex.at(graph->inputs[i])) return bad("plan input " + std::to_string(i) + " is not the graph's");
  for (size_t i = 0; i < cg->outputs.size(); ++i)
    if (origin(cg->outputs[i]) != gindex.at(graph->outputs[i]) || !cg->values[cg->outputs[i]].device.is_cpu())
      return bad("plan output " + std::to_string(i) + " is not the graph's (on the host)");
  for (size_t i = 0; i < vsize(pd->by_name()); ++i) {
    const fb::NameIndex* e = pd->by_name()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (!e->name() || e->index() < 0 || static_cast<size_t>(e->index()) >= nv) return bad("plan name index");
    cg->by_name[e->name()->str()] = e->index();
  }
  KILN_RETURN_IF_ERROR(index_list(pd->first_def(), cg->first_def, true));
  KILN_RETURN_IF_ERROR(index_list(pd->last_use(), cg->last_use, true));
  // Checked below against the lifetimes the steps imply (sizes and step ranges included).
  if (vsize(pd->arena_bytes()) == 2) {
    cg->arena_bytes[0] = scalar_at(pd->arena_bytes(), 0);
    cg->arena_bytes[1] = scalar_at(pd->arena_bytes(), 1);
  }
  cg->use_arena = true;
  // Weights read on the device are uploaded once, shared by every context.
  for (PlannedValue& pv : cg->values) {
    if (pv.copy_of < 0 || !cg->values[pv.copy_of].is_constant) continue;
    const Slot& src = cg->values[pv.copy_of].constant;
    if (src.kind != Slot::Kind::kTensor) continue;
    KILN_ASSIGN_OR_RETURN(Backend * b, backend_for(pv.device.type));
    KILN_ASSIGN_OR_RETURN(auto storage, b->allocate(src.tensor.nbytes()));
    Tensor d = Tensor::with_storage(src.tensor.dtype(), src.tensor.shape(), storage);
    KILN_RETURN_IF_ERROR(b->copy(src.tensor, d, nullptr));
    pv.is_constant = true;
    pv.constant = Slot::of(d);
  }
  // The file's lifetimes and releases must be the ones its steps imply, and a step may read only values
  // made before it (or there from the start: inputs, captures, weights) and write only values nothing
  // else provides: so no step reads a missing or released buffer, and no two live values share memory.
  {
    const Lifetimes life = derive_lifetimes(*cg);
    if (life.first_def != cg->first_def || life.last_use != cg->last_use) return bad("plan lifetimes differ from its steps");
    std::vector<char> given(nv, 0);
    for (int v : cg->inputs) given[v] = 1;
    for (int v : cg->captures) given[v] = 1;
    for (size_t v = 0; v < nv; ++v)
      if (cg->values[v].is_constant) given[v] = 1;
    for (size_t k = 0; k < cg->steps.size(); ++k) {
      const Step& s = cg->steps[k];
      std::vector<int> rel = s.release, want = life.release[k];
      std::sort(rel.begin(), rel.end());
      std::sort(want.begin(), want.end());
      if (rel != want) return bad("step " + std::to_string(k) + ": its release list differs from its values' lifetimes");
      auto made_before = [&](int v) { return given[v] || (cg->first_def[v] >= 0 && cg->first_def[v] < static_cast<int>(k)); };
      for (int v : s.in)
        if (v >= 0 && !made_before(v)) return bad("step " + std::to_string(k) + " reads a value no earlier step makes");
      for (int v : s.implicit_in)
        if (!made_before(v)) return bad("step " + std::to_string(k) + " reads a value no earlier step makes");
      for (int v : s.out)
        if (v >= 0 && (given[v] || cg->first_def[v] != static_cast<int>(k)))
          return bad("step " + std::to_string(k) + " writes a value that is given or made elsewhere");
    }
    for (int v : cg->outputs)
      if (!given[v] && cg->first_def[v] < 0) return bad("a plan output is never made");
  }
  // Offsets recorded at build time must fit the recorded arena (frames without a shape plan use them).
  for (const PlannedValue& pv : cg->values)
    if (size_t end; pv.offset >= 0 && (__builtin_add_overflow(static_cast<size_t>(pv.offset), pv.bytes, &end) ||
                                       end > cg->arena_bytes[static_cast<int>(pv.device.type)]))
      return bad("plan offset outside the arena");
  // Every check passed: the plan is sound as data. Its kernels come from it as after lowering.
  auto subgraphs = make_subgraph_compiler();
  KILN_RETURN_IF_ERROR(instantiate_kernels(*cg, subgraphs.get()));
  return cg;
}

}  // namespace

bool looks_like_engine(const std::string& head) {
  return head.size() >= 8 && std::memcmp(head.data() + 4, "KILN", 4) == 0;
}

// The FlatBuffer of `e`, finished in `w` (the trailer is the caller's: seal).
static Status build_engine_buffer(Writer& w, const EngineFile& e) {
  if (!e.graph || !e.plan) return invalid_argument("an engine file needs a graph and its plan (an engine read for a rebuild has none)");
  auto graph = w.graph(*e.graph);
  auto plan = write_plan(w, *e.plan);
  std::vector<Offset<fb::Meta>> meta;
  for (const auto& [k, v] : e.meta) meta.push_back(fb::CreateMeta(w.b, w.b.CreateString(k), w.b.CreateString(v)));
  auto mv = w.b.CreateVector(meta);
  std::vector<Offset<fb::ProfileDesc>> profiles;
  for (const ShapeProfile& p : e.profiles) {
    std::vector<Offset<fb::ProfileDim>> dims;
    for (const auto& [name, opt] : p.opt)
      dims.push_back(fb::CreateProfileDim(w.b, w.b.CreateString(name), w.b.CreateVector(p.min.at(name)), w.b.CreateVector(opt),
                                          w.b.CreateVector(p.max.at(name))));
    profiles.push_back(fb::CreateProfileDesc(w.b, w.b.CreateVector(dims)));
  }
  auto pv = profiles.empty() ? 0 : w.b.CreateVector(profiles);
  std::vector<Offset<fb::PluginOpDesc>> plugin_ops;
  for (const plugins::OpRecord& r : e.plugins)
    plugin_ops.push_back(fb::CreatePluginOpDesc(w.b, w.b.CreateString(r.domain), w.b.CreateString(r.op_type),
                                                w.b.CreateString(r.library), w.b.CreateString(r.plugin),
                                                w.b.CreateString(r.version), w.b.CreateString(r.abi_hash),
                                                w.b.CreateString(r.library_hash)));
  auto plv = plugin_ops.empty() ? 0 : w.b.CreateVector(plugin_ops);
  const uint32_t format = plugin_ops.empty() ? kEngineFormatVersion : kEngineFormatWithPlugins;
  auto root = fb::CreateEngineFile(w.b, format, mv, graph, plan, pv, plv);
  w.b.Finish(root, fb::EngineFileIdentifier());
  return Status::Ok();
}

// A writer sized for the weights of `e`'s graph.
static size_t expected_engine_bytes(const EngineFile& e) {
  size_t weight_bytes = 0;
  if (e.graph)
    for (const ir::Value* v : e.graph->values())
      if (v->constant) weight_bytes += v->constant->nbytes() + 64;
  return weight_bytes;
}

// The trailer after the buffer's `len` bytes at `buf`: magic, checksum of those bytes, and that
// length (little-endian), kTrailerBytes in all.
static void seal(uint8_t* buf, uint64_t len) {
  const uint64_t sum = checksum64(buf, len);
  std::memcpy(buf + len, kTrailerMagic, 8);
  std::memcpy(buf + len + 8, &sum, 8);
  std::memcpy(buf + len + 16, &len, 8);
}

Expected<std::string> write_engine_file(const EngineFile& e) {
  Writer w(expected_engine_bytes(e));
  KILN_RETURN_IF_ERROR(build_engine_buffer(w, e));
  std::string out;
  out.reserve(w.b.GetSize() + kTrailerBytes);  // the trailer too: no second copy of the weights to grow into
  out.assign(reinterpret_cast<const char*>(w.b.GetBufferPointer()), w.b.GetSize());
  out.append(kTrailerBytes, '\0');
  seal(reinterpret_cast<uint8_t*>(out.data()), w.b.GetSize());
  return out;
}

Expected<std::shared_ptr<Storage>> write_engine_storage(const EngineFile& e) {
  StorageAllocator blocks;  // outlives the builder, which gives its blocks back to it
  try {
    Writer w(expected_engine_bytes(e), &blocks);
    KILN_RETURN_IF_ERROR(build_engine_buffer(w, e));
    auto* buf = w.b.GetBufferPointer();
    const size_t len = w.b.GetSize();
    if (len + kTrailerBytes > max_tensor_bytes())
      return runtime_error("allocating " + std::to_string(len + kTrailerBytes) + " bytes of host memory: over the limit of " +
                           std::to_string(max_tensor_bytes()) + " (max_tensor_bytes)");
    std::shared_ptr<Storage> block = blocks.block_of(buf, len + kTrailerBytes);
    if (!block) return internal_error("the engine file's buffer is not where its builder allocated it");
    seal(buf, len);
    auto file = std::make_shared<Storage>();
    file->data = buf;
    file->bytes = len + kTrailerBytes;
    file->release = [block](void*) {};  // the block goes with the file
    return file;
  } catch (const std::bad_alloc&) {
    return runtime_error(blocks.why.empty() ? "out of host memory writing the engine file" : blocks.why);
  }
}

bool engine_file_intact(const Storage& file) {
  const auto* buf = static_cast<const uint8_t*>(file.data);
  if (!buf || file.bytes < kTrailerBytes + 8 || std::memcmp(buf + file.bytes - kTrailerBytes, kTrailerMagic, 8) != 0) return false;
  uint64_t stored, len;
  std::memcpy(&stored, buf + file.bytes - 16, 8);
  std::memcpy(&len, buf + file.bytes - 8, 8);
  return len == file.bytes - kTrailerBytes && checksum64(buf, len) == stored;
}

static Expected<EngineFile> read_unguarded(std::shared_ptr<Storage> file, bool for_rebuild);

Expected<EngineFile> read_engine_file(std::shared_ptr<Storage> file, bool for_rebuild) {
  return guarded("loading the engine file", [&] { return read_unguarded(std::move(file), for_rebuild); });
}

static Expected<EngineFile> read_unguarded(std::shared_ptr<Storage> file, bool for_rebuild) {
  const auto* buf = static_cast<const uint8_t*>(file->data);
  size_t size = file->bytes;
  // The checksum trailer (format 3 on): weights, plan and metadata are checked before any is read.
  bool has_trailer = false;
  if (size >= 24 + 8 && std::memcmp(buf + size - 24, kTrailerMagic, 8) == 0) {
    uint64_t stored, len;
    std::memcpy(&stored, buf + size - 16, 8);
    std::memcpy(&len, buf + size - 8, 8);
    if (len != size - 24) return bad("its checksum trailer gives a length of " + std::to_string(len) + " bytes, the file holds " +
                                     std::to_string(size - 24) + " (truncated or extended)");
    const uint64_t sum = checksum64(buf, len);
    if (sum != stored)
      return bad("checksum mismatch: the file was changed or damaged after it was written; rebuild it from its .onnx");
    size = static_cast<size_t>(len);
    has_trailer = true;
  }
  if (size < 8 || !flatbuffers::BufferHasIdentifier(buf, fb::EngineFileIdentifier()))
    return invalid_model("not a kiln engine file (missing the KILN identifier)");
  flatbuffers::Verifier verifier(buf, size, /*max_depth=*/256, /*max_tables=*/50'000'000);
  if (!fb::VerifyEngineFileBuffer(verifier)) return bad("the FlatBuffers verifier rejected it (truncated or damaged)");
  const fb::EngineFile* ef = fb::GetEngineFile(buf);
  EngineFile e;
  for (size_t i = 0; i < vsize(ef->meta()); ++i) {
    const fb::Meta* m = ef->meta()->Get(static_cast<flatbuffers::uoffset_t>(i));
    if (m->key() && m->value()) e.meta[m->key()->str()] = m->value()->str();
  }
  if (ef->format_version() != kEngineFormatVersion && ef->format_version() != kEngineFormatWithPlugins) {
    const auto fp = e.meta.find("fingerprint");
    return Status(StatusCode::kEngineMismatch,
                  "engine file format version " + std::to_string(ef->format_version()) +
                      (fp != e.meta.end() ? " (built for " + fp->second + ")" : std::string()) + ", this kiln reads versions " +
                      std::to_string(kEngineFormatVersion) + " and " + std::to_string(kEngineFormatWithPlugins) +
                      "; rebuild the engine from its .onnx");
  }
  if (!has_trailer) return bad("its checksum trailer is missing (truncated?)");
  const std::string device = e.meta["device"];
  if (device != "cpu" && device != "cuda") return bad("unknown device '" + device + "'");
  const DeviceType device_type = device == "cuda" ? DeviceType::kCUDA : DeviceType::kCPU;
  auto backend = backend_for(device_type);
  if (!backend.ok())
    return Status(StatusCode::kEngineMismatch, "engine was built for " + e.meta["fingerprint"] +
                                                   ", which is not available here: " + backend.status().message());
  const std::string here = (*backend)->fingerprint();
  if (e.meta["fingerprint"] != here) {
    const std::string differs = "engine was built for '" + e.meta["fingerprint"] + "' but this machine is '" + here + "'";
    if (!for_rebuild)
      return Status(StatusCode::kEngineMismatch,
                    differs + "; rebuild the engine here, or load it with on_mismatch = rebuild (CLI: --on-mismatch "
                              "rebuild), which rebuilds it from the graph it holds");
    e.foreign = differs;
  }
  // Same format and hardware: it runs. Say so when another kiln wrote it, or a CPU with features this
  // one lacks (kernels choose their ISA at run time, so such an engine still runs, maybe slower).
  if (e.meta["kiln_version"] != version())
    log(LogLevel::kWarning, "engine file written by kiln " + e.meta["kiln_version"] + ", this is kiln " + version() +
                                " (same engine format; it runs)");
  if (device_type == DeviceType::kCPU) {
    const std::string built = e.meta["cpu_isa"], here = host_cpu_isa();
    std::string missing;
    size_t b = 0;
    while (b < built.size()) {
      size_t e = built.find(' ', b);
      if (e == std::string::npos) e = built.size();
      const std::string feature = built.substr(b, e - b);
      if (!feature.empty() && (" " + here + " ").find(" " + feature + " ") == std::string::npos) missing += " " + feature;
      b = e + 1;
    }
    if (!missing.empty())
      log(LogLevel::kWarning, "engine was built on a CPU with" + missing + ", which this CPU lacks (it runs with the kernels this CPU has)");
  }
  // The plugins its ops come from, before any node is read (their declarations check the nodes).
  for (size_t i = 0; i < vsize(ef->plugins()); ++i) {
    const fb::PluginOpDesc* p = ef->plugins()->Get(static_cast<flatbuffers::uoffset_t>(i));
    auto str = [](const flatbuffers::String* x) { return x ? x->str() : std::string(); };
    e.plugins.push_back({str(p->domain()), str(p->op_type()), str(p->library()), str(p->plugin()), str(p->version()),
                         str(p->abi_hash()), str(p->library_hash())});
  }
  KILN_RETURN_IF_ERROR(plugins::check_records(e.plugins));
  KILN_ASSIGN_OR_RETURN(auto graph, read_graph(ef->graph(), nullptr, 0, file));
  e.graph = std::shared_ptr<ir::Graph>(std::move(graph));
  if (e.foreign.empty()) {
    KILN_ASSIGN_OR_RETURN(e.plan, read_plan(ef->plan(), e.graph));
  }
  if (vsize(ef->profiles()) > kMaxProfiles) return bad("too many shape profiles");
  for (size_t i = 0; i < vsize(ef->profiles()); ++i) {
    const fb::ProfileDesc* pd = ef->profiles()->Get(static_cast<flatbuffers::uoffset_t>(i));
    ShapeProfile p;
    for (size_t k = 0; k < vsize(pd->inputs()); ++k) {
      const fb::ProfileDim* d = pd->inputs()->Get(static_cast<flatbuffers::uoffset_t>(k));
      if (!d->name()) return bad("a shape profile names no input");
      const std::string name = d->name()->str();
      p.min[name] = scalars(d->min());
      p.opt[name] = scalars(d->opt());
      p.max[name] = scalars(d->max());
    }
    e.profiles.push_back(std::move(p));
  }
  if (e.plan)
    for (const Step& s : e.plan->steps)
      if (s.tactics.size() > std::max<size_t>(1, e.profiles.size()) || s.tactic_ms.size() > s.tactics.size())
        return bad("a step holds more tactics than the engine has shape profiles");
  return e;
}

}  // namespace kiln
