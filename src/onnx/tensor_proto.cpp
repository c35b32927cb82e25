#include "onnx/tensor_proto.h"

#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

namespace kiln::onnx {

namespace fs = std::filesystem;

namespace {

// Largest tensor the importer materializes from a sparse description (whose dense size the file
// does not bound). Dense tensors are bounded by the bytes actually stored.
constexpr uint64_t kMaxSparseDenseBytes = uint64_t{1} << 31;

Status bad(const TensorSource& src, const std::string& why) { return invalid_model(src.what + ": " + why); }

// Elements per byte in a file: 2 for int4/uint4/float4e2m1, 4 for int2/uint2, else 1 (or fewer).
int per_byte(DataType dt) {
  switch (dt) {
    case DataType::kInt4: case DataType::kUInt4: case DataType::kFloat4E2M1: return 2;
    case DataType::kInt2: case DataType::kUInt2: return 4;
    default: return 1;
  }
}
bool is_packed(DataType dt) { return per_byte(dt) > 1; }

// Bytes the elements take in a file (sub-byte types packed, low bits first).
uint64_t stored_bytes(DataType dt, int64_t numel) {
  const int k = per_byte(dt);
  if (k > 1) return (static_cast<uint64_t>(numel) + k - 1) / k;
  return static_cast<uint64_t>(numel) * dtype_size(dt);
}

Expected<int64_t> checked_numel(const google::protobuf::RepeatedField<int64_t>& dims, const TensorSource& src) {
  bool zero = false;
  for (int64_t d : dims) {
    if (d < 0) return bad(src, "negative dimension " + std::to_string(d));
    zero |= d == 0;
  }
  if (zero) return int64_t{0};
  int64_t n = 1;
  for (int64_t d : dims)
    if (__builtin_mul_overflow(n, d, &n)) return bad(src, "element count overflows");
  // Leaves room for byte counts of the widest type (16 bytes) without overflow.
  if (n > (int64_t{1} << 58)) return bad(src, "element count " + std::to_string(n) + " is too large");
  return n;
}

Shape shape_of(const google::protobuf::RepeatedField<int64_t>& dims) { return Shape(dims.begin(), dims.end()); }

// Unpacks sub-byte elements (first element in the lowest bits) to one byte each; int4/int2 are
// sign-extended.
void unpack(const uint8_t* packed, int64_t numel, DataType dt, uint8_t* out) {
  const int k = per_byte(dt), bits = 8 / k, shift = 8 - bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  const bool sign = dt == DataType::kInt4 || dt == DataType::kInt2;
  for (int64_t i = 0; i < numel; ++i) {
    const uint8_t v = (packed[i / k] >> ((i % k) * bits)) & mask;
    out[i] = sign ? static_cast<uint8_t>(static_cast<int8_t>(static_cast<uint8_t>(v << shift)) >> shift) : v;
  }
}

// Fills `out` (already allocated with the right dtype and shape) from little-endian file bytes.
void decode_raw(const uint8_t* p, DataType dt, Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  if (is_packed(dt)) {
    unpack(p, n, dt, out.data<uint8_t>());
  } else if (dt == DataType::kBool) {
    auto* o = out.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) o[i] = p[i] != 0;
  } else {
    static_assert(std::endian::native == std::endian::little, "kiln assumes a little-endian host");
    std::memcpy(out.raw(), p, out.nbytes());
  }
}

struct ExternalRef {
  fs::path file;
  uint64_t offset = 0;
  uint64_t length = 0;
};

bool parse_u64(const std::string& s, uint64_t* v) {
  if (s.empty()) return false;
  auto r = std::from_chars(s.data(), s.data() + s.size(), *v);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// True when `inner` lies within `outer` (both canonical), compared component by component.
bool path_within(const fs::path& outer, const fs::path& inner) {
  auto o = outer.begin(), i = inner.begin();
  for (; o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // trailing separator
    if (i == inner.end() || *o != *i) return false;
  }
  return true;
}

Expected<ExternalRef> resolve_external(const ::onnx::TensorProto& tp, const TensorSource& src) {
  std::string location;
  bool have_offset = false, have_length = false;
  ExternalRef ref;
  for (const auto& kv : tp.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      if (!parse_u64(kv.value(), &ref.offset)) return bad(src, "external data offset '" + kv.value() + "' is not a number");
      have_offset = true;
    } else if (kv.key() == "length") {
      if (!parse_u64(kv.value(), &ref.length)) return bad(src, "external data length '" + kv.value() + "' is not a number");
      have_length = true;
    }
  }
  (void)have_offset;
  if (location.empty()) return bad(src, "external data has no 'location'");
  if (location.find('\0') != std::string::npos) return bad(src, "external data location contains a NUL byte");
  if (src.base_dir.empty())
    return bad(src, "external data '" + location + "' cannot be resolved: the model was not loaded from a file "
                    "(load it with import_file, or set ImportOptions::base_dir)");
  const fs::path rel(location);
  if (rel.is_absolute() || rel.has_root_path())
    return bad(src, "external data location '" + location + "' is an absolute path; it must be relative to the model's folder");
  for (const auto& part : rel)
    if (part == "..") return bad(src, "external data location '" + location + "' leaves the model's folder ('..')");
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::path(src.base_dir), ec);
  if (ec) return io_error(src.what + ": cannot resolve model folder '" + src.base_dir + "': " + ec.message());
  const fs::path full = fs::weakly_canonical(base / rel, ec);
  if (ec) return io_error(src.what + ": cannot resolve external data '" + location + "': " + ec.message());
  if (!path_within(base, full))
    return bad(src, "external data location '" + location + "' resolves outside the model's folder");
  if (!fs::exists(full, ec))
    return not_found(src.what + ": external data file '" + location + "' not found in '" + src.base_dir + "'");
  if (!fs::is_regular_file(full, ec))
    return bad(src, "external data location '" + location + "' is not a regular file");
  const uint64_t size = fs::file_size(full, ec);
  if (ec) return io_error(src.what + ": cannot read size of '" + location + "': " + ec.message());
  if (ref.offset > size)
    return bad(src, "external data offset " + std::to_string(ref.offset) + " is past the end of '" + location +
                        "' (" + std::to_string(size) + " bytes)");
  if (!have_length) ref.length = size - ref.offset;
  if (ref.length > size - ref.offset)
    return bad(src, "external data range [" + std::to_string(ref.offset) + ", +" + std::to_string(ref.length) +
                        ") is past the end of '" + location + "' (" + std::to_string(size) + " bytes)");
  ref.file = full;
  return ref;
}

