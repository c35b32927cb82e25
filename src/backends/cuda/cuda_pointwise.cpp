// backends/cuda/cuda_pointwise.cpp — kiln.Pointwise on the GPU: CUDA source written from the node's
// program (ops/pointwise.h), compiled with NVRTC for the device's architecture when the kernel is
// created, loaded as a library and launched on the context's stream.
//
// The generated kernel reads each input once per element of Y (float16/bfloat16 widened exactly),
// runs the program in float32 registers and stores Y once. Inputs of Y's own size are read at Y's
// index; broadcast inputs through their strides along Y's dims (computed at reshape, per shape).
// The source depends on the program and the input/output types only, so equal regions of a model
// (every layer's) share one compiled kernel: compiled kernels are cached for the process by source
// and architecture (the libraries stay loaded until the process ends).
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/op_table.h"
#include "ops/pointwise.h"

namespace kiln::cuda {
namespace {

using ops::PwOp;

constexpr int kThreads = 256;

// Kernel parameters (the generated source declares the same layout for the program's input count).
struct PwArgs {
  const void* in[ops::kPointwiseMaxInputs];
  void* out;
  int64_t n;
  int32_t rank;
  int32_t flat;   // bit k: input k has Y's size (read at Y's index)
  int32_t vec;    // 1: four elements a thread, 2: eight (set at run, where the pointers allow it)
  int32_t inner;  // bit k: input k is contiguous along Y's last (merged) dim, not broadcast along it
  int64_t dims[kMaxRank];
  int64_t strides[ops::kPointwiseMaxInputs][kMaxRank];
};

std::string expr(PwOp op, const std::string& a, const std::string& b) {
  switch (op) {
    // Rounded ops, never contracted with a neighbour into an FMA: the unfused graph rounds each.
    case PwOp::kAdd: return "__fadd_rn(" + a + ", " + b + ")";
    case PwOp::kSub: return "__fsub_rn(" + a + ", " + b + ")";
    case PwOp::kMul: return "__fmul_rn(" + a + ", " + b + ")";
    case PwOp::kDiv: return a + " / " + b;
    case PwOp::kPow: return "powf(" + a + ", " + b + ")";
    case PwOp::kMax: return "(" + a + " != " + a + " || " + a + " > " + b + ") ? " + a + " : " + b;
    case PwOp::kMin: return "(" + a + " != " + a + " || " + a + " < " + b + ") ? " + a + " : " + b;
    case PwOp::kLeakyRelu: return a + " >= 0.f ? " + a + " : " + b + " * " + a;
    case PwOp::kElu: return a + " > 0.f ? " + a + " : " + b + " * (expf(" + a + ") - 1.f)";
    case PwOp::kClampLo: return a + " < " + b + " ? " + b + " : " + a;
    case PwOp::kClampHi: return a + " > " + b + " ? " + b + " : " + a;
    case PwOp::kRelu: return a + " < 0.f ? 0.f : " + a;
    case PwOp::kSigmoid: return "1.f / (1.f + expf(-" + a + "))";
    case PwOp::kTanh: return "tanhf(" + a + ")";
    case PwOp::kExp: return "expf(" + a + ")";
    case PwOp::kLog: return "logf(" + a + ")";
    case PwOp::kSqrt: return "sqrtf(" + a + ")";
    case PwOp::kAbs: return "fabsf(" + a + ")";
    case PwOp::kNeg: return "-" + a;
    case PwOp::kErf: return "erff(" + a + ")";
    case PwOp::kReciprocal: return "1.f / " + a;
    case PwOp::kFloor: return "floorf(" + a + ")";
    case PwOp::kCeil: return "ceilf(" + a + ")";
    case PwOp::kGelu: return "0.5f * " + a + " * (1.f + erff(" + a + " * 0.70710678118654752f))";
    case PwOp::kGeluTanh:
      return "0.5f * " + a + " * (1.f + tanhf(0.79788456080286536f * (" + a + " + 0.044715f * " + a + " * " + a + " * " + a + ")))";
    case PwOp::kSoftplus: return a + " > 20.f ? " + a + " : log1pf(expf(" + a + "))";
    case PwOp::kHardSwish: return a + " * clamp01(" + a + " / 6.f + 0.5f)";
    case PwOp::kSin: return "sinf(" + a + ")";
    case PwOp::kCos: return "cosf(" + a + ")";
    case PwOp::kRoundHalf: return "f16v(st_f16(" + a + "))";
    case PwOp::kRoundBFloat16: return "bf16v(st_bf16(" + a + "))";
    case PwOp::kConst:
    case PwOp::kCount: break;
  }
  return a;
}

std::string float_literal(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return "__uint_as_float(" + std::to_string(bits) + "u)";  // exact, NaN and infinities included
}

}  // namespace

// The kernel's source for a program with these input types (the tests print it when a kernel fails).
std::string pointwise_source(const ops::PointwiseProgram& p, const std::vector<DataType>& in_types) {
  std::ostringstream s;
  const int n = p.inputs;
  const std::string all = std::to_string((1 << n) - 1);
  s << "typedef unsigned short u16;\ntypedef long long i64;\n"
       "struct Args { const void* in[" << ops::kPointwiseMaxInputs << "]; void* out; i64 n; int rank; int flat; int vec; "
       "int inner; i64 dims[" << kMaxRank << "]; i64 strides[" << ops::kPointwiseMaxInputs << "][" << kMaxRank << "]; };\n"
       "__device__ __forceinline__ float f16v(u16 h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n"
       "__device__ __forceinline__ float bf16v(u16 h) { return __uint_as_float(((unsigned)h) << 16); }\n"
       "__device__ __forceinline__ u16 st_f16(float f) { u16 h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
       "__device__ __forceinline__ u16 st_bf16(float f) { u16 h; asm(\"cvt.rn.bf16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
       "__device__ __forceinline__ float ld_f32(const void* p, i64 i) { return ((const float*)p)[i]; }\n"
       "__device__ __forceinline__ float ld_f16(const void* p, i64 i) { return f16v(((const u16*)p)[i]); }\n"
       "__device__ __forceinline__ float ld_bf16(const void* p, i64 i) { return bf16v(((const u16*)p)[i]); }\n"
       "__device__ __forceinline__ void ld4_f32(const void* p, i64 i, float* v) {\n"
       "  const float4 x = *(const float4*)((const float*)p + i); v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w; }\n"
       "__device__ __forceinline__ void ld4_f16(const void* p, i64 i, float* v) {\n"
       "  const uint2 x = *(const uint2*)((const u16*)p + i);\n"
       "  v[0] = f16v((u16)x.x); v[1] = f16v((u16)(x.x >> 16)); v[2] = f16v((u16)x.y); v[3] = f16v((u16)(x.y >> 16)); }\n"
       "__device__ __forceinline__ void ld4_bf16(const void* p, i64 i, float* v) {\n"
       "  const uint2 x = *(const uint2*)((const u16*)p + i);\n"
       "  v[0] = bf16v((u16)x.x); v[1] = bf16v((u16)(x.x >> 16)); v[2] = bf16v((u16)x.y); v[3] = bf16v((u16)(x.y >> 16)); }\n"
       "__device__ __forceinline__ void ld8_f32(const void* p, i64 i, float* v) { ld4_f32(p, i, v); ld4_f32(p, i + 4, v + 4); }\n"
       "__device__ __forceinline__ void ld8_f16(const void* p, i64 i, float* v) {\n"
       "  const uint4 x = *(const uint4*)((const u16*)p + i); const unsigned w[4] = {x.x, x.y, x.z, x.w};\n"
       "  for (int k = 0; k < 4; ++k) { v[2 * k] = f16v((u16)w[k]); v[2 * k + 1] = f16v((u16)(w[k] >> 16)); } }\n"
       "__device__ __forceinline__ void ld8_bf16(const void* p, i64 i, float* v) {\n"
       "  const uint4 x = *(const uint4*)((const u16*)p + i); const unsigned w[4] = {x.x, x.y, x.z, x.w};\n"
       "  for (int k = 0; k < 4; ++k) { v[2 * k] = bf16v((u16)w[k]); v[2 * k + 1] = bf16v((u16)(w[k] >> 16)); } }\n"
       "__device__ __forceinline__ float clamp01(float t) { return t != t ? t : t < 0.f ? 0.f : t > 1.f ? 1.f : t; }\n";
  // Each input's offset for Y's element i: i itself for inputs of Y's size, else through the strides
  // along Y's (merged) dims; 32-bit arithmetic where Y has fewer than 2^31 elements (a 64-bit
  // division costs several times as much).
  auto offsets = [&](const char* pad) {
    for (int k = 0; k < n; ++k) s << pad << "i64 o" << k << " = (a.flat & " << (1 << k) << ") ? i : 0;\n";
    for (const char* ty : {"unsigned", "i64"}) {
      const bool narrow = ty[0] == 'u';
      s << pad << (narrow ? "if (a.flat != " + all + " && a.n <= 0x7fffffff) {\n" : "else if (a.flat != " + all + ") {\n")
        << pad << "  " << ty << " rem = (" << ty << ")i;\n"
        << "#pragma unroll\n"
        << pad << "  for (int d = " << kMaxRank - 1 << "; d >= 0; --d) {\n"
        << pad << "    if (d >= a.rank) continue;\n"
        << pad << "    const " << ty << " dim = (" << ty << ")a.dims[d], c = rem % dim;\n"
        << pad << "    rem /= dim;\n";
      for (int k = 0; k < n; ++k)
        s << pad << "    if (!(a.flat & " << (1 << k) << ")) o" << k << " += (i64)c * a.strides[" << k << "][d];\n";
      s << pad << "  }\n" << pad << "}\n";
    }
  };
  auto type_suffix = [](DataType dt) { return dt == DataType::kFloat16 ? "f16" : dt == DataType::kBFloat16 ? "bf16" : "f32"; };
  // The program for `lanes` neighbouring elements (registers r<k>_<lane>), stored at i.
  auto body = [&](int lanes, const char* pad) {
    for (int k = 0; k < n; ++k) {
      const std::string t = type_suffix(in_types[k]);
      s << pad << "float r" << k << "[" << lanes << "];\n";
      if (lanes == 1) {
        s << pad << "r" << k << "[0] = ld_" << t << "(a.in[" << k << "], o" << k << ");\n";
      } else {  // contiguous along the last dim: one load of the lanes; broadcast along it: one value
        s << pad << "if ((a.flat | a.inner) & " << (1 << k) << ") ld" << lanes << "_" << t << "(a.in[" << k << "], o" << k << ", r" << k
          << ");\n"
          << pad << "else { r" << k << "[0] = ld_" << t << "(a.in[" << k << "], o" << k << "); for (int q = 1; q < " << lanes
          << "; ++q) r" << k << "[q] = r" << k << "[0]; }\n";
      }
    }
    for (int q = 0; q < lanes; ++q) {
      auto reg = [&](int r) {
        return r < n ? "r" + std::to_string(r) + "[" + std::to_string(q) + "]" : "t" + std::to_string(r) + "_" + std::to_string(q);
      };
      for (size_t c = 0; c < p.code.size(); ++c) {
        const ops::PwInstr& in = p.code[c];
        const std::string rhs = in.op == PwOp::kConst ? float_literal(p.constants[in.a]) : expr(in.op, reg(in.a), reg(in.b));
        s << pad << "const float " << reg(n + static_cast<int>(c)) << " = " << rhs << ";\n";
      }
    }
    auto res = [&](int q) { return "t" + std::to_string(p.result()) + "_" + std::to_string(q); };
    if (lanes == 1) {
      if (p.dtype == DataType::kFloat32) s << pad << "((float*)a.out)[i] = " << res(0) << ";\n";
      else s << pad << "((u16*)a.out)[i] = st_" << type_suffix(p.dtype) << "(" << res(0) << ");\n";
    } else if (p.dtype == DataType::kFloat32) {
      for (int q = 0; q < lanes; q += 4)
        s << pad << "*(float4*)((float*)a.out + i + " << q << ") = make_float4(" << res(q) << ", " << res(q + 1) << ", " << res(q + 2)
          << ", " << res(q + 3) << ");\n";
    } else {
      const std::string st = std::string("st_") + type_suffix(p.dtype);
      auto pair = [&](int q) {
        return "(unsigned)" + st + "(" + res(q) + ") | ((unsigned)" + st + "(" + res(q + 1) + ") << 16)";
      };
      if (lanes == 4) s << pad << "*(uint2*)((u16*)a.out + i) = make_uint2(" << pair(0) << ", " << pair(2) << ");\n";
      else s << pad << "*(uint4*)((u16*)a.out + i) = make_uint4(" << pair(0) << ", " << pair(2) << ", " << pair(4) << ", " << pair(6) << ");\n";
    }
  };
  s << "extern \"C\" __global__ void __launch_bounds__(" << kThreads << ") kiln_pointwise(Args a) {\n"
       "  const i64 step = (i64)gridDim.x * blockDim.x, first = (i64)blockIdx.x * blockDim.x + threadIdx.x;\n"
       "  if (a.vec == 2) {\n"
       "    for (i64 i8 = first; i8 < a.n / 8; i8 += step) {\n"
       "      const i64 i = i8 * 8;\n";
  offsets("      ");
  body(8, "      ");
  s << "    }\n    return;\n  }\n"
       "  if (a.vec == 1) {\n"
       "    for (i64 i4 = first; i4 < a.n / 4; i4 += step) {\n"
       "      const i64 i = i4 * 4;\n";
  offsets("      ");
  body(4, "      ");
  s << "    }\n    return;\n  }\n"
       "  for (i64 i = first; i < a.n; i += step) {\n";
  offsets("    ");
  body(1, "    ");
  s << "  }\n}\n";
  return s.str();
}

namespace {

// The kernel of a source, compiled once per process and architecture.
Expected<cudaKernel_t> compiled(const std::string& source) {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return runtime_error("kiln.Pointwise: cannot read the GPU's compute capability");
  // Machine code for the device where this NVRTC knows its architecture; else PTX for the newest one
  // it knows below it, which the driver compiles when it loads it (a GPU newer than the toolkit).
  const int cc = major * 10 + minor;
  int known = 0, best = 0;
  std::vector<int> archs;
  if (nvrtcGetNumSupportedArchs(&known) == NVRTC_SUCCESS && known > 0) {
    archs.resize(static_cast<size_t>(known));
    if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) archs.clear();
  }
  for (int a : archs)
    if (a <= cc) best = std::max(best, a);
  if (best == 0) return runtime_error("kiln.Pointwise: this NVRTC compiles for no architecture up to sm_" + std::to_string(cc));
  const bool native = best == cc;
  const std::string arch = std::string("--gpu-architecture=") + (native ? "sm_" : "compute_") + std::to_string(best);
  static std::mutex mu;
  static std::map<std::string, cudaKernel_t> cache;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = arch + "\n" + source;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  nvrtcProgram prog = nullptr;
  if (nvrtcCreateProgram(&prog, source.c_str(), "kiln_pointwise.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return runtime_error("kiln.Pointwise: NVRTC could not take the generated source");
  std::unique_ptr<nvrtcProgram, void (*)(nvrtcProgram*)> owned(&prog, [](nvrtcProgram* p) { nvrtcDestroyProgram(p); });
  const char* opts[] = {arch.c_str(), "--std=c++17"};
  if (nvrtcCompileProgram(prog, 2, opts) != NVRTC_SUCCESS) {
    size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    if (n) nvrtcGetProgramLog(prog, log.data());
    return runtime_error("kiln.Pointwise: NVRTC failed to compile the generated kernel (" + arch + "): " + log);
  }
  size_t bytes = 0;
  const nvrtcResult sized = native ? nvrtcGetCUBINSize(prog, &bytes) : nvrtcGetPTXSize(prog, &bytes);
  if (sized != NVRTC_SUCCESS || bytes == 0) return runtime_error("kiln.Pointwise: NVRTC made no device code for " + arch);
  std::vector<char> cubin(bytes);
  if ((native ? nvrtcGetCUBIN(prog, cubin.data()) : nvrtcGetPTX(prog, cubin.data())) != NVRTC_SUCCESS)
    return runtime_error("kiln.Pointwise: NVRTC's device code unreadable");
  cudaLibrary_t lib = nullptr;
  cudaKernel_t kernel = nullptr;
  if (cudaError_t e = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0); e != cudaSuccess)
    return runtime_error(std::string("kiln.Pointwise: loading the compiled kernel failed: ") + cudaGetErrorString(e));
  if (cudaError_t e = cudaLibraryGetKernel(&kernel, lib, "kiln_pointwise"); e != cudaSuccess)
    return runtime_error(std::string("kiln.Pointwise: the compiled kernel is missing: ") + cudaGetErrorString(e));
  cache.emplace(key, kernel);
  return kernel;
}

std::string check_pointwise(const ir::Node& n) {
  auto p = ops::parse_pointwise(n);
  if (!p.ok()) return p.status().message();
  for (const ir::Value* v : n.inputs) {
    if (!v || !ops::pw_float(v->type.dtype)) return "inputs must be float32, float16 or bfloat16 of known types";
    if (v->type.shape.known && v->type.shape.rank() > kMaxRank) return "inputs of rank above " + std::to_string(kMaxRank);
  }
  if (n.outputs[0] && n.outputs[0]->type.shape.known && n.outputs[0]->type.shape.rank() > kMaxRank)
    return "Y of rank above " + std::to_string(kMaxRank);
  return "";
}

Expected<KernelPtr> create_pointwise(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::PointwiseProgram p, ops::parse_pointwise(n));
  std::vector<DataType> types;
  for (const ir::Value* v : n.inputs) types.push_back(v->type.dtype);
  KILN_ASSIGN_OR_RETURN(const cudaKernel_t kernel, compiled(pointwise_source(p, types)));
  auto reshape = [types, dt = p.dtype](ReshapeContext& rc) -> Status {
    Shape out;
    for (size_t i = 0; i < rc.in.size(); ++i) {
      if (!rc.in[i].present || rc.in[i].dtype != types[i])
        return rc.error("input " + std::to_string(i) + " must be " + dtype_name(types[i]) + " (the kernel was generated for it)");
      Shape b;
      if (!ops::broadcast_shapes(out, rc.in[i].shape, &b))
        return rc.error("input " + std::to_string(i) + "'s shape does not broadcast with the others'");
      out = b;
    }
    if (out.size() > static_cast<size_t>(kMaxRank)) return rc.error("Y of rank above " + std::to_string(kMaxRank));
    auto a = std::make_shared<PwArgs>();
    *a = PwArgs{};
    const int rank = static_cast<int>(out.size());
    a->n = shape_numel(out);
    int64_t st[ops::kPointwiseMaxInputs][kMaxRank] = {};
    for (size_t k = 0; k < rc.in.size(); ++k) {
      const Shape& s = rc.in[k].shape;
      if (shape_numel(s) == a->n) a->flat |= 1 << k;
      int64_t step = 1;
      for (int d = static_cast<int>(s.size()) - 1, o = rank - 1; d >= 0; --d, --o) {
        if (s[d] != 1) st[k][o] = step;
        step *= s[d];
      }
    }
    // Y's dims of 1 dropped (they move no index) and neighbours merged where every input steps through
    // them as through one (broadcast along both, or contiguous): a bias-like [C] against [N,H,W,C]
    // indexes as [N·H·W, C], one division an element.
    int r = 0;
    for (int d = 0; d < rank; ++d) {
      if (out[d] == 1) continue;
      bool merge = r > 0;
      for (size_t k = 0; k < rc.in.size() && merge; ++k) merge = a->strides[k][r - 1] == st[k][d] * out[d];
      if (merge) {
        a->dims[r - 1] *= out[d];
        for (size_t k = 0; k < rc.in.size(); ++k) a->strides[k][r - 1] = st[k][d];
        continue;
      }
      a->dims[r] = out[d];
      for (size_t k = 0; k < rc.in.size(); ++k) a->strides[k][r] = st[k][d];
      ++r;
    }
    a->rank = r;
    // Eight (or four) elements a thread where Y's last dim is a multiple of 8 (4) and every input is
    // contiguous or broadcast along it (then every offset of an element i, a multiple of 8 (4), is too).
    bool lanes_ok = r > 0;
    for (size_t k = 0; k < rc.in.size() && lanes_ok; ++k) {
      const int64_t last = a->strides[k][r - 1];
      if (last == 1) a->inner |= 1 << k;
      lanes_ok = (a->flat >> k & 1) || last == 0 || last == 1;
    }
    a->vec = !lanes_ok ? 0 : a->n % 8 == 0 && a->dims[r - 1] % 8 == 0 ? 2 : a->n % 4 == 0 && a->dims[r - 1] % 4 == 0 ? 1 : 0;
    rc.out[0] = {dt, out};
    rc.state = a;
    return Status::Ok();
  };
  auto run = [kernel](KernelContext& ctx) -> Status {
    PwArgs a = *static_cast<const PwArgs*>(ctx.shape_state());
    if (a.n == 0) return Status::Ok();
    for (int k = 0; k < ctx.num_inputs(); ++k) a.in[k] = ctx.input(k).raw();
    Tensor& y = ctx.output(0);
    a.out = y.raw();
    // The eight- and four-element loads and stores need pointers aligned to that many elements.
    auto aligned = [](const void* q, size_t bytes) { return reinterpret_cast<uintptr_t>(q) % bytes == 0; };
    auto all_aligned = [&](int lanes) {
      for (int k = 0; k < ctx.num_inputs(); ++k)
        if ((a.flat | a.inner) >> k & 1 && !aligned(a.in[k], lanes * dtype_size(ctx.input(k).dtype()))) return false;
      return aligned(a.out, lanes * dtype_size(y.dtype()));
    };
    if (a.vec == 2 && !all_aligned(8)) a.vec = 1;
    if (a.vec == 1 && !all_aligned(4)) a.vec = 0;
    const int64_t work = a.vec == 2 ? a.n / 8 : a.vec == 1 ? a.n / 4 : a.n;
    const int64_t blocks = std::min<int64_t>((work + kThreads - 1) / kThreads, int64_t{1} << 20);
    void* params[] = {&a};
    return launched(ctx, cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(static_cast<unsigned>(blocks)),
                                          dim3(kThreads), params, 0, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_pointwise(KernelRegistry& r) {
  r.add(kernel_row("Pointwise", 1, check_pointwise, [](const ir::Node& n, KernelInit&) { return create_pointwise(n); }, "kiln"));
}

}  // namespace kiln::cuda
