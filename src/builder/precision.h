// builder/precision.h — the precisions as data: one row per kiln::Precision, which the CLI's, Python's
// and the C API's names, the builder's checks, the target stages and the 8-bit path all read. A build
// asks its precision's row (which devices, which half type, TF32 or not, which 8-bit type, what the
// rest runs in) instead of testing precisions by value; adding a precision is adding a row here
// (docs/ARCHITECTURE.md, "Adding a precision").
#pragma once

#include <vector>

#include "kiln/kiln.h"

namespace kiln {

struct PrecisionRow {
  Precision precision;
  const char* name;  // the one name: precision_name / parse_precision
  bool cpu = false;  // CPU engines may take it (every precision is a CUDA one)
  // Float precisions: the type float32 tensors become where a kernel takes half floats
  // (kUndefined: they stay float32), and whether float32 products may round to TF32.
  DataType half = DataType::kUndefined;
  bool tf32 = false;
  // 8-bit precisions: the type the products with constant weights are quantized to (kUndefined for
  // the float precisions), from calibration data; and the precision of the rest on CUDA when the
  // build does not name one (CPU engines: float32), and whether the build may name another.
  DataType eight_bit = DataType::kUndefined;
  Precision cuda_rest = Precision::kFloat32;
  bool rest_choice = false;

  bool is_8bit() const { return eight_bit != DataType::kUndefined; }
};

// Every precision, in enum order.
const std::vector<PrecisionRow>& precision_rows();
// The row of `p` (kFloat32's for a value outside the enum).
const PrecisionRow& precision_row(Precision p);

// The options a build works with: the deprecated `int8` flag turned into precision kInt8 with the
// rest in `precision`; an 8-bit precision's rest resolved (rest_precision set, from the row when the
// options leave it unset) and checked; rest_precision refused for a float precision. A float build's
// rest_precision stays unset.
Expected<BuildOptions> resolve_precision(const BuildOptions& options);

// The precision the float tensors of a build's graph take: the rest of an 8-bit build, else the
// precision itself (options as resolve_precision returns them).
Precision float_precision(const BuildOptions& options);

// Reduced-precision float engines are GPU engines: kInvalidArgument for a precision `device` cannot take.
Status check_precision_device(Precision precision, DeviceType device);

}  // namespace kiln
