// tests/fuzz/serve_model.h — the model configuration fuzz_serve decodes requests against
// (tests/unit/test_serve_config.cpp checks that it parses, so the harness cannot rot into aborting).
#pragma once

namespace kiln::fuzz {

// A model with an input of each kind a request can fill: batched float, a variable-length int64, an
// int32 (int_contents on gRPC), an optional float16, and a reshaped bool. (String tensors are not served:
// model_config.cpp refuses TYPE_STRING, so they cannot reach the decoders.)
inline constexpr const char* kServeModelConfig = R"(
name: "m"
max_batch_size: 8
input [
  { name: "x" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "s" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "h" data_type: TYPE_FP16 dims: [ 2 ] optional: true },
  { name: "b" data_type: TYPE_BOOL dims: [ 2, 2 ] reshape: { shape: [ 4 ] } }
]
output [
  { name: "y" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "t" data_type: TYPE_UINT16 dims: [ 1 ] },
  { name: "r" data_type: TYPE_INT8 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } }
]
)";

}  // namespace kiln::fuzz
