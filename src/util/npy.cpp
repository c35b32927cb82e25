// util/npy.cpp — NumPy .npy files: read as np.load reads them (versions 1.0-3.0, either byte order,
// C or Fortran order; the header by NumPy's rules, util/npy_header.h), written as version 1.0,
// little-endian, C order. Every .npy kiln reads (the CLI's inputs, calibration data, `compare`'s
// reference outputs) goes through read_npy.
#include <cstdint>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "ir/float_types.h"
#include "kiln/kiln.h"
#include "util/file.h"
#include "util/guard.h"
#include "util/npy_header.h"

namespace kiln {
namespace {

struct NpyType { const char* descr; DataType dtype; };
// What write_npy writes; the reader also takes the other byte orders (npy_dtype below).
const NpyType kTypes[] = {
    {"<f4", DataType::kFloat32}, {"<f8", DataType::kFloat64}, {"<f2", DataType::kFloat16},
    {"|i1", DataType::kInt8},    {"<i2", DataType::kInt16},   {"<i4", DataType::kInt32},
    {"<i8", DataType::kInt64},   {"|u1", DataType::kUInt8},   {"<u2", DataType::kUInt16},
    {"<u4", DataType::kUInt32},  {"<u8", DataType::kUInt64},  {"|b1", DataType::kBool},
    {"<c8", DataType::kComplex64}, {"<c16", DataType::kComplex128},
};

// The dtype of a descr in NumPy's type-code form: a byte order ('<', '>', '|', '=' or none: '|'
// and '=' and none are this machine's, little-endian on every host kiln runs on) and a code
// ('f4', 'u1', 'c16', ...). `big_endian` says whether the bytes need swapping.
DataType npy_dtype(const std::string& descr, bool& big_endian) {
  std::string code = descr;
  big_endian = false;
  if (!code.empty() && std::strchr("<>|=", code[0])) {
    big_endian = code[0] == '>';
    code.erase(0, 1);
  }
  for (const auto& t : kTypes)
    if (code == t.descr + 1) return t.dtype;
  return DataType::kUndefined;
}

// Swaps each `unit`-byte word of `data` (a complex value is two words).
void swap_bytes(uint8_t* data, size_t bytes, size_t unit) {
  for (size_t i = 0; i + unit <= bytes; i += unit)
    for (size_t a = 0, b = unit - 1; a < b; ++a, --b) std::swap(data[i + a], data[i + b]);
}

// A Fortran-order array's bytes are the C-order bytes of its transpose: `f` holds them with the
// dims reversed; the result is `shape` in C order.
Tensor from_fortran_order(const Tensor& f, const Shape& shape) {
  Tensor t = Tensor::empty(f.dtype(), shape);
  const size_t es = dtype_size(f.dtype()), rank = shape.size();
  if (t.numel() == 0) return t;
  std::vector<int64_t> stride(rank, 1), index(rank, 0);  // strides of the Fortran layout, in elements
  for (size_t k = 1; k < rank; ++k) stride[k] = stride[k - 1] * shape[k - 1];
  const auto* src = static_cast<const uint8_t*>(f.raw());
  auto* dst = static_cast<uint8_t*>(t.raw());
  int64_t offset = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(offset) * es, es);
    for (size_t k = rank; k-- > 0;) {  // next C-order index: the last dim moves fastest
      offset += stride[k];
      if (++index[k] < shape[k]) break;
      offset -= stride[k] * shape[k];
      index[k] = 0;
    }
  }
  return t;
}

Expected<Tensor> read_npy_unguarded(const std::string& path);

}  // namespace

Expected<Tensor> read_npy(const std::string& path) {
  return guarded("reading '" + path + "'", [&] { return read_npy_unguarded(path); });
}

