// passes/fuse_conv_pool.cpp — an image network's stem as one node (CUDA engines, after the layout
// pass): kiln.FusedConv (channels-last, a few input channels, ReLU or no activation) → max
// kiln.ChannelsLastPool [→ QuantizeLinear to int8] becomes kiln.ConvPool, which also reads the model's
// channels-first input itself when a Transpose to channels-last (and a Cast to float16 before it)
// was all that stood between them. ResNet-50 at batch 256: five steps that wrote and re-read a 411 MB
// float16 convolution output become one that writes the 51 MB pooled int8 result
// (backends/cuda/cuda_conv_pool.cu).
#include "passes/passes.h"
#include "passes/pattern.h"
#include "util/log.h"

namespace kiln::passes {
namespace {

bool ints_all(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v)
    if (e != x) return false;
  return true;
}

// Explicit 2-D pads of a node (NOTSET auto_pad), or empty.
std::vector<int64_t> explicit_pads(const ir::Node& n) {
  if (n.attr_string("auto_pad", "NOTSET") != "NOTSET") return {};
  std::vector<int64_t> p = n.attr_ints("pads");
  if (p.empty()) p.assign(4, 0);
  return p.size() == 4 ? p : std::vector<int64_t>{};
}

std::vector<int64_t> two(const ir::Node& n, const char* key) {
  std::vector<int64_t> v = n.attr_ints(key);
  if (v.empty()) v.assign(2, 1);
  return v;
}

}  // namespace

Expected<int> fuse_conv_max_pool(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts) {
  int fused = 0;
  bool tried = false;
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* conv : nodes) {
    if (conv->removed || conv->domain != "kiln" || conv->op_type != "FusedConv" || conv->attr_int("channels_last", 0) != 1 ||
        conv->outputs.size() != 1 || conv->has_input(3) || !conv->has_input(1) || conv->attr_int("group", 1) != 1 ||
        !ints_all(conv->attr_ints("dilations"), 1))
      continue;
    const std::string act = conv->attr_string("activation", "");
    const ir::Value* w = conv->inputs[1];
    if ((act != "" && act != "Relu") || !w->is_constant() || w->constant->shape().size() != 4 || w->constant->shape()[3] > 4)
      continue;
    ir::Value* y = conv->outputs[0];
    if (!y || y->is_output || y->uses.size() != 1) continue;
    ir::Node* pool = y->uses[0].node;
    if (pool->domain != "kiln" || pool->op_type != "ChannelsLastPool" || pool->attr_string("op", "") != "MaxPool" ||
        pool->outputs.size() != 1 || pool->attr_int("ceil_mode", 0) != 0 || !ints_all(pool->attr_ints("dilations"), 1))
      continue;
    const std::vector<int64_t> cpads = explicit_pads(*conv), ppads = explicit_pads(*pool);
    const std::vector<int64_t> pk = pool->attr_ints("kernel_shape");
    if (cpads.size() != 4 || ppads.size() != 4 || pk.size() != 2) continue;
    ir::Value* out = pool->outputs[0];
    if (!out || out->is_output) continue;
    // QuantizeLinear to int8 with one scale: the kernel quantizes before it pools.
    ir::Node* q = nullptr;
    if (out->uses.size() == 1) {
      ir::Node* r = out->uses[0].node;
      if (r->domain.empty() && r->op_type == "QuantizeLinear" && r->has_input(1) && r->has_input(2) &&
          r->inputs[2]->type.dtype == DataType::kInt8 && r->outputs.size() == 1 && r->outputs[0])
        q = r;
    }
    // The input: the model's channels-first value when only a Transpose to channels-last (and a Cast
    // to float16 before it) is in between.
    ir::Value* x = conv->inputs[0];
    bool channels_first = false;
    std::vector<ir::Node*> feeders;
    if (ir::Node* t = x->producer; t && t->domain.empty() && t->op_type == "Transpose" && sole_reader(x) == conv &&
                                   t->attr_ints("perm") == std::vector<int64_t>{0, 2, 3, 1}) {
      feeders.push_back(t);
      x = t->inputs[0];
      channels_first = true;
      if (ir::Node* c = x->producer; c && c->domain.empty() && c->op_type == "Cast" && sole_reader(x) == t &&
                                     c->inputs[0]->type.dtype == DataType::kFloat32) {
        feeders.push_back(c);
        x = c->inputs[0];
      }
    }
    std::vector<ir::Value*> ins = {x, conv->inputs[1], conv->has_input(2) ? conv->inputs[2] : nullptr};
    if (q) ins.insert(ins.end(), {q->inputs[1], q->inputs[2]});
    ir::Value* last = q ? q->outputs[0] : out;
    // Made with an output of its own to ask the target; then it takes over the last step's.
    ir::Value* trial = g.new_value(last->name + "_stem", last->type);
    ir::Node* n = g.add_node("ConvPool", "kiln", ins, {trial}, conv->name + "_pool");
    n->opset = 1;
    n->attrs["kernel_shape"] = ints_attribute({w->constant->shape()[1], w->constant->shape()[2]});
    n->attrs["strides"] = ints_attribute(two(*conv, "strides"));
    n->attrs["pads"] = ints_attribute(cpads);
    n->attrs["activation"].kind = ir::Attribute::Kind::kString;
    n->attrs["activation"].s = act;
    n->attrs["x_channels_first"].kind = ir::Attribute::Kind::kInt;
    n->attrs["x_channels_first"].i = channels_first ? 1 : 0;
    n->attrs["pool_kernel"] = ints_attribute(pk);
    n->attrs["pool_strides"] = ints_attribute(two(*pool, "strides"));
    n->attrs["pool_pads"] = ints_attribute(ppads);
    if (!accepts(*n)) {
      g.remove_node(n);
      tried = true;  // its output value is left over
      continue;
    }
    if (log_enabled(LogLevel::kVerbose))
      log(LogLevel::kVerbose, "[conv-pool] " + conv->describe() + ", " + pool->describe() + (q ? ", " + q->describe() : "") +
                                  (feeders.empty() ? "" : " and the layout change before them") + " → " + n->describe());
    for (ir::Node* d : {q, pool, conv})
      if (d) g.remove_node(d);
    for (ir::Node* d : feeders) g.remove_node(d);
    g.set_output(n, 0, last);
    ++fused;
  }
  if (fused || tried) g.remove_dead_values();
  if (fused) KILN_RETURN_IF_ERROR(g.sort());
  return fused;
}

}  // namespace kiln::passes