Status read_range(const ExternalRef& ref, void* dst, const TensorSource& src) {
  if (ref.length == 0) return Status::Ok();
  std::ifstream f(ref.file, std::ios::binary);
  if (!f) return io_error(src.what + ": cannot open external data file '" + ref.file.string() + "'");
  f.seekg(static_cast<std::streamoff>(ref.offset));
  f.read(static_cast<char*>(dst), static_cast<std::streamsize>(ref.length));
  if (!f || static_cast<uint64_t>(f.gcount()) != ref.length)
    return io_error(src.what + ": short read from external data file '" + ref.file.string() + "'");
  return Status::Ok();
}

Expected<Tensor> from_external(const ::onnx::TensorProto& tp, DataType dt, int64_t numel, const TensorSource& src) {
  if (dt == DataType::kString) return bad(src, "string tensors cannot use external data");
  KILN_ASSIGN_OR_RETURN(ExternalRef ref, resolve_external(tp, src));
  const uint64_t want = stored_bytes(dt, numel);
  if (ref.length != want)
    return bad(src, "external data has " + std::to_string(ref.length) + " bytes, expected " + std::to_string(want) +
                        " for " + std::to_string(numel) + " " + dtype_name(dt) + " elements");
  Tensor t = Tensor::empty(dt, shape_of(tp.dims()));
  if (!is_packed(dt) && dt != DataType::kBool) {
    KILN_RETURN_IF_ERROR(read_range(ref, t.raw(), src));
    return t;
  }
  std::string buf(ref.length, '\0');
  KILN_RETURN_IF_ERROR(read_range(ref, buf.data(), src));
  decode_raw(reinterpret_cast<const uint8_t*>(buf.data()), dt, t);
  return t;
}

// The typed field a dtype is stored in, how many values it holds, and how many it must hold.
struct TypedField {
  const char* name;
  int64_t have;
  int64_t want;
};