namespace {

Expected<Tensor> read_npy_unguarded(const std::string& path) {
  KILN_RETURN_IF_ERROR(check_readable_file(path, ".npy file"));  // a FIFO would block the open for ever
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open '" + path + "'");
  const std::string where = "'" + path + "': ";
  uint8_t magic[8];
  f.read(reinterpret_cast<char*>(magic), 8);
  if (f.gcount() != 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0) return invalid_argument(where + "not a .npy file (no \\x93NUMPY at its start)");
  const int major = magic[6], minor = magic[7];
  if ((major != 1 && major != 2 && major != 3) || minor != 0)
    return invalid_argument(where + ".npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                            " does not exist (there are 1.0, 2.0 and 3.0)");
  // 1.0: a 2-byte header length, 2.0 and 3.0: 4 bytes, little-endian.
  uint8_t b[4] = {0, 0, 0, 0};
  const int len_bytes = major == 1 ? 2 : 4;
  f.read(reinterpret_cast<char*>(b), len_bytes);
  if (f.gcount() != len_bytes) return invalid_argument(where + "the file ends inside its .npy header length");
  const uint32_t hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  // At most 10,000 characters, 4 bytes each in UTF-8 (parse_npy_header counts the characters).
  if (hlen > 40000) return invalid_argument(where + ".npy header length " + std::to_string(hlen) + " is beyond what NumPy reads");
  std::string text(hlen, '\0');
  f.read(text.data(), hlen);
  if (static_cast<uint32_t>(f.gcount()) != hlen)
    return invalid_argument(where + "the file ends inside its .npy header (" + std::to_string(hlen) + " bytes said)");
  auto parsed = parse_npy_header(text, major);
  if (!parsed.ok()) return Status(parsed.status().code(), where + parsed.status().message());
  const NpyHeader& h = parsed.value();
  bool big_endian = false;
  const DataType dt = npy_dtype(h.descr, big_endian);
  if (dt == DataType::kUndefined)
    return unsupported(where + "dtype '" + h.descr + "' is not supported (kiln reads NumPy's type codes of numbers and bools: '<f4', '>i8', '|b1', ...)");
  const Shape shape(h.shape.begin(), h.shape.end());
  // The data must be in the file before anything is allocated for it: a 128-byte file cannot claim
  // gigabytes. Bytes after it are ignored, as NumPy ignores them.
  const size_t bytes = shape_nbytes(dt, shape);
  const std::streamoff data_start = f.tellg();
  f.seekg(0, std::ios::end);
  const std::streamoff file_end = f.tellg();
  f.seekg(data_start);
  if (bytes == SIZE_MAX || data_start < 0 || file_end < data_start ||
      bytes > static_cast<size_t>(file_end - data_start))
    return invalid_argument(where + "file is shorter than its shape " + shape_to_string(shape) + " says");
  if (std::string why = check_tensor_size(dt, shape); !why.empty()) return invalid_argument(where + why);
  Tensor t = Tensor::empty(dt, h.fortran_order ? Shape(shape.rbegin(), shape.rend()) : shape);
  f.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  if (static_cast<size_t>(f.gcount()) != t.nbytes()) return invalid_argument(where + "file is shorter than its shape says");
  auto* raw = static_cast<uint8_t*>(t.raw());
  if (big_endian) {
    const bool complex = dt == DataType::kComplex64 || dt == DataType::kComplex128;
    swap_bytes(raw, t.nbytes(), complex ? dtype_size(dt) / 2 : dtype_size(dt));
  }
  if (dt == DataType::kBool)  // any byte but 0/1 read as a C++ bool is undefined: nonzero is true
    for (size_t i = 0; i < t.nbytes(); ++i) raw[i] = raw[i] != 0;
  if (h.fortran_order) t = from_fortran_order(t, shape);
  return t;
}

}  // namespace

Status write_npy(const std::string& path, const Tensor& t) {
  const char* descr = nullptr;
  for (const auto& x : kTypes)
    if (x.dtype == t.dtype()) descr = x.descr;
  Tensor data = t;
  if (t.dtype() == DataType::kBFloat16) {
    // NumPy has no bfloat16: write float32.
    data = Tensor::empty(DataType::kFloat32, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) data.data<float>()[i] = bf16_to_f32(t.data<uint16_t>()[i]);
    descr = "<f4";
  }
  if (!descr) return unsupported(std::string("cannot write dtype ") + dtype_name(t.dtype()) + " to .npy");
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + (t.shape().size() == 1 || i + 1 < t.shape().size() ? "," : "");
  shape += ")";
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return io_error("cannot write '" + path + "'");
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t hl = static_cast<uint16_t>(header.size());
  const char hb[2] = {static_cast<char>(hl & 0xff), static_cast<char>(hl >> 8)};
  f.write(hb, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  f.write(static_cast<const char*>(data.raw()), static_cast<std::streamsize>(data.nbytes()));
  if (!f) return io_error("error writing '" + path + "'");
  return Status::Ok();
}

}  // namespace kiln
