// util/npy.cpp — NumPy .npy v1/v2 reading and writing (little-endian, C order).
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ir/float_types.h"
#include "kiln/kiln.h"
#include "util/file.h"
#include "util/guard.h"

namespace kiln {
namespace {

struct NpyType { const char* descr; DataType dtype; };
const NpyType kTypes[] = {
    {"<f4", DataType::kFloat32}, {"<f8", DataType::kFloat64}, {"<f2", DataType::kFloat16},
    {"|i1", DataType::kInt8},    {"<i2", DataType::kInt16},   {"<i4", DataType::kInt32},
    {"<i8", DataType::kInt64},   {"|u1", DataType::kUInt8},   {"<u2", DataType::kUInt16},
    {"<u4", DataType::kUInt32},  {"<u8", DataType::kUInt64},  {"|b1", DataType::kBool},
    {"<c8", DataType::kComplex64}, {"<c16", DataType::kComplex128},
};

std::string field(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return {};
  size_t p = header.find(':', k);
  if (p == std::string::npos) return {};
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p >= header.size()) return {};
  if (header[p] == '\'') {
    const size_t e = header.find('\'', p + 1);
    return e == std::string::npos ? std::string() : header.substr(p + 1, e - p - 1);
  }
  if (header[p] == '(') {
    const size_t e = header.find(')', p);
    return e == std::string::npos ? std::string() : header.substr(p, e - p + 1);
  }
  const size_t e = header.find_first_of(",}", p);
  return header.substr(p, e - p);
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
  char magic[8];
  f.read(magic, 8);
  if (f.gcount() != 8 || std::memcmp(magic, "\x93NUMPY", 6) != 0) return invalid_argument("'" + path + "' is not a .npy file");
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    uint8_t b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    hlen = b[0] | (b[1] << 8);
  } else {
    uint8_t b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
  if (!f || hlen > (1u << 20)) return invalid_argument("'" + path + "': bad .npy header");
  std::string header(hlen, '\0');
  f.read(header.data(), hlen);
  if (!f) return invalid_argument("'" + path + "': truncated .npy header");
  const std::string descr = field(header, "descr");
  if (field(header, "fortran_order") == "True") return unsupported("'" + path + "': Fortran-order arrays are not supported");
  DataType dt = DataType::kUndefined;
  for (const auto& t : kTypes)
    if (descr == t.descr || (descr.size() == 3 && descr[0] == '=' && descr.substr(1) == std::string(t.descr).substr(1))) dt = t.dtype;
  if (descr == "<b1") dt = DataType::kBool;
  if (descr == "<i1") dt = DataType::kInt8;
  if (descr == "<u1") dt = DataType::kUInt8;
  if (dt == DataType::kUndefined) return unsupported("'" + path + "': dtype '" + descr + "' is not supported");
  Shape shape;
  const std::string s = field(header, "shape");
  std::stringstream ss(s.size() > 2 ? s.substr(1, s.size() - 2) : "");
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    try {
      const long long d = std::stoll(item);
      if (d < 0) return invalid_argument("'" + path + "': negative dimension");
      shape.push_back(d);
    } catch (...) {
      return invalid_argument("'" + path + "': bad shape '" + s + "'");
    }
  }
  // The data must be in the file before anything is allocated for it: a 128-byte file cannot claim
  // gigabytes.
  const size_t bytes = shape_nbytes(dt, shape);
  const std::streamoff data_start = f.tellg();
  f.seekg(0, std::ios::end);
  const std::streamoff file_end = f.tellg();
  f.seekg(data_start);
  if (bytes == SIZE_MAX || data_start < 0 || file_end < data_start ||
      bytes > static_cast<size_t>(file_end - data_start))
    return invalid_argument("'" + path + "': file is shorter than its shape " + shape_to_string(shape) + " says");
  if (std::string why = check_tensor_size(dt, shape); !why.empty()) return invalid_argument("'" + path + "': " + why);
  Tensor t = Tensor::empty(dt, shape);
  f.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  if (static_cast<size_t>(f.gcount()) != t.nbytes()) return invalid_argument("'" + path + "': file is shorter than its shape says");
  if (dt == DataType::kBool) {  // any byte but 0/1 read as a C++ bool is undefined: nonzero is true
    auto* b = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) b[i] = b[i] != 0;
  }
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
