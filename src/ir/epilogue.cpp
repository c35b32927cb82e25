#include "ir/epilogue.h"

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace kiln {
namespace {

constexpr std::pair<const char*, ActKind> kNames[] = {
    {"", ActKind::kNone},          {"Relu", ActKind::kRelu},           {"LeakyRelu", ActKind::kLeakyRelu},
    {"Clip", ActKind::kClip},      {"Sigmoid", ActKind::kSigmoid},     {"HardSigmoid", ActKind::kHardSigmoid},
    {"HardSwish", ActKind::kHardSwish}, {"Silu", ActKind::kSilu},      {"Tanh", ActKind::kTanh},
    {"Gelu", ActKind::kGelu},      {"GeluTanh", ActKind::kGeluTanh}};

// The parameters an activation takes, with their defaults (ONNX's).
Activation with_defaults(ActKind k, const std::vector<float>& p) {
  auto param = [&](size_t i, float d) { return i < p.size() ? p[i] : d; };
  Activation a;
  a.kind = k;
  if (k == ActKind::kLeakyRelu) a.a = param(0, 0.01f);
  if (k == ActKind::kClip) {
    a.a = param(0, -std::numeric_limits<float>::infinity());
    a.b = param(1, std::numeric_limits<float>::infinity());
  }
  if (k == ActKind::kHardSigmoid) {
    a.a = param(0, 0.2f);
    a.b = param(1, 0.5f);
  }
  return a;
}

}  // namespace

const char* activation_name(ActKind kind) {
  for (const auto& [name, k] : kNames)
    if (k == kind) return name;
  return "";
}

Activation activation_of(const ir::Node& n, const std::function<std::optional<double>(const ir::Value*)>& constant,
                         std::string* why) {
  const std::string& op = n.op_type;
  if (!n.domain.empty() && n.domain != "ai.onnx") {
    *why = n.domain + "." + op + " is not fusable";
    return {};
  }
  if (op == "Relu") return with_defaults(ActKind::kRelu, {});
  if (op == "Sigmoid") return with_defaults(ActKind::kSigmoid, {});
  if (op == "HardSwish") return with_defaults(ActKind::kHardSwish, {});
  if (op == "Tanh") return with_defaults(ActKind::kTanh, {});
  if (op == "LeakyRelu") return with_defaults(ActKind::kLeakyRelu, {n.attr_float("alpha", 0.01f)});
  if (op == "HardSigmoid") return with_defaults(ActKind::kHardSigmoid, {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)});
  if (op == "Gelu") return with_defaults(n.attr_string("approximate", "none") == "tanh" ? ActKind::kGeluTanh : ActKind::kGelu, {});
  if (op == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (n.opset != 0 && n.opset < 11) {
      lo = n.attr_float("min", lo);
      hi = n.attr_float("max", hi);
    } else {
      for (int i : {1, 2}) {
        if (!n.has_input(i)) continue;
        auto v = constant(n.inputs[i]);
        if (!v) {
          *why = "Clip bounds are not constant";
          return {};
        }
        (i == 1 ? lo : hi) = static_cast<float>(*v);
      }
    }
    return with_defaults(ActKind::kClip, {lo, hi});
  }
  *why = op + " is not fusable";
  return {};
}

bool read_activation(const ir::Node& n, Activation* act, std::string* why) {
  const std::string name = n.attr_string("activation", "");
  for (const auto& [s, k] : kNames)
    if (name == s) {
      *act = with_defaults(k, n.attr_floats("activation_params"));
      return true;
    }
  *why = "unknown activation '" + name + "'";
  return false;
}

void write_activation(const Activation& act, std::map<std::string, ir::Attribute>& attrs) {
  attrs.erase("activation_params");
  ir::Attribute& name = attrs["activation"];
  name.kind = ir::Attribute::Kind::kString;
  name.s = activation_name(act.kind);
  std::vector<float> params;
  if (act.kind == ActKind::kLeakyRelu) params = {act.a};
  if (act.kind == ActKind::kClip || act.kind == ActKind::kHardSigmoid) params = {act.a, act.b};
  if (params.empty()) return;
  ir::Attribute& p = attrs["activation_params"];
  p.kind = ir::Attribute::Kind::kFloats;
  p.floats = std::move(params);
}

}  // namespace kiln
