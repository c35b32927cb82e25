// onnx/importer.h — ONNX protobuf → kiln IR.
//
// Handles: initializers (raw_data and typed fields, every ONNX dtype; int4/uint4/float4/int2/uint2 unpacked to
// one element per byte), external data (resolved inside the model's folder only), sparse
// initializers, opset imports, subgraph attributes (If/Loop/Scan bodies, with outer-scope captures),
// and model-local functions (inlined). Errors name the file, node, op and reason; nothing crashes on
// a hostile file.
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"
#include "kiln/status.h"

namespace kiln::onnx {

struct ImportOptions {
  // Folder that external-data locations are resolved against. Empty: external data is refused.
  std::string base_dir;
  // Name used in error messages ("model.onnx").
  std::string source_name = "<bytes>";
  // Initializers' raw_data of at least this many bytes are read straight from the model's bytes
  // into their tensors, not copied by protobuf first (model_without_weights, onnx/proto_nesting.h).
  // The same model either way; the tests set 1 to take every raw_data that way.
  size_t weights_aside_min_bytes = size_t{64} << 10;
};

// The file is mapped (util/file.h), never read into memory first; its wire format is checked before
// protobuf parses it (model_wire_error, onnx/proto_nesting.h), so a model followed by junk (or
// 2 GB of zeros) is refused at once with the byte offset where its structure breaks.
Expected<ir::Model> import_file(const std::string& path);
Expected<ir::Model> import_bytes(std::string_view bytes, const ImportOptions& options);

// The opset range of the default domain kiln accepts. Kernels whose semantics changed in old opsets
// implement the old forms or refuse them through their registered opset range.
constexpr int kMinOpset = 1;
int max_supported_opset();  // the newest ai.onnx opset of the pinned onnx release

}  // namespace kiln::onnx