TypedField typed_field(const ::onnx::TensorProto& tp, DataType dt, int64_t numel) {
  switch (dt) {
    case DataType::kFloat32: return {"float_data", tp.float_data_size(), numel};
    case DataType::kComplex64: return {"float_data", tp.float_data_size(), 2 * numel};
    case DataType::kFloat64: return {"double_data", tp.double_data_size(), numel};
    case DataType::kComplex128: return {"double_data", tp.double_data_size(), 2 * numel};
    case DataType::kInt64: return {"int64_data", tp.int64_data_size(), numel};
    case DataType::kUInt32:
    case DataType::kUInt64: return {"uint64_data", tp.uint64_data_size(), numel};
    case DataType::kString: return {"string_data", tp.string_data_size(), numel};
    case DataType::kInt4:
    case DataType::kUInt4:
    case DataType::kFloat4E2M1:
    case DataType::kInt2:
    case DataType::kUInt2:  // packed: two or four elements per value
      return {"int32_data", tp.int32_data_size(), static_cast<int64_t>(stored_bytes(dt, numel))};
    default: return {"int32_data", tp.int32_data_size(), numel};
  }
}

// Copies repeated proto values into `out`, converting each to the element type T.
template <typename T, typename Field>
void copy_as(const Field& f, Tensor& out) {
  T* o = out.data<T>();
  for (int i = 0; i < f.size(); ++i) o[i] = static_cast<T>(f.Get(i));
}

Expected<Tensor> from_typed_fields(const ::onnx::TensorProto& tp, DataType dt, int64_t numel, const TensorSource& src) {
  if (dt == DataType::kUndefined) return bad(src, "has no data type");
  // Counted before allocating: the dims of a hostile file must not allocate more than it stores.
  const TypedField field = typed_field(tp, dt, numel);
  if (field.have != field.want)
    return bad(src, std::string(field.name) + " holds " + std::to_string(field.have) + " values, expected " +
                        std::to_string(field.want) + " for " + std::to_string(numel) + " " + dtype_name(dt) +
                        " elements");
  Tensor t = Tensor::empty(dt, shape_of(tp.dims()));
  switch (dt) {
    case DataType::kFloat32:
    case DataType::kComplex64: {
      const int64_t want = dt == DataType::kComplex64 ? 2 * numel : numel;
      if (want) std::memcpy(t.raw(), tp.float_data().data(), want * sizeof(float));
      return t;
    }
    case DataType::kFloat64:
    case DataType::kComplex128: {
      const int64_t want = dt == DataType::kComplex128 ? 2 * numel : numel;
      if (want) std::memcpy(t.raw(), tp.double_data().data(), want * sizeof(double));
      return t;
    }
    case DataType::kInt64:
      copy_as<int64_t>(tp.int64_data(), t);
      return t;
    case DataType::kUInt32:
      copy_as<uint32_t>(tp.uint64_data(), t);
      return t;
    case DataType::kUInt64:
      copy_as<uint64_t>(tp.uint64_data(), t);
      return t;
    case DataType::kInt32:
      copy_as<int32_t>(tp.int32_data(), t);
      return t;
    case DataType::kInt16:
      copy_as<int16_t>(tp.int32_data(), t);
      return t;
    case DataType::kUInt16:
    case DataType::kFloat16:
    case DataType::kBFloat16:
      copy_as<uint16_t>(tp.int32_data(), t);
      return t;
    case DataType::kInt8:
      copy_as<int8_t>(tp.int32_data(), t);
      return t;
    case DataType::kBool: {
      auto* o = t.data<uint8_t>();
      for (int64_t i = 0; i < numel; ++i) o[i] = tp.int32_data(static_cast<int>(i)) != 0;
      return t;
    }
    case DataType::kUInt8:
    case DataType::kFloat8E4M3FN:
    case DataType::kFloat8E4M3FNUZ:
    case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ:
    case DataType::kFloat8E8M0:
      copy_as<uint8_t>(tp.int32_data(), t);
      return t;
    case DataType::kInt4:
    case DataType::kUInt4:
    case DataType::kFloat4E2M1:
    case DataType::kInt2:
    case DataType::kUInt2: {
      // Two (4-bit) or four (2-bit) elements per int32 value, lowest bits first.
      const int64_t want = static_cast<int64_t>(stored_bytes(dt, numel));
      std::string packed(static_cast<size_t>(want), '\0');
      for (int64_t i = 0; i < want; ++i) packed[i] = static_cast<char>(tp.int32_data(static_cast<int>(i)) & 0xff);
      unpack(reinterpret_cast<const uint8_t*>(packed.data()), numel, dt, t.data<uint8_t>());
      return t;
    }
    case DataType::kString: {
      auto* o = t.data<std::string>();
      for (int64_t i = 0; i < numel; ++i) o[i] = tp.string_data(static_cast<int>(i));
      return t;
    }
    case DataType::kUndefined:
      break;
  }
  return bad(src, "has no data type");
}

}  // namespace

