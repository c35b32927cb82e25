// ops/einsum.h — Einsum's equation, parsed once, and its contraction plan for concrete input shapes:
// one definition for the CPU and CUDA kernels.
//
// Every label (letter, or one per broadcast dim of "...") gets a size; each input gets a stride per
// label (repeated labels add up, so "ii" walks the diagonal; broadcast size-1 dims get stride 0). Each
// output element then sums, over the contracted labels, the product of the inputs.
#pragma once

#include <string>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"
#include "ops/params_shape.h"

namespace kiln::ops {

// EinsumTerm and EinsumSpec are declared with Einsum's parameters (ops/params_shape.h).

// False when the equation does not parse.
bool parse_einsum(const std::string& equation, EinsumSpec& spec);

struct EinsumPlan {
  Shape out_shape, red_sizes;
  std::vector<std::vector<int64_t>> out_strides, red_strides;  // [input][label]
};

// The plan for inputs of these shapes; an error names what does not fit.
Expected<EinsumPlan> plan_einsum(const EinsumSpec& spec, const std::vector<Shape>& shapes);

}  // namespace kiln::ops
