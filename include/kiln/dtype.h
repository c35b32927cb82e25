// kiln/dtype.h — element types. Codes equal ONNX TensorProto.DataType so files map 1:1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class DataType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUInt2 = 25,
  kInt2 = 26,
};

// Bytes per element in memory. Sub-byte types (int4, uint4, float4, int2, uint2) are held unpacked
// in memory, one element per byte (signed ones sign-extended); they are packed only in files. kString elements are
// std::string objects.
size_t dtype_size(DataType t);
// "float32", "int64", "float8e4m3fn", ... (numpy-like names).
const char* dtype_name(DataType t);
// ONNX's names: "tensor(float)" uses "float", "int64", "float16", ...
const char* dtype_onnx_name(DataType t);
bool dtype_is_valid(int32_t code);
bool dtype_is_float(DataType t);     // any floating type, fp8 and fp4 included
bool dtype_is_integer(DataType t);   // signed or unsigned integers, int4/uint4 included
bool dtype_is_signed(DataType t);

}  // namespace kiln