Expected<DataType> dtype_from_onnx(int64_t code, const std::string& what) {
  if (code == 0) return DataType::kUndefined;
  if (code < 0 || code > std::numeric_limits<int32_t>::max() || !dtype_is_valid(static_cast<int32_t>(code)))
    return invalid_model(what + ": unknown element type code " + std::to_string(code));
  return static_cast<DataType>(code);
}

Expected<Tensor> tensor_from_proto(const ::onnx::TensorProto& tp, const TensorSource& src, std::string_view raw_data) {
  KILN_ASSIGN_OR_RETURN(DataType dt, dtype_from_onnx(tp.data_type(), src.what));
  if (dt == DataType::kUndefined) return bad(src, "data_type is not set");
  if (tp.has_segment()) return unsupported(src.what + ": segmented tensors are not supported");
  KILN_ASSIGN_OR_RETURN(int64_t numel, checked_numel(tp.dims(), src));

  if (tp.data_location() == ::onnx::TensorProto_DataLocation_EXTERNAL) return from_external(tp, dt, numel, src);

  if (tp.has_raw_data()) {
    if (dt == DataType::kString) return bad(src, "string tensors must use string_data, not raw_data");
    const std::string_view raw = raw_data.empty() ? std::string_view(tp.raw_data()) : raw_data;
    const uint64_t want = stored_bytes(dt, numel);
    if (raw.size() != want)
      return bad(src, "raw_data has " + std::to_string(raw.size()) + " bytes, expected " + std::to_string(want) +
                          " for " + std::to_string(numel) + " " + dtype_name(dt) + " elements");
    Tensor t = Tensor::empty(dt, shape_of(tp.dims()));
    decode_raw(reinterpret_cast<const uint8_t*>(raw.data()), dt, t);
    return t;
  }
  return from_typed_fields(tp, dt, numel, src);
}

Expected<Tensor> tensor_from_sparse(const ::onnx::SparseTensorProto& sp, const TensorSource& src) {
  TensorSource vsrc{src.base_dir, src.what + " (values)"};
  TensorSource isrc{src.base_dir, src.what + " (indices)"};
  if (!sp.has_values()) return bad(src, "sparse tensor has no values");
  KILN_ASSIGN_OR_RETURN(Tensor values, tensor_from_proto(sp.values(), vsrc));
  KILN_ASSIGN_OR_RETURN(int64_t numel, checked_numel(sp.dims(), src));
  const Shape dense_shape = shape_of(sp.dims());
  const DataType dt = values.dtype();
  if (static_cast<uint64_t>(numel) * dtype_size(dt) > kMaxSparseDenseBytes)
    return unsupported(src.what + ": dense form of the sparse tensor " + shape_to_string(dense_shape) +
                       " exceeds 2 GiB");
  if (values.rank() != 1) return bad(src, "sparse values must be 1-D, got " + shape_to_string(values.shape()));
  const int64_t nnz = values.dim(0);
  const int rank = static_cast<int>(dense_shape.size());

  Tensor indices;
  if (sp.has_indices()) {
    KILN_ASSIGN_OR_RETURN(indices, tensor_from_proto(sp.indices(), isrc));
  } else if (nnz == 0) {
    indices = Tensor::empty(DataType::kInt64, {0});
  } else {
    return bad(src, "sparse tensor has no indices");
  }
  if (indices.dtype() != DataType::kInt64) return bad(src, "sparse indices must be int64");
  const bool linear = indices.rank() == 1;
  if (linear ? indices.dim(0) != nnz : (indices.rank() != 2 || indices.dim(0) != nnz || indices.dim(1) != rank))
    return bad(src, "sparse indices have shape " + shape_to_string(indices.shape()) + ", expected [" +
                        std::to_string(nnz) + "] or [" + std::to_string(nnz) + "," + std::to_string(rank) + "]");

  Tensor dense = Tensor::empty(dt, dense_shape);
  const int64_t* idx = indices.data<int64_t>();
  const size_t esize = dtype_size(dt);
  for (int64_t k = 0; k < nnz; ++k) {
    int64_t pos = 0;
    if (linear) {
      pos = idx[k];
    } else {
      for (int d = 0; d < rank; ++d) {
        const int64_t i = idx[k * rank + d];
        if (i < 0 || i >= dense_shape[d])
          return bad(src, "sparse index " + std::to_string(i) + " out of range for dimension " + std::to_string(d) +
                              " of size " + std::to_string(dense_shape[d]));
        pos = pos * dense_shape[d] + i;
      }
    }
    if (pos < 0 || pos >= numel)
      return bad(src, "sparse index " + std::to_string(pos) + " out of range for " + std::to_string(numel) + " elements");
    if (dt == DataType::kString) {
      dense.data<std::string>()[pos] = values.data<std::string>()[k];
    } else {
      std::memcpy(dense.data<uint8_t>() + pos * esize, values.data<uint8_t>() + k * esize, esize);
    }
  }
  return dense;
}

