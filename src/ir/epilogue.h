// ir/epilogue.h — the activation a fused kernel applies to its result before writing it, with its
// parameters. Declared once: the fusion passes describe what they fused with it (as the fused node's "activation"/"activation_params" attributes, see
// ops/fused.cpp) and every backend's fused kernels read it back from there.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "ir/graph.h"

namespace kiln {

enum class ActKind { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kHardSigmoid, kHardSwish, kSilu, kTanh, kGelu, kGeluTanh };

struct Activation {
  ActKind kind = ActKind::kNone;
  float a = 0, b = 0;  // LeakyRelu alpha; Clip min, max; HardSigmoid alpha, beta
};

// The attribute value naming an activation ("" for none): Relu, LeakyRelu, Clip, Sigmoid,
// HardSigmoid, HardSwish, Silu, Tanh, Gelu, GeluTanh.
const char* activation_name(ActKind kind);

// The activation the ai.onnx node `n` applies to its input 0, or kind kNone with *why. `constant`
// gives the value of a constant scalar input (Clip's bounds from opset 11), or nothing.
Activation activation_of(const ir::Node& n, const std::function<std::optional<double>(const ir::Value*)>& constant,
                         std::string* why);

// A fused node's activation, from its attributes; false with *why for an unknown name.
bool read_activation(const ir::Node& n, Activation* act, std::string* why);
// Writes `act` as "activation" (+ "activation_params") attributes.
void write_activation(const Activation& act, std::map<std::string, ir::Attribute>& attrs);

}  // namespace kiln
