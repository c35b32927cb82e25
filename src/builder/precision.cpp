// builder/precision.cpp — the precision rows (see precision.h) and what a build makes of its options.
#include "builder/precision.h"

namespace kiln {

const std::vector<PrecisionRow>& precision_rows() {
  // FP8 keeps its rest float16 on CUDA (its kernels were measured so); an INT8 build may name any float
  // precision for its rest, as the deprecated `int8` flag did through `precision`.
  static const std::vector<PrecisionRow> rows = [] {
    std::vector<PrecisionRow> r(7);
    r[0] = {Precision::kFloat32, "fp32", true};
    r[1] = {Precision::kFloat16, "fp16", false, DataType::kFloat16};
    r[2] = {Precision::kBFloat16, "bf16", false, DataType::kBFloat16};
    r[3] = {Precision::kTF32, "tf32", false, DataType::kUndefined, true};
    r[4] = {Precision::kBest, "best", false, DataType::kFloat16, true};
    r[5] = {Precision::kFP8, "fp8", true, DataType::kUndefined, false, DataType::kFloat8E4M3FN, Precision::kFloat16, false};
    r[6] = {Precision::kInt8, "int8", true, DataType::kUndefined, false, DataType::kInt8, Precision::kFloat16, true};
    return r;
  }();
  return rows;
}

const PrecisionRow& precision_row(Precision p) {
  for (const PrecisionRow& r : precision_rows())
    if (r.precision == p) return r;
  return precision_rows().front();
}

const char* precision_name(Precision p) { return precision_row(p).name; }

Expected<Precision> parse_precision(const std::string& name) {
  std::string names;
  for (const PrecisionRow& r : precision_rows()) {
    if (name == r.name) return r.precision;
    names += (names.empty() ? "'" : ", '") + std::string(r.name) + "'";
  }
  return invalid_argument("unknown precision '" + name + "' (expected " + names + ")");
}

Status check_precision_device(Precision precision, DeviceType device) {
  if (device == DeviceType::kCUDA || precision_row(precision).cpu) return Status::Ok();
  return invalid_argument(std::string(precision_name(precision)) +
                          " engines are GPU engines: build with device cuda (CPU engines compute in float32)");
}

Expected<BuildOptions> resolve_precision(const BuildOptions& given) {
  BuildOptions o = given;
  if (o.int8) {
    if (o.precision == Precision::kFP8) return invalid_argument("choose INT8 or FP8, not both");
    if (o.rest_precision)
      return invalid_argument("int8 = true (deprecated) names the rest's precision in `precision`; with rest_precision, "
                              "build with precision int8 instead");
    if (o.precision != Precision::kInt8) o.rest_precision = o.precision;
    o.precision = Precision::kInt8;
    o.int8 = false;
  }
  const PrecisionRow& row = precision_row(o.precision);
  // half_outputs: the float tensors must go half (float16/bfloat16), here or in an 8-bit build's rest.
  auto check_half_outputs = [](const BuildOptions& b) -> Expected<BuildOptions> {
    const Precision f = float_precision(b);
    if (b.half_outputs && precision_row(f).half == DataType::kUndefined)
      return invalid_argument(std::string("half_outputs is for engines whose float tensors are float16 or bfloat16 (fp16, "
                                          "bf16, best, or int8/fp8 with such a rest); this one's are ") +
                              precision_name(f));
    return b;
  };
  if (!row.is_8bit()) {
    if (o.rest_precision)
      return invalid_argument(std::string("rest_precision is for the 8-bit precisions (int8, fp8); a ") + row.name +
                              " engine runs in " + row.name + " throughout");
    return check_half_outputs(o);
  }
  const Precision own = o.device == DeviceType::kCUDA ? row.cuda_rest : Precision::kFloat32;
  const Precision rest = o.rest_precision.value_or(own);
  if (precision_row(rest).is_8bit())
    return invalid_argument(std::string("the rest of an ") + row.name + " engine is a float precision, not " + precision_name(rest));
  if (rest != own && !row.rest_choice)
    return invalid_argument(std::string(row.name) + " engines run the rest in " + precision_name(own) + " on this device (not " +
                            precision_name(rest) + ")");
  KILN_RETURN_IF_ERROR(check_precision_device(rest, o.device));
  o.rest_precision = rest;
  return check_half_outputs(o);
}

Precision float_precision(const BuildOptions& o) {
  return precision_row(o.precision).is_8bit() ? o.rest_precision.value_or(Precision::kFloat32) : o.precision;
}

}  // namespace kiln