Expected<ir::Type> type_from_proto(const ::onnx::TypeProto& tp, const std::string& what) {
  ir::Type t;
  switch (tp.value_case()) {
    case ::onnx::TypeProto::kTensorType: {
      const auto& tt = tp.tensor_type();
      KILN_ASSIGN_OR_RETURN(t.dtype, dtype_from_onnx(tt.elem_type(), what));
      if (tt.has_shape()) {
        t.shape.known = true;
        for (const auto& d : tt.shape().dim()) {
          if (d.value_case() == ::onnx::TensorShapeProto_Dimension::kDimValue) {
            if (d.dim_value() < 0)
              return invalid_model(what + ": negative dimension " + std::to_string(d.dim_value()) + " in its type");
            t.shape.dims.emplace_back(d.dim_value());
          } else if (d.value_case() == ::onnx::TensorShapeProto_Dimension::kDimParam) {
            t.shape.dims.emplace_back(d.dim_param());
          } else {
            t.shape.dims.emplace_back();
          }
        }
      }
      return t;
    }
    case ::onnx::TypeProto::kSequenceType:
    case ::onnx::TypeProto::kOptionalType: {
      const bool seq = tp.value_case() == ::onnx::TypeProto::kSequenceType;
      t.kind = seq ? ir::Type::Kind::kSequence : ir::Type::Kind::kOptional;
      const bool has_elem = seq ? tp.sequence_type().has_elem_type() : tp.optional_type().has_elem_type();
      if (has_elem) {
        const auto& inner = seq ? tp.sequence_type().elem_type() : tp.optional_type().elem_type();
        KILN_ASSIGN_OR_RETURN(ir::Type e, type_from_proto(inner, what));
        t.elem = std::make_shared<ir::Type>(std::move(e));
      }
      return t;
    }
    case ::onnx::TypeProto::kMapType: {
      t.kind = ir::Type::Kind::kMap;
      KILN_ASSIGN_OR_RETURN(t.key_dtype, dtype_from_onnx(tp.map_type().key_type(), what));
      if (tp.map_type().has_value_type()) {
        KILN_ASSIGN_OR_RETURN(ir::Type e, type_from_proto(tp.map_type().value_type(), what));
        t.elem = std::make_shared<ir::Type>(std::move(e));
      }
      return t;
    }
    default:
      t.kind = ir::Type::Kind::kUnknown;
      return t;
  }
}

}  // namespace kiln::onnx

namespace kiln {

Expected<Tensor> read_tensor_proto(const std::string& path, std::string* name) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return not_found(path + ": " + ec.message());
  if (size > (size_t{1} << 31)) return invalid_argument(path + ": larger than 2 GiB (protobuf's limit)");
  std::ifstream f(path, std::ios::binary);
  if (!f) return io_error(path + ": cannot be opened");
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!f.read(bytes.data(), static_cast<std::streamsize>(size))) return io_error(path + ": read failed");
  ::onnx::TensorProto tp;
  if (!tp.ParseFromString(bytes)) return invalid_model(path + ": not a serialized onnx TensorProto");
  if (name) *name = tp.name();
  onnx::TensorSource src{std::filesystem::path(path).parent_path().string(), path};
  return onnx::tensor_from_proto(tp, src);
}

}  // namespace kiln
