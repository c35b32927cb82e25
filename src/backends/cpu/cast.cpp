// backends/cpu/cast.cpp — Cast and CastLike between every kiln dtype: float/double/float16/bfloat16,
// all integer widths, bool, string, the float8 variants, float4e2m1, float8e8m0, int4/uint4 and int2/uint2.
//
// Values travel through a wide intermediate (double for floating sources, int64 for signed, uint64 for
// unsigned and bool), in chunks, so each dtype needs one reader and one writer instead of a kernel per
// pair. Results follow numpy/ml_dtypes as ONNX's reference does: float → int truncates (out-of-range
// values wrap like x86's conversions), int → narrower int wraps, int4/uint4 (int2/uint2) keep the low 4 (2) bits,
// float8 rounds to nearest even with `saturate`, strings use numpy's shortest float repr.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/elementwise_common.h"
#include "backends/cpu/numeric_f64.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cpu {
namespace {

using namespace ew;

struct CastOptions {
  bool saturate = true;
  E8M0Round round = E8M0Round::kUp;
};

enum class Wide { kFloat, kSigned, kUnsigned, kNone };

Wide wide_kind(DataType dt) {
  switch (dt) {
    case DataType::kFloat32: case DataType::kFloat64: case DataType::kFloat16: case DataType::kBFloat16:
    case DataType::kFloat8E4M3FN: case DataType::kFloat8E4M3FNUZ: case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ: case DataType::kFloat4E2M1: case DataType::kFloat8E8M0:
      return Wide::kFloat;
    case DataType::kInt8: case DataType::kInt16: case DataType::kInt32: case DataType::kInt64: case DataType::kInt4:
    case DataType::kInt2:
      return Wide::kSigned;
    case DataType::kUInt8: case DataType::kUInt16: case DataType::kUInt32: case DataType::kUInt64:
    case DataType::kUInt4: case DataType::kUInt2: case DataType::kBool:
      return Wide::kUnsigned;
    default:
      return Wide::kNone;
  }
}

// Decodes a small float byte through a 256-entry table per format.
float mini_decode(uint8_t b, MiniFloat f) {
  static const auto tables = [] {
    std::vector<std::vector<float>> t(5, std::vector<float>(256));
    for (int k = 0; k < 5; ++k)
      for (int b = 0; b < 256; ++b) t[k][b] = mini_to_f32(static_cast<uint8_t>(b), static_cast<MiniFloat>(k));
    return t;
  }();
  return tables[static_cast<int>(f)][b];
}

// ---- Readers: n elements of `dt` at `in` into the wide buffer.
void read_float(DataType dt, const void* in, int64_t n, double* out) {
  MiniFloat mf;
  const auto* b = static_cast<const uint8_t*>(in);
  if (small_float_of(dt, &mf)) {
    for (int64_t i = 0; i < n; ++i) out[i] = mini_decode(b[i], mf);
  } else if (dt == DataType::kFloat8E8M0) {
    for (int64_t i = 0; i < n; ++i) out[i] = e8m0_to_f32(b[i]);
  } else {
    visit<kFloats>(dt, [&](auto tag) {
      using S = typename decltype(tag)::type;
      const S* p = static_cast<const S*>(in);
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<double>(load(p[i]));
    });
  }
}

void read_signed(DataType dt, const void* in, int64_t n, int64_t* out) {
  if (dt == DataType::kInt4) {
    const auto* b = static_cast<const uint8_t*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = ((b[i] & 0xf) ^ 8) - 8;
    return;
  }
  if (dt == DataType::kInt2) {
    const auto* b = static_cast<const uint8_t*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = ((b[i] & 0x3) ^ 2) - 2;
    return;
  }
  visit<kSigned>(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = static_cast<const S*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = p[i];
  });
}

void read_unsigned(DataType dt, const void* in, int64_t n, uint64_t* out) {
  if (dt == DataType::kUInt4) {
    const auto* b = static_cast<const uint8_t*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = b[i] & 0xf;
    return;
  }
  if (dt == DataType::kUInt2) {
    const auto* b = static_cast<const uint8_t*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = b[i] & 0x3;
    return;
  }
  visit<kUnsigned | kBoolT>(dt, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = static_cast<const S*>(in);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<uint64_t>(p[i]);
  });
}

