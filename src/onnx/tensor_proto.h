// onnx/tensor_proto.h — ONNX TensorProto / SparseTensorProto / TypeProto → kiln values.
//
// Internal to the importer. Every size in the file is checked before it is trusted: dims must be
// non-negative, element counts must not overflow, and the stored bytes or values must match the
// element count exactly. External data is only read from inside `base_dir`.
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"
#include "kiln/status.h"
#include "kiln/tensor.h"
#include "onnx/onnx.pb.h"

namespace kiln::onnx {

struct TensorSource {
  std::string base_dir;  // folder external data is resolved against; empty: external data refused
  std::string what;      // how errors name the tensor: "model.onnx: initializer 'w'"
};

// Decodes a tensor stored in raw_data, in the typed fields, or in an external file. Sub-byte types
// (int4/uint4/float4e2m1 packed two per byte, int2/uint2 four per byte) are unpacked to one
// element per byte (int4/int2 sign-extended).
// `raw_data`: the tensor's raw_data when the importer kept it out of the parsed proto (the proto's
// own field is then empty); an empty view: the proto's.
Expected<Tensor> tensor_from_proto(const ::onnx::TensorProto& tp, const TensorSource& src, std::string_view raw_data = {});

// Densifies a sparse tensor (indices [NNZ] linearized or [NNZ, rank]); unset elements are zero.
Expected<Tensor> tensor_from_sparse(const ::onnx::SparseTensorProto& sp, const TensorSource& src);

// A value type from a TypeProto (unset or sparse types become Kind::kUnknown).
Expected<ir::Type> type_from_proto(const ::onnx::TypeProto& tp, const std::string& what);

// The kiln dtype for an ONNX elem_type code; errors for codes kiln does not know.
Expected<DataType> dtype_from_onnx(int64_t code, const std::string& what);

}  // namespace kiln::onnx