// ---- Writers: one wide value to dtype D.
// double → integer the way numpy does on x86: through int32 for types narrower than 32 bits and for
// int32, through int64 otherwise; NaN and out-of-range values give the minimum, then wrap.
template <typename D> D int_from_double(double d) {
  if constexpr (sizeof(D) < 4 || std::is_same_v<D, int32_t>) {
    const int32_t v = (d > -2147483649.0 && d < 2147483648.0) ? static_cast<int32_t>(d) : INT32_MIN;
    return static_cast<D>(v);
  } else if constexpr (std::is_same_v<D, uint64_t>) {
    if (d >= 9223372036854775808.0 && d < 18446744073709551616.0) return static_cast<uint64_t>(d);
    return static_cast<uint64_t>(int_from_double<int64_t>(d));
  } else {
    const int64_t v = (d >= -9223372036854775808.0 && d < 9223372036854775808.0) ? static_cast<int64_t>(d) : INT64_MIN;
    return static_cast<D>(v);
  }
}

template <typename D, typename W> D int_from(W w) {
  if constexpr (std::is_same_v<W, double>) return int_from_double<D>(w);
  else return static_cast<D>(w);
}

template <typename W> float to_f32(W w) { return static_cast<float>(w); }

template <typename W>
bool write_wide(DataType dt, const W* in, int64_t n, void* out, const CastOptions& o) {
  MiniFloat mf;
  auto* b = static_cast<uint8_t*>(out);
  if (small_float_of(dt, &mf)) {
    for (int64_t i = 0; i < n; ++i) b[i] = f32_to_mini(to_f32(in[i]), mf, o.saturate);
    return true;
  }
  switch (dt) {
    case DataType::kFloat8E8M0:
      for (int64_t i = 0; i < n; ++i) b[i] = f32_to_e8m0(to_f32(in[i]), o.saturate, o.round);
      return true;
    case DataType::kInt4:
      for (int64_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(((int_from<int64_t>(in[i]) & 0xf) ^ 8) - 8);
      return true;
    case DataType::kUInt4:
      for (int64_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(int_from<uint64_t>(in[i]) & 0xf);
      return true;
    case DataType::kInt2:
      for (int64_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(((int_from<int64_t>(in[i]) & 0x3) ^ 2) - 2);
      return true;
    case DataType::kUInt2:
      for (int64_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(int_from<uint64_t>(in[i]) & 0x3);
      return true;
    case DataType::kBool:
      for (int64_t i = 0; i < n; ++i) static_cast<bool*>(out)[i] = in[i] != 0;
      return true;
    default:
      break;
  }
  return visit<kNumeric>(dt, [&](auto tag) {
    using D = typename decltype(tag)::type;
    D* p = static_cast<D*>(out);
    if constexpr (std::is_integral_v<D>) {
      for (int64_t i = 0; i < n; ++i) p[i] = int_from<D>(in[i]);
    } else if constexpr (std::is_same_v<D, double>) {
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<double>(in[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i] = store<D>(to_f32(in[i]));
    }
  });
}

// ---- Strings
// numpy's str() of a float: shortest digits that round-trip; positional for 1e-4 <= |x| < 1e16
// ("0.47892547", "1.0", "100.0"), scientific otherwise ("1e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string numpy_float_str(double v, const std::string& shortest_sci) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // shortest_sci is like "-4.7892547e-01": split into sign, digits and exponent.
  std::string s = shortest_sci;
  std::string sign;
  if (!s.empty() && s[0] == '-') { sign = "-"; s = s.substr(1); }
  const size_t epos = s.find('e');
  const int exp10 = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (s[i] != '.') digits += s[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const double a = std::fabs(v);
  if (a == 0 || (a >= 1e-4 && a < 1e16)) {
    std::string r;
    if (exp10 >= 0) {
      std::string ip = digits.substr(0, std::min<size_t>(digits.size(), exp10 + 1));
      while (static_cast<int>(ip.size()) < exp10 + 1) ip += '0';
      std::string fp = static_cast<int>(digits.size()) > exp10 + 1 ? digits.substr(exp10 + 1) : "0";
      r = ip + "." + fp;
    } else {
      r = "0." + std::string(-exp10 - 1, '0') + digits;
    }
    return sign + r;
  }
  std::string m = digits.substr(0, 1);
  if (digits.size() > 1) m += "." + digits.substr(1);
  char e[16];
  std::snprintf(e, sizeof(e), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return sign + m + e;
}

template <typename F> std::string shortest_sci(F v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  return std::string(buf, res.ptr);
}

// Shortest scientific form of a float16/bfloat16/float8 value: the fewest digits that read back to
// the same bits through `encode`.
template <typename Enc> std::string shortest_small(float v, Enc encode) {
  const auto want = encode(v);
  char buf[64];
  for (int p = 0; p < 9; ++p) {
    std::snprintf(buf, sizeof(buf), "%.*e", p, static_cast<double>(v));
    if (encode(std::strtof(buf, nullptr)) == want) break;
  }
  return buf;
}

std::string element_to_string(DataType dt, const void* base, int64_t i) {
  switch (dt) {
    case DataType::kFloat32: {
      const float v = static_cast<const float*>(base)[i];
      return numpy_float_str(v, shortest_sci(v));
    }
    case DataType::kFloat64: {
      const double v = static_cast<const double*>(base)[i];
      return numpy_float_str(v, shortest_sci(v));
    }
    case DataType::kFloat16: {
      const float v = f16_to_f32(static_cast<const uint16_t*>(base)[i]);
      return numpy_float_str(v, shortest_small(v, [](float x) { return f32_to_f16(x); }));
    }
    case DataType::kBFloat16: {
      const float v = bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
      return numpy_float_str(v, shortest_small(v, [](float x) { return f32_to_bf16(x); }));
    }
    case DataType::kBool:
      return static_cast<const bool*>(base)[i] ? "True" : "False";
    default:
      break;
  }
  switch (wide_kind(dt)) {
    case Wide::kFloat: {
      double v;
      read_float(dt, static_cast<const uint8_t*>(base) + i, 1, &v);
      return numpy_float_str(v, shortest_sci(static_cast<float>(v)));
    }
    case Wide::kSigned: {
      int64_t v;
      read_signed(dt, static_cast<const uint8_t*>(base) + i * dtype_size(dt), 1, &v);
      return std::to_string(v);
    }
    case Wide::kUnsigned: {
      uint64_t v;
      read_unsigned(dt, static_cast<const uint8_t*>(base) + i * dtype_size(dt), 1, &v);
      return std::to_string(v);
    }
    case Wide::kNone:
      break;
  }
  return "";
}

Status cast_from_string(const Tensor& X, Tensor& Y, const CastOptions& o) {
  const auto* s = X.data<std::string>();
  const int64_t n = X.numel();
  const DataType dt = Y.dtype();
  const size_t esize = dtype_size(dt);
  auto* out = static_cast<uint8_t*>(Y.raw());
  for (int64_t i = 0; i < n; ++i) {
    const char* c = s[i].c_str();
    char* end = nullptr;
    bool ok;
    if (dt == DataType::kBool) {
      const std::string& t = s[i];
      bool v = !(t.empty() || t == "False" || t == "false" || t == "0");
      if (v && t != "True" && t != "true") {
        const double d = std::strtod(c, &end);
        if (end != c && *end == 0) v = d != 0;
      }
      static_cast<bool*>(Y.raw())[i] = v;
      continue;
    }
    switch (wide_kind(dt)) {
      case Wide::kSigned: {
        int64_t v = std::strtoll(c, &end, 10);
        if (end == c || *end != 0) v = int_from<int64_t>(std::strtod(c, &end));
        ok = write_wide(dt, &v, 1, out + i * esize, o);
        break;
      }
      case Wide::kUnsigned: {
        uint64_t v = std::strtoull(c, &end, 10);
        if (end == c || *end != 0 || s[i].find('-') != std::string::npos)
          v = int_from<uint64_t>(std::strtod(c, &end));
        ok = write_wide(dt, &v, 1, out + i * esize, o);
        break;
      }
      default: {
        const double v = std::strtod(c, &end);
        ok = write_wide(dt, &v, 1, out + i * esize, o);
        break;
      }
    }
    if (!ok) return unsupported(std::string("cast from string to ") + dtype_name(dt) + " is not supported");
  }
  return Status::Ok();
}

// Casts X into Y (allocated with the target dtype and X's shape).
Status cast_tensor(const Tensor& X, Tensor& Y, const CastOptions& o) {
  const DataType from = X.dtype(), to = Y.dtype();
  const int64_t n = X.numel();
  if (from == to) {
    copy_tensor(X, Y);
    return Status::Ok();
  }
  if (to == DataType::kString) {
    if (wide_kind(from) == Wide::kNone) return unsupported(std::string("cast from ") + dtype_name(from) + " to string");
    auto* out = Y.data<std::string>();
    for (int64_t i = 0; i < n; ++i) out[i] = element_to_string(from, X.raw(), i);
    return Status::Ok();
  }
  if (from == DataType::kString) return cast_from_string(X, Y, o);
  const Wide kind = wide_kind(from);
  if (kind == Wide::kNone || wide_kind(to) == Wide::kNone)
    return unsupported(std::string("cast from ") + dtype_name(from) + " to " + dtype_name(to) + " is not supported");
  const size_t in_size = dtype_size(from), out_size = dtype_size(to);
  const auto* in = static_cast<const uint8_t*>(X.raw());
  auto* out = static_cast<uint8_t*>(Y.raw());
  parallel_for(n, 1 << 14, [&](int64_t b, int64_t e) {
    constexpr int64_t kChunk = 256;
    double fbuf[kChunk];
    int64_t ibuf[kChunk];
    uint64_t ubuf[kChunk];
    for (int64_t c = b; c < e; c += kChunk) {
      const int64_t len = std::min(kChunk, e - c);
      const void* src = in + c * in_size;
      void* dst = out + c * out_size;
      switch (kind) {
        case Wide::kFloat: read_float(from, src, len, fbuf); write_wide(to, fbuf, len, dst, o); break;
        case Wide::kSigned: read_signed(from, src, len, ibuf); write_wide(to, ibuf, len, dst, o); break;
        case Wide::kUnsigned: read_unsigned(from, src, len, ubuf); write_wide(to, ubuf, len, dst, o); break;
        case Wide::kNone: break;
      }
    }
  });
  return Status::Ok();
}

CastOptions options_of(const ops::CastParams& p) {
  using Round = ops::CastParams::Round;
  CastOptions o;
  o.saturate = p.saturate;
  o.round = p.round == Round::kNearest ? E8M0Round::kNearest
            : p.round == Round::kDown  ? E8M0Round::kDown
                                       : E8M0Round::kUp;
  return o;
}

void add_cast(KernelRegistry& r, bool like) {
  KernelDef d;
  d.op = like ? "CastLike" : "Cast";
  d.since = like ? 15 : 1;
  d.name = like ? "cpu.CastLike" : "cpu.Cast";
  d.check = [like](const ir::Node& n) -> std::string {
    // parse_cast would reject a missing 'to' as dtype 0; name the attribute instead, and leave an invalid
    // code to the factory's error.
    if (!like && !ops::parse_cast_unchecked(n).has_to) return "Cast needs the 'to' attribute";
    return "";
  };
  d.create = [like](const ir::Node& node, KernelInit&) -> Expected<KernelPtr> {
    KILN_ASSIGN_OR_RETURN(const ops::CastParams p, ops::parse_cast(node));
    const CastOptions o = options_of(p);
    const DataType to = p.to;  // CastLike: undefined, its target is input 1's dtype
    auto reshape = [like, to](ReshapeContext& rc) -> Status {
      if (rc.in.empty() || !rc.in[0].present || (like && (rc.in.size() < 2 || !rc.in[1].present)))
        return rc.error(like ? "needs input and target_type" : "needs its input");
      rc.out[0] = {like ? rc.in[1].dtype : to, rc.in[0].shape};
      return Status::Ok();
    };
    return make_staged(reshape, [o](KernelContext& ctx) -> Status {
      Status st = cast_tensor(ctx.input(0), ctx.output(0), o);
      if (!st.ok()) return ctx.error(st.message());
      return Status::Ok();
    });
  };
  r.add(std::move(d));
}

}  // namespace

void register_cast(KernelRegistry& r) {
  add_cast(r, false);
  add_cast(r, true);
}

}  // namespace kiln::cpu
