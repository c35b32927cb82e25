// plugins/ort_api.cpp — the OrtApi function table kiln hands to ONNX Runtime custom-op libraries: status,
// custom-op domains, kernel info (attributes, inputs, outputs), kernel context (inputs, outputs made with
// the shape the op gives), tensor type and shape info, string tensors, allocators, memory info, logging,
// and an answer naming the function for every other slot (plugins/ort_api.h says what the layouts are).
//
// Every function here is called by foreign code through a C ABI: none lets an exception out, each checks
// its pointers (a null where one is required is an error status, not a crash) and answers a status
// naming itself on a bad argument.
#include "plugins/ort_api.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "util/log.h"

namespace kiln::plugins::ort {

namespace {

const char* const kSlotNames[] = {
#define KILN_ORT_SLOT(name, kind) #name,
#include "plugins/ort_api_slots.inc"
#undef KILN_ORT_SLOT
};
const bool kSlotReturnsStatus[] = {
#define KILN_ORT_SLOT(name, kind) (#kind[0] == 'S'),
#include "plugins/ort_api_slots.inc"
#undef KILN_ORT_SLOT
};
static_assert(sizeof(kSlotNames) / sizeof(kSlotNames[0]) == kSlotCount, "one name per slot");

thread_local std::string t_missing;  // the first unimplemented function called (take_missing_call)

Status* err(int32_t code, std::string message) { return make_status(code, std::move(message)); }
Status* bad(const char* fn, const std::string& what) { return err(kOrtInvalidArgument, std::string(fn) + ": " + what); }

#define KILN_ORT_REQUIRE(fn, cond) \
  if (!(cond)) return bad(fn, "an argument is null")

// ---- Unimplemented slots: one function per slot, so it knows its name. Arguments are ignored (the C
// calling conventions kiln runs on let a callee ignore what it was passed).
template <size_t I>
void* unimplemented() noexcept {
  if (t_missing.empty()) t_missing = kSlotNames[I];
  if (!kSlotReturnsStatus[I]) return nullptr;
  return make_status(kOrtNotImplemented, std::string("ONNX Runtime API function ") + kSlotNames[I] +
                                             " is not provided by kiln's ONNX Runtime custom-op shim");
}
// In chunks of 128 slots: one fold over all 416 passes clang's bracket-depth limit of 256 (the
// sanitizer build).
constexpr size_t kFillChunk = 128;
template <size_t Base, size_t... I>
void fill_chunk(void** table, std::index_sequence<I...>) {
  ((table[Base + I] = reinterpret_cast<void*>(&unimplemented<Base + I>)), ...);
}
template <size_t... C>
void fill_unimplemented(void** table, std::index_sequence<C...>) {
  (fill_chunk<C * kFillChunk>(table, std::make_index_sequence<std::min(kFillChunk, kSlotCount - C * kFillChunk)>{}), ...);
}

// ---- Status
Status* CreateStatus(int32_t code, const char* msg) noexcept { return make_status(code, msg ? msg : ""); }
int32_t GetErrorCode(const Status* st) noexcept { return st ? st->code : kOrtOk; }
const char* GetErrorMessage(const Status* st) noexcept { return st ? st->message.c_str() : ""; }
void ReleaseStatus(Status* st) noexcept { delete st; }

// ---- Custom-op domains and session options
// Domains a library created and has not released. A library may keep its domains for the process's
// life (loaded libraries are never unloaded, and onnxruntime lets them): kiln holds them here, so they
// stay reachable (and are not reported as leaks) until ReleaseCustomOpDomain.
std::mutex g_domains_mu;
std::set<Domain*>& live_domains() {
  static auto* live = new std::set<Domain*>;
  return *live;
}

Status* CreateCustomOpDomain(const char* name, Domain** out) noexcept {
  KILN_ORT_REQUIRE("CreateCustomOpDomain", name && out);
  try {
    auto d = std::make_unique<Domain>(Domain{name, {}});
    std::lock_guard<std::mutex> lock(g_domains_mu);
    live_domains().insert(d.get());
    *out = d.release();
  } catch (...) {
    return err(kOrtFail, "CreateCustomOpDomain: out of memory");
  }
  return nullptr;
}
Status* CustomOpDomain_Add(Domain* d, const CustomOp* op) noexcept {
  KILN_ORT_REQUIRE("CustomOpDomain_Add", d && op);
  try {
    d->ops.push_back(op);
  } catch (...) {
    return err(kOrtFail, "CustomOpDomain_Add: out of memory");
  }
  return nullptr;
}
Status* AddCustomOpDomain(SessionOptions* so, Domain* d) noexcept {
  KILN_ORT_REQUIRE("AddCustomOpDomain", so && d);
  try {
    so->domains.push_back(*d);  // a copy: the library may release its domain at any time
  } catch (...) {
    return err(kOrtFail, "AddCustomOpDomain: out of memory");
  }
  return nullptr;
}
void ReleaseCustomOpDomain(Domain* d) noexcept {
  {
    std::lock_guard<std::mutex> lock(g_domains_mu);
    live_domains().erase(d);
  }
  delete d;
}

// ---- Memory info and allocators
MemoryInfo g_cpu_info;

Status* CreateCpuMemoryInfo(int32_t type, int32_t mem_type, MemoryInfo** out) noexcept {
  KILN_ORT_REQUIRE("CreateCpuMemoryInfo", out);
  MemoryInfo* m = new (std::nothrow) MemoryInfo;
  if (!m) return err(kOrtFail, "CreateCpuMemoryInfo: out of memory");
  m->allocator_type = type;
  m->mem_type = mem_type;
  m->heap = true;
  *out = m;
  return nullptr;
}
Status* CreateMemoryInfo(const char* name, int32_t type, int id, int32_t mem_type, MemoryInfo** out) noexcept {
  KILN_ORT_REQUIRE("CreateMemoryInfo", name && out);
  if (std::strcmp(name, "Cpu") != 0 && std::strcmp(name, "CpuExecutionProvider") != 0)
    return err(kOrtNotImplemented, std::string("CreateMemoryInfo: kiln runs ONNX Runtime custom ops on the CPU only, not on '") + name + "'");
  Status* st = CreateCpuMemoryInfo(type, mem_type, out);
  if (!st) (*out)->id = id;
  return st;
}
void ReleaseMemoryInfo(MemoryInfo* m) noexcept {
  if (m && m->heap) delete m;
}
Status* CompareMemoryInfo(const MemoryInfo* a, const MemoryInfo* b, int* out) noexcept {
  KILN_ORT_REQUIRE("CompareMemoryInfo", a && b && out);
  *out = a->name == b->name && a->id == b->id && a->mem_type == b->mem_type ? 0 : -1;
  return nullptr;
}
Status* MemoryInfoGetName(const MemoryInfo* m, const char** out) noexcept {
  KILN_ORT_REQUIRE("MemoryInfoGetName", m && out);
  *out = m->name.c_str();
  return nullptr;
}
Status* MemoryInfoGetId(const MemoryInfo* m, int* out) noexcept {
  KILN_ORT_REQUIRE("MemoryInfoGetId", m && out);
  *out = m->id;
  return nullptr;
}
Status* MemoryInfoGetMemType(const MemoryInfo* m, int32_t* out) noexcept {
  KILN_ORT_REQUIRE("MemoryInfoGetMemType", m && out);
  *out = m->mem_type;
  return nullptr;
}
Status* MemoryInfoGetType(const MemoryInfo* m, int32_t* out) noexcept {
  KILN_ORT_REQUIRE("MemoryInfoGetType", m && out);
  *out = m->allocator_type;
  return nullptr;
}
void MemoryInfoGetDeviceType(const MemoryInfo*, int32_t* out) noexcept {
  if (out) *out = kDeviceCpu;
}

void* cpu_alloc(Allocator*, size_t size) { return std::malloc(size ? size : 1); }
void cpu_free(Allocator*, void* p) { std::free(p); }
const MemoryInfo* cpu_info(const Allocator*) { return &g_cpu_info; }
Allocator g_allocator{kMaxApiVersion, cpu_alloc, cpu_free, cpu_info, cpu_alloc, nullptr};

Status* GetAllocatorWithDefaultOptions(Allocator** out) noexcept {
  KILN_ORT_REQUIRE("GetAllocatorWithDefaultOptions", out);
  *out = &g_allocator;
  return nullptr;
}
Status* AllocatorAlloc(Allocator* a, size_t size, void** out) noexcept {
  KILN_ORT_REQUIRE("AllocatorAlloc", a && out);
  *out = a->Alloc(a, size);
  return *out ? nullptr : err(kOrtFail, "AllocatorAlloc: out of memory (" + std::to_string(size) + " bytes)");
}
Status* AllocatorFree(Allocator* a, void* p) noexcept {
  KILN_ORT_REQUIRE("AllocatorFree", a);
  a->Free(a, p);
  return nullptr;
}
Status* AllocatorGetInfo(const Allocator* a, const MemoryInfo** out) noexcept {
  KILN_ORT_REQUIRE("AllocatorGetInfo", a && out);
  *out = a->Info(a);
  return nullptr;
}
void ReleaseAllocator(Allocator*) noexcept {}  // kiln's allocator is static

// ---- Tensor type and shape info
Status* CreateTensorTypeAndShapeInfo(TensorInfo** out) noexcept {
  KILN_ORT_REQUIRE("CreateTensorTypeAndShapeInfo", out);
  *out = new (std::nothrow) TensorInfo;
  return *out ? nullptr : err(kOrtFail, "CreateTensorTypeAndShapeInfo: out of memory");
}
Status* SetTensorElementType(TensorInfo* t, int32_t elem) noexcept {
  KILN_ORT_REQUIRE("SetTensorElementType", t);
  t->elem = elem;
  return nullptr;
}
Status* SetDimensions(TensorInfo* t, const int64_t* dims, size_t n) noexcept {
  KILN_ORT_REQUIRE("SetDimensions", t && (dims || n == 0));
  try {
    t->dims.assign(dims, dims + n);
    t->symbols.assign(n, "");
    t->has_shape = true;
  } catch (...) {
    return err(kOrtFail, "SetDimensions: out of memory");
  }
  return nullptr;
}
Status* GetTensorElementType(const TensorInfo* t, int32_t* out) noexcept {
  KILN_ORT_REQUIRE("GetTensorElementType", t && out);
  *out = t->elem;
  return nullptr;
}
Status* GetDimensionsCount(const TensorInfo* t, size_t* out) noexcept {
  KILN_ORT_REQUIRE("GetDimensionsCount", t && out);
  *out = t->dims.size();
  return nullptr;
}
Status* GetDimensions(const TensorInfo* t, int64_t* dims, size_t n) noexcept {
  KILN_ORT_REQUIRE("GetDimensions", t && (dims || n == 0));
  for (size_t i = 0; i < n && i < t->dims.size(); ++i) dims[i] = t->dims[i];
  return nullptr;
}
Status* GetSymbolicDimensions(const TensorInfo* t, const char** out, size_t n) noexcept {
  KILN_ORT_REQUIRE("GetSymbolicDimensions", t && (out || n == 0));
  for (size_t i = 0; i < n && i < t->dims.size(); ++i) out[i] = i < t->symbols.size() ? t->symbols[i].c_str() : "";
  return nullptr;
}
Status* GetTensorShapeElementCount(const TensorInfo* t, size_t* out) noexcept {
  KILN_ORT_REQUIRE("GetTensorShapeElementCount", t && out);
  // As ONNX Runtime: unknown (negative) dims make the count undefined; kiln answers the product of the
  // known ones only when every dim is known, else an error.
  size_t n = 1;
  for (int64_t d : t->dims) {
    if (d < 0) return err(kOrtInvalidArgument, "GetTensorShapeElementCount: the shape has unknown dimensions");
    n *= static_cast<size_t>(d);
  }
  *out = n;
  return nullptr;
}
bool TensorTypeAndShape_HasShape(const TensorInfo* t) noexcept { return t && t->has_shape; }
void ReleaseTensorTypeAndShapeInfo(TensorInfo* t) noexcept { delete t; }

TensorInfo info_of(const Tensor& t) {
  TensorInfo i;
  i.elem = static_cast<int32_t>(t.dtype());
  i.has_shape = true;
  i.dims.assign(t.shape().begin(), t.shape().end());
  i.symbols.assign(i.dims.size(), "");
  return i;
}

// ---- Type info
Status* CastTypeInfoToTensorInfo(const TypeInfo* t, const TensorInfo** out) noexcept {
  KILN_ORT_REQUIRE("CastTypeInfoToTensorInfo", t && out);
  *out = &t->tensor;
  return nullptr;
}
Status* GetOnnxTypeFromTypeInfo(const TypeInfo* t, int32_t* out) noexcept {
  KILN_ORT_REQUIRE("GetOnnxTypeFromTypeInfo", t && out);
  *out = kOnnxTypeTensor;
  return nullptr;
}
void ReleaseTypeInfo(TypeInfo* t) noexcept { delete t; }

// ---- Values
const Tensor* tensor_of(const Value* v) { return v ? &v->tensor() : nullptr; }

Status* IsTensor(const Value* v, int* out) noexcept {
  KILN_ORT_REQUIRE("IsTensor", v && out);
  *out = 1;
  return nullptr;
}
Status* HasValue(const Value* v, int* out) noexcept {
  KILN_ORT_REQUIRE("HasValue", v && out);
  *out = 1;
  return nullptr;
}
Status* GetValueType(const Value* v, int32_t* out) noexcept {
  KILN_ORT_REQUIRE("GetValueType", v && out);
  *out = kOnnxTypeTensor;
  return nullptr;
}
Status* GetTensorMutableData(Value* v, void** out) noexcept {
  KILN_ORT_REQUIRE("GetTensorMutableData", v && out);
  *out = v->mutable_tensor()->raw();
  return nullptr;
}
Status* GetTensorData(const Value* v, const void** out) noexcept {
  KILN_ORT_REQUIRE("GetTensorData", v && out);
  *out = v->tensor().raw();
  return nullptr;
}
Status* GetTensorSizeInBytes(const Value* v, size_t* out) noexcept {
  KILN_ORT_REQUIRE("GetTensorSizeInBytes", v && out);
  if (v->tensor().dtype() == DataType::kString) return bad("GetTensorSizeInBytes", "a string tensor has no size in bytes");
  *out = v->tensor().nbytes();
  return nullptr;
}
Status* GetTensorTypeAndShape(const Value* v, TensorInfo** out) noexcept {
  KILN_ORT_REQUIRE("GetTensorTypeAndShape", v && out);
  try {
    *out = new TensorInfo(info_of(v->tensor()));
  } catch (...) {
    return err(kOrtFail, "GetTensorTypeAndShape: out of memory");
  }
  return nullptr;
}
Status* GetTypeInfo(const Value* v, TypeInfo** out) noexcept {
  KILN_ORT_REQUIRE("GetTypeInfo", v && out);
  try {
    *out = new TypeInfo{info_of(v->tensor())};
  } catch (...) {
    return err(kOrtFail, "GetTypeInfo: out of memory");
  }
  return nullptr;
}
Status* GetTensorMemoryInfo(const Value* v, const MemoryInfo** out) noexcept {
  KILN_ORT_REQUIRE("GetTensorMemoryInfo", v && out);
  *out = &g_cpu_info;
  return nullptr;
}
Status* CreateTensorAsOrtValue(Allocator*, const int64_t* shape, size_t rank, int32_t elem, Value** out) noexcept {
  KILN_ORT_REQUIRE("CreateTensorAsOrtValue", out && (shape || rank == 0));
  if (!elem_ok(elem)) return bad("CreateTensorAsOrtValue", "element type " + std::to_string(elem) + " is not one kiln holds");
  try {
    Shape s(shape, shape + rank);
    for (int64_t d : s)
      if (d < 0) return bad("CreateTensorAsOrtValue", "a negative dimension");
    if (std::string why = check_tensor_size(static_cast<DataType>(elem), s); !why.empty()) return bad("CreateTensorAsOrtValue", why);
    auto* v = new Value;
    v->owned = Tensor::empty(static_cast<DataType>(elem), s);
    v->heap = true;
    *out = v;
  } catch (const std::exception& e) {
    return err(kOrtFail, std::string("CreateTensorAsOrtValue: ") + e.what());
  }
  return nullptr;
}
void ReleaseValue(Value* v) noexcept {
  if (v && v->heap) delete v;
}
Status* TensorAt(Value* v, const int64_t* at, size_t n, void** out) noexcept {
  KILN_ORT_REQUIRE("TensorAt", v && out && (at || n == 0));
  Tensor& t = *v->mutable_tensor();
  if (n != static_cast<size_t>(t.rank())) return bad("TensorAt", "the location's rank differs from the tensor's");
  int64_t flat = 0;
  for (size_t d = 0; d < n; ++d) {
    if (at[d] < 0 || at[d] >= t.dim(static_cast<int>(d))) return bad("TensorAt", "the location is out of bounds");
    flat = flat * t.dim(static_cast<int>(d)) + at[d];
  }
  const size_t size = t.dtype() == DataType::kString ? sizeof(std::string) : dtype_size(t.dtype());
  *out = static_cast<char*>(t.raw()) + static_cast<size_t>(flat) * size;
  return nullptr;
}

// ---- String tensors (kiln's string elements are std::string, as ONNX Runtime's)
Status* strings_of(const char* fn, const Value* v, const std::string** s, size_t* n) {
  KILN_ORT_REQUIRE(fn, v);
  if (v->tensor().dtype() != DataType::kString) return bad(fn, "the tensor is not a string tensor");
  *s = v->tensor().data<std::string>();
  *n = static_cast<size_t>(v->tensor().numel());
  return nullptr;
}
Status* GetStringTensorDataLength(const Value* v, size_t* len) noexcept {
  const std::string* s;
  size_t n;
  KILN_ORT_REQUIRE("GetStringTensorDataLength", len);
  if (Status* st = strings_of("GetStringTensorDataLength", v, &s, &n)) return st;
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += s[i].size();
  *len = total;
  return nullptr;
}
Status* GetStringTensorContent(const Value* v, void* buf, size_t buf_len, size_t* offsets, size_t offsets_len) noexcept {
  const std::string* s;
  size_t n;
  if (Status* st = strings_of("GetStringTensorContent", v, &s, &n)) return st;
  if (offsets_len != n) return bad("GetStringTensorContent", "offsets_len is not the tensor's element count");
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += s[i].size();
  if (buf_len < total) return bad("GetStringTensorContent", "the buffer is too small");
  KILN_ORT_REQUIRE("GetStringTensorContent", (buf || total == 0) && (offsets || n == 0));
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    offsets[i] = at;
    if (!s[i].empty()) std::memcpy(static_cast<char*>(buf) + at, s[i].data(), s[i].size());
    at += s[i].size();
  }
  return nullptr;
}
Status* GetStringTensorElementLength(const Value* v, size_t index, size_t* out) noexcept {
  const std::string* s;
  size_t n;
  KILN_ORT_REQUIRE("GetStringTensorElementLength", out);
  if (Status* st = strings_of("GetStringTensorElementLength", v, &s, &n)) return st;
  if (index >= n) return bad("GetStringTensorElementLength", "index out of range");
  *out = s[index].size();
  return nullptr;
}
Status* GetStringTensorElement(const Value* v, size_t buf_len, size_t index, void* buf) noexcept {
  const std::string* s;
  size_t n;
  if (Status* st = strings_of("GetStringTensorElement", v, &s, &n)) return st;
  if (index >= n) return bad("GetStringTensorElement", "index out of range");
  if (buf_len < s[index].size()) return bad("GetStringTensorElement", "the buffer is too small");
  KILN_ORT_REQUIRE("GetStringTensorElement", buf || s[index].empty());
  if (!s[index].empty()) std::memcpy(buf, s[index].data(), s[index].size());
  return nullptr;
}
Status* FillStringTensor(Value* v, const char* const* in, size_t count) noexcept {
  const std::string* s;
  size_t n;
  if (Status* st = strings_of("FillStringTensor", v, &s, &n)) return st;
  if (count != n) return bad("FillStringTensor", "given " + std::to_string(count) + " strings for " + std::to_string(n) + " elements");
  KILN_ORT_REQUIRE("FillStringTensor", in || n == 0);
  std::string* dst = v->mutable_tensor()->data<std::string>();
  try {
    for (size_t i = 0; i < n; ++i) dst[i] = in[i] ? in[i] : "";
  } catch (...) {
    return err(kOrtFail, "FillStringTensor: out of memory");
  }
  return nullptr;
}
Status* FillStringTensorElement(Value* v, const char* in, size_t index) noexcept {
  const std::string* s;
  size_t n;
  if (Status* st = strings_of("FillStringTensorElement", v, &s, &n)) return st;
  if (index >= n) return bad("FillStringTensorElement", "index out of range");
  try {
    v->mutable_tensor()->data<std::string>()[index] = in ? in : "";
  } catch (...) {
    return err(kOrtFail, "FillStringTensorElement: out of memory");
  }
  return nullptr;
}
Status* GetResizedStringTensorElementBuffer(Value* v, size_t index, size_t length, char** buffer) noexcept {
  const std::string* s;
  size_t n;
  KILN_ORT_REQUIRE("GetResizedStringTensorElementBuffer", buffer);
  if (Status* st = strings_of("GetResizedStringTensorElementBuffer", v, &s, &n)) return st;
  if (index >= n) return bad("GetResizedStringTensorElementBuffer", "index out of range");
  try {
    std::string& e = v->mutable_tensor()->data<std::string>()[index];
    e.resize(length);
    *buffer = e.data();
  } catch (...) {
    return err(kOrtFail, "GetResizedStringTensorElementBuffer: out of memory");
  }
  return nullptr;
}

// ---- Kernel info: attributes
const ir::Attribute* find_attr(const KernelInfo* info, const char* name) {
  auto it = info->attrs.find(name);
  return it == info->attrs.end() ? nullptr : &it->second;
}
Status* attr_of(const char* fn, const KernelInfo* info, const char* name, ir::Attribute::Kind kind, const ir::Attribute** out) {
  KILN_ORT_REQUIRE(fn, info && name);
  const ir::Attribute* a = find_attr(info, name);
  if (!a) return err(kOrtFail, std::string(fn) + ": the node has no attribute '" + name + "'");
  if (a->kind != kind) return err(kOrtFail, std::string(fn) + ": attribute '" + name + "' is of another kind");
  *out = a;
  return nullptr;
}
Status* KernelInfoGetAttribute_float(const KernelInfo* info, const char* name, float* out) noexcept {
  const ir::Attribute* a;
  KILN_ORT_REQUIRE("KernelInfoGetAttribute_float", out);
  if (Status* st = attr_of("KernelInfoGetAttribute_float", info, name, ir::Attribute::Kind::kFloat, &a)) return st;
  *out = a->f;
  return nullptr;
}
Status* KernelInfoGetAttribute_int64(const KernelInfo* info, const char* name, int64_t* out) noexcept {
  const ir::Attribute* a;
  KILN_ORT_REQUIRE("KernelInfoGetAttribute_int64", out);
  if (Status* st = attr_of("KernelInfoGetAttribute_int64", info, name, ir::Attribute::Kind::kInt, &a)) return st;
  *out = a->i;
  return nullptr;
}
// ORT's convention for strings: a null `out` asks for the size (with the NUL); a buffer too small is an
// error that still says the size needed.
Status* copy_string_out(const char* fn, const std::string& s, char* out, size_t* size) {
  KILN_ORT_REQUIRE(fn, size);
  const size_t need = s.size() + 1;
  if (!out) {
    *size = need;
    return nullptr;
  }
  if (*size < need) {
    *size = need;
    return bad(fn, "the buffer is too small");
  }
  std::memcpy(out, s.c_str(), need);
  *size = need;
  return nullptr;
}
template <typename T>
Status* copy_array_out(const char* fn, const std::vector<T>& v, T* out, size_t* size) {
  KILN_ORT_REQUIRE(fn, size);
  if (!out) {
    *size = v.size();
    return nullptr;
  }
  if (*size < v.size()) {
    *size = v.size();
    return bad(fn, "the buffer is too small");
  }
  if (!v.empty()) std::memcpy(out, v.data(), v.size() * sizeof(T));
  *size = v.size();
  return nullptr;
}
Status* KernelInfoGetAttribute_string(const KernelInfo* info, const char* name, char* out, size_t* size) noexcept {
  const ir::Attribute* a;
  if (Status* st = attr_of("KernelInfoGetAttribute_string", info, name, ir::Attribute::Kind::kString, &a)) return st;
  return copy_string_out("KernelInfoGetAttribute_string", a->s, out, size);
}
Status* KernelInfoGetAttributeArray_float(const KernelInfo* info, const char* name, float* out, size_t* size) noexcept {
  const ir::Attribute* a;
  if (Status* st = attr_of("KernelInfoGetAttributeArray_float", info, name, ir::Attribute::Kind::kFloats, &a)) return st;
  return copy_array_out("KernelInfoGetAttributeArray_float", a->floats, out, size);
}
Status* KernelInfoGetAttributeArray_int64(const KernelInfo* info, const char* name, int64_t* out, size_t* size) noexcept {
  const ir::Attribute* a;
  if (Status* st = attr_of("KernelInfoGetAttributeArray_int64", info, name, ir::Attribute::Kind::kInts, &a)) return st;
  return copy_array_out("KernelInfoGetAttributeArray_int64", a->ints, out, size);
}
Status* KernelInfoGetAttribute_tensor(const KernelInfo* info, const char* name, Allocator*, Value** out) noexcept {
  const ir::Attribute* a;
  KILN_ORT_REQUIRE("KernelInfoGetAttribute_tensor", out);
  if (Status* st = attr_of("KernelInfoGetAttribute_tensor", info, name, ir::Attribute::Kind::kTensor, &a)) return st;
  if (!elem_ok(static_cast<int32_t>(a->t.dtype()))) return bad("KernelInfoGetAttribute_tensor", "the tensor's element type is not one kiln passes");
  try {
    auto* v = new Value;
    v->owned = a->t.clone();
    v->heap = true;
    *out = v;
  } catch (const std::exception& e) {
    return err(kOrtFail, std::string("KernelInfoGetAttribute_tensor: ") + e.what());
  }
  return nullptr;
}

// ---- Kernel info: the node
Status* KernelInfo_GetInputCount(const KernelInfo* info, size_t* out) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetInputCount", info && out);
  *out = info->input_types.size();
  return nullptr;
}
Status* KernelInfo_GetOutputCount(const KernelInfo* info, size_t* out) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetOutputCount", info && out);
  *out = info->output_types.size();
  return nullptr;
}
Status* KernelInfo_GetInputName(const KernelInfo* info, size_t i, char* out, size_t* size) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetInputName", info);
  if (i >= info->input_names.size()) return bad("KernelInfo_GetInputName", "index out of range");
  return copy_string_out("KernelInfo_GetInputName", info->input_names[i], out, size);
}
Status* KernelInfo_GetOutputName(const KernelInfo* info, size_t i, char* out, size_t* size) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetOutputName", info);
  if (i >= info->output_names.size()) return bad("KernelInfo_GetOutputName", "index out of range");
  return copy_string_out("KernelInfo_GetOutputName", info->output_names[i], out, size);
}
Status* type_info_out(const char* fn, const std::vector<TensorInfo>& types, size_t i, TypeInfo** out) {
  KILN_ORT_REQUIRE(fn, out);
  if (i >= types.size()) return bad(fn, "index out of range");
  try {
    *out = new TypeInfo{types[i]};
  } catch (...) {
    return err(kOrtFail, std::string(fn) + ": out of memory");
  }
  return nullptr;
}
Status* KernelInfo_GetInputTypeInfo(const KernelInfo* info, size_t i, TypeInfo** out) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetInputTypeInfo", info);
  return type_info_out("KernelInfo_GetInputTypeInfo", info->input_types, i, out);
}
Status* KernelInfo_GetOutputTypeInfo(const KernelInfo* info, size_t i, TypeInfo** out) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetOutputTypeInfo", info);
  return type_info_out("KernelInfo_GetOutputTypeInfo", info->output_types, i, out);
}
Status* KernelInfo_GetNodeName(const KernelInfo* info, char* out, size_t* size) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetNodeName", info);
  return copy_string_out("KernelInfo_GetNodeName", info->node_name, out, size);
}
Status* KernelInfo_GetOperatorDomain(const KernelInfo* info, char* out, size_t* size) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetOperatorDomain", info);
  return copy_string_out("KernelInfo_GetOperatorDomain", info->domain, out, size);
}
Status* KernelInfo_GetOperatorType(const KernelInfo* info, char* out, size_t* size) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetOperatorType", info);
  return copy_string_out("KernelInfo_GetOperatorType", info->op_type, out, size);
}
Status* KernelInfo_GetOperatorSinceVersion(const KernelInfo* info, int* out) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetOperatorSinceVersion", info && out);
  *out = info->since_version;
  return nullptr;
}
Status* KernelInfoGetConstantInput_tensor(const KernelInfo* info, size_t i, int* is_constant, const Value** out) noexcept {
  KILN_ORT_REQUIRE("KernelInfoGetConstantInput_tensor", info && is_constant && out);
  if (i >= info->input_types.size()) return bad("KernelInfoGetConstantInput_tensor", "index out of range");
  const Value* v = i < info->constants.size() ? info->constants[i].get() : nullptr;
  *is_constant = v ? 1 : 0;
  *out = v;
  return nullptr;
}
Status* CopyKernelInfo(const KernelInfo* info, KernelInfo** out) noexcept {
  KILN_ORT_REQUIRE("CopyKernelInfo", info && out);
  try {
    *out = new KernelInfo(*info);
  } catch (...) {
    return err(kOrtFail, "CopyKernelInfo: out of memory");
  }
  return nullptr;
}
void ReleaseKernelInfo(KernelInfo* info) noexcept { delete info; }
Status* KernelInfoGetAllocator(const KernelInfo* info, int32_t, Allocator** out) noexcept {
  KILN_ORT_REQUIRE("KernelInfoGetAllocator", info && out);
  *out = &g_allocator;
  return nullptr;
}

// ---- Logging: the op's messages go to kiln's log (errors and warnings as such, the rest verbose).
struct Logger {
  int unused = 0;
} g_logger;
Status* KernelInfo_GetLogger(const KernelInfo* info, const Logger** out) noexcept {
  KILN_ORT_REQUIRE("KernelInfo_GetLogger", info && out);
  *out = &g_logger;
  return nullptr;
}
Status* KernelContext_GetLogger(const KernelContext* ctx, const Logger** out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetLogger", ctx && out);
  *out = &g_logger;
  return nullptr;
}
Status* Logger_LogMessage(const Logger*, int32_t severity, const char* message, const char*, int, const char*) noexcept {
  const LogLevel level = severity >= 3 ? LogLevel::kError : severity == 2 ? LogLevel::kWarning : LogLevel::kVerbose;
  try {
    if (log_enabled(level)) log(level, std::string("ONNX Runtime custom op: ") + (message ? message : ""));
  } catch (...) {
  }
  return nullptr;
}
Status* Logger_GetLoggingSeverityLevel(const Logger*, int32_t* out) noexcept {
  KILN_ORT_REQUIRE("Logger_GetLoggingSeverityLevel", out);
  const LogLevel l = log_level();
  *out = l >= LogLevel::kVerbose ? 0 : l == LogLevel::kInfo ? 1 : l == LogLevel::kWarning ? 2 : 3;
  return nullptr;
}

// ---- Kernel context
Status* KernelContext_GetInputCount(const KernelContext* c, size_t* out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetInputCount", c && out);
  *out = c->inputs.size();
  return nullptr;
}
Status* KernelContext_GetOutputCount(const KernelContext* c, size_t* out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetOutputCount", c && out);
  *out = c->outputs.size();
  return nullptr;
}
Status* KernelContext_GetInput(const KernelContext* c, size_t i, const Value** out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetInput", c && out);
  if (i >= c->inputs.size()) return bad("KernelContext_GetInput", "index " + std::to_string(i) + " out of range");
  *out = c->inputs[i].in ? &c->inputs[i] : nullptr;  // an omitted optional input: null, as ONNX Runtime
  return nullptr;
}
Status* KernelContext_GetOutput(KernelContext* c, size_t i, const int64_t* dims, size_t rank, Value** out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetOutput", c && out && (dims || rank == 0));
  if (i >= c->outputs.size()) return bad("KernelContext_GetOutput", "index " + std::to_string(i) + " out of range");
  if (!c->ctx->has_output(static_cast<int>(i))) {
    *out = nullptr;  // the node does not use it
    return nullptr;
  }
  try {
    Shape shape(dims, dims + rank);
    for (int64_t d : shape)
      if (d < 0) return bad("KernelContext_GetOutput", "output " + std::to_string(i) + " given a negative dimension");
    const DataType dt = static_cast<DataType>(c->output_elem[i]);
    if (std::string why = check_tensor_size(dt, shape); !why.empty()) return bad("KernelContext_GetOutput", why);
    if (c->made[i] && c->outputs[i].out->shape() == shape) {
      *out = &c->outputs[i];
      return nullptr;
    }
    c->outputs[i].out = &c->ctx->output(static_cast<int>(i), dt, shape);
    c->made[i] = true;
    *out = &c->outputs[i];
  } catch (const std::exception& e) {
    return err(kOrtFail, std::string("KernelContext_GetOutput: ") + e.what());
  }
  return nullptr;
}
Status* KernelContext_GetGPUComputeStream(const KernelContext* c, void** out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetGPUComputeStream", c && out);
  *out = nullptr;  // kiln runs these ops on the CPU
  return nullptr;
}
Status* KernelContext_GetAllocator(const KernelContext* c, const MemoryInfo*, Allocator** out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetAllocator", c && out);
  *out = &g_allocator;
  return nullptr;
}
Status* KernelContext_ParallelFor(const KernelContext* c, void (*fn)(void*, size_t), size_t total, size_t, void* data) noexcept {
  KILN_ORT_REQUIRE("KernelContext_ParallelFor", c && fn);
  for (size_t i = 0; i < total; ++i) fn(data, i);  // in order, on the calling thread
  return nullptr;
}
Status* KernelContext_GetScratchBuffer(const KernelContext* c, const MemoryInfo*, size_t bytes, void** out) noexcept {
  KILN_ORT_REQUIRE("KernelContext_GetScratchBuffer", c && out);
  try {
    std::shared_ptr<void> mem(std::malloc(bytes ? bytes : 1), std::free);
    if (!mem) return err(kOrtFail, "KernelContext_GetScratchBuffer: out of memory");
    *out = mem.get();
    const_cast<KernelContext*>(c)->scratch.push_back(std::move(mem));  // freed when the run ends
  } catch (...) {
    return err(kOrtFail, "KernelContext_GetScratchBuffer: out of memory");
  }
  return nullptr;
}

// ---- Shape inference (InferOutputShapeFn)
Status* ShapeInferContext_GetInputCount(const ShapeInferContext* c, size_t* out) noexcept {
  KILN_ORT_REQUIRE("ShapeInferContext_GetInputCount", c && out);
  *out = c->inputs.size();
  return nullptr;
}
Status* ShapeInferContext_GetInputTypeShape(const ShapeInferContext* c, size_t i, TensorInfo** out) noexcept {
  KILN_ORT_REQUIRE("ShapeInferContext_GetInputTypeShape", c && out);
  if (i >= c->inputs.size()) return bad("ShapeInferContext_GetInputTypeShape", "index out of range");
  try {
    *out = new TensorInfo(c->inputs[i]);
  } catch (...) {
    return err(kOrtFail, "ShapeInferContext_GetInputTypeShape: out of memory");
  }
  return nullptr;
}
Status* ShapeInferContext_SetOutputTypeShape(const ShapeInferContext* c, size_t i, const TensorInfo* info) noexcept {
  KILN_ORT_REQUIRE("ShapeInferContext_SetOutputTypeShape", c && info);
  if (i >= c->outputs.size()) return bad("ShapeInferContext_SetOutputTypeShape", "index out of range");
  auto* m = const_cast<ShapeInferContext*>(c);
  try {
    m->outputs[i] = *info;
    m->set[i] = true;
  } catch (...) {
    return err(kOrtFail, "ShapeInferContext_SetOutputTypeShape: out of memory");
  }
  return nullptr;
}

// An OrtOpAttr is one entry of the node's attribute map (name and value).
using OpAttr = std::pair<const std::string, ir::Attribute>;
// OrtOpAttrType
constexpr int32_t kAttrUndefined = 0, kAttrInt = 1, kAttrInts = 2, kAttrFloat = 3, kAttrFloats = 4, kAttrString = 5, kAttrStrings = 6;

int32_t op_attr_type(const ir::Attribute& a) {
  switch (a.kind) {
    case ir::Attribute::Kind::kInt: return kAttrInt;
    case ir::Attribute::Kind::kInts: return kAttrInts;
    case ir::Attribute::Kind::kFloat: return kAttrFloat;
    case ir::Attribute::Kind::kFloats: return kAttrFloats;
    case ir::Attribute::Kind::kString: return kAttrString;
    case ir::Attribute::Kind::kStrings: return kAttrStrings;
    default: return kAttrUndefined;
  }
}

Status* ShapeInferContext_GetAttribute(const ShapeInferContext* c, const char* name, const OpAttr** out) noexcept {
  KILN_ORT_REQUIRE("ShapeInferContext_GetAttribute", c && name && out);
  const auto it = c->attrs ? c->attrs->find(name) : std::map<std::string, ir::Attribute>::const_iterator();
  if (!c->attrs || it == c->attrs->end())
    return err(kOrtFail, std::string("ShapeInferContext_GetAttribute: the node has no attribute '") + name + "'");
  *out = &*it;
  return nullptr;
}
Status* OpAttr_GetType(const OpAttr* a, int32_t* out) noexcept {
  KILN_ORT_REQUIRE("OpAttr_GetType", a && out);
  *out = op_attr_type(a->second);
  return nullptr;
}
Status* OpAttr_GetName(const OpAttr* a, const char** out) noexcept {
  KILN_ORT_REQUIRE("OpAttr_GetName", a && out);
  *out = a->first.c_str();
  return nullptr;
}
// ONNX Runtime's convention: `len` bytes at `data`; `out` the bytes needed (on an error) or written.
// Strings are their bytes; a list of strings is each one followed by a NUL.
Status* ReadOpAttr(const OpAttr* a, int32_t type, void* data, size_t len, size_t* out) noexcept {
  KILN_ORT_REQUIRE("ReadOpAttr", a && out);
  const ir::Attribute& v = a->second;
  if (op_attr_type(v) != type) return bad("ReadOpAttr", "attribute '" + a->first + "' is of another type");
  std::string bytes;
  try {
    switch (type) {
      case kAttrInt: bytes.assign(reinterpret_cast<const char*>(&v.i), sizeof(v.i)); break;
      case kAttrFloat: bytes.assign(reinterpret_cast<const char*>(&v.f), sizeof(v.f)); break;
      case kAttrInts: bytes.assign(reinterpret_cast<const char*>(v.ints.data()), v.ints.size() * sizeof(int64_t)); break;
      case kAttrFloats: bytes.assign(reinterpret_cast<const char*>(v.floats.data()), v.floats.size() * sizeof(float)); break;
      case kAttrString: bytes = v.s; break;
      default:
        for (const std::string& e : v.strings) bytes += e + '\0';
    }
  } catch (...) {
    return err(kOrtFail, "ReadOpAttr: out of memory");
  }
  *out = bytes.size();
  if (!data || len < bytes.size()) return bad("ReadOpAttr", "the buffer is too small (" + std::to_string(bytes.size()) + " bytes needed)");
  if (!bytes.empty()) std::memcpy(data, bytes.data(), bytes.size());
  return nullptr;
}

// ---- The table and the base
const void* GetApi(uint32_t version) noexcept {
  return version >= 1 && version <= kMaxApiVersion ? api_table() : nullptr;
}
const char* GetVersionString() noexcept { return kVersionString; }

const ApiBase g_base{GetApi, GetVersionString};

template <typename F>
void set(void** table, ApiSlot s, F* fn) {
  table[s] = reinterpret_cast<void*>(fn);
}

}  // namespace

const char* slot_name(size_t slot) { return slot < kSlotCount ? kSlotNames[slot] : ""; }

Status* make_status(int32_t code, const std::string& message) {
  if (code == kOrtOk) return nullptr;
  try {
    return new Status{code, message};
  } catch (...) {
    return new (std::nothrow) Status{kOrtFail, "out of memory"};
  }
}

std::string consume_status(Status* st) {
  if (!st) return "";
  std::string m = st->message.empty() ? "(no message, code " + std::to_string(st->code) + ")" : st->message;
  delete st;
  return m;
}

std::string take_missing_call() { return std::exchange(t_missing, std::string()); }

bool elem_ok(int32_t elem) { return elem != kElemUndefined && dtype_is_valid(elem); }

const ApiBase* api_base() { return &g_base; }

const void* api_table() {
  static void* const* table = [] {
    static void* t[kSlotCount];
    fill_unimplemented(t, std::make_index_sequence<(kSlotCount + kFillChunk - 1) / kFillChunk>{});
    set(t, kCreateStatus, CreateStatus);
    set(t, kGetErrorCode, GetErrorCode);
    set(t, kGetErrorMessage, GetErrorMessage);
    set(t, kReleaseStatus, ReleaseStatus);
    set(t, kCreateCustomOpDomain, CreateCustomOpDomain);
    set(t, kCustomOpDomain_Add, CustomOpDomain_Add);
    set(t, kAddCustomOpDomain, AddCustomOpDomain);
    set(t, kReleaseCustomOpDomain, ReleaseCustomOpDomain);
    set(t, kCreateCpuMemoryInfo, CreateCpuMemoryInfo);
    set(t, kCreateMemoryInfo, CreateMemoryInfo);
    set(t, kReleaseMemoryInfo, ReleaseMemoryInfo);
    set(t, kCompareMemoryInfo, CompareMemoryInfo);
    set(t, kMemoryInfoGetName, MemoryInfoGetName);
    set(t, kMemoryInfoGetId, MemoryInfoGetId);
    set(t, kMemoryInfoGetMemType, MemoryInfoGetMemType);
    set(t, kMemoryInfoGetType, MemoryInfoGetType);
    set(t, kMemoryInfoGetDeviceType, MemoryInfoGetDeviceType);
    set(t, kGetAllocatorWithDefaultOptions, GetAllocatorWithDefaultOptions);
    set(t, kAllocatorAlloc, AllocatorAlloc);
    set(t, kAllocatorFree, AllocatorFree);
    set(t, kAllocatorGetInfo, AllocatorGetInfo);
    set(t, kReleaseAllocator, ReleaseAllocator);
    set(t, kCreateTensorTypeAndShapeInfo, CreateTensorTypeAndShapeInfo);
    set(t, kSetTensorElementType, SetTensorElementType);
    set(t, kSetDimensions, SetDimensions);
    set(t, kGetTensorElementType, GetTensorElementType);
    set(t, kGetDimensionsCount, GetDimensionsCount);
    set(t, kGetDimensions, GetDimensions);
    set(t, kGetSymbolicDimensions, GetSymbolicDimensions);
    set(t, kGetTensorShapeElementCount, GetTensorShapeElementCount);
    set(t, kTensorTypeAndShape_HasShape, TensorTypeAndShape_HasShape);
    set(t, kReleaseTensorTypeAndShapeInfo, ReleaseTensorTypeAndShapeInfo);
    set(t, kCastTypeInfoToTensorInfo, CastTypeInfoToTensorInfo);
    set(t, kGetOnnxTypeFromTypeInfo, GetOnnxTypeFromTypeInfo);
    set(t, kReleaseTypeInfo, ReleaseTypeInfo);
    set(t, kIsTensor, IsTensor);
    set(t, kHasValue, HasValue);
    set(t, kGetValueType, GetValueType);
    set(t, kGetTensorMutableData, GetTensorMutableData);
    set(t, kGetTensorData, GetTensorData);
    set(t, kGetTensorSizeInBytes, GetTensorSizeInBytes);
    set(t, kGetTensorTypeAndShape, GetTensorTypeAndShape);
    set(t, kGetTypeInfo, GetTypeInfo);
    set(t, kGetTensorMemoryInfo, GetTensorMemoryInfo);
    set(t, kCreateTensorAsOrtValue, CreateTensorAsOrtValue);
    set(t, kReleaseValue, ReleaseValue);
    set(t, kTensorAt, TensorAt);
    set(t, kGetStringTensorDataLength, GetStringTensorDataLength);
    set(t, kGetStringTensorContent, GetStringTensorContent);
    set(t, kGetStringTensorElementLength, GetStringTensorElementLength);
    set(t, kGetStringTensorElement, GetStringTensorElement);
    set(t, kFillStringTensor, FillStringTensor);
    set(t, kFillStringTensorElement, FillStringTensorElement);
    set(t, kGetResizedStringTensorElementBuffer, GetResizedStringTensorElementBuffer);
    set(t, kKernelInfoGetAttribute_float, KernelInfoGetAttribute_float);
    set(t, kKernelInfoGetAttribute_int64, KernelInfoGetAttribute_int64);
    set(t, kKernelInfoGetAttribute_string, KernelInfoGetAttribute_string);
    set(t, kKernelInfoGetAttributeArray_float, KernelInfoGetAttributeArray_float);
    set(t, kKernelInfoGetAttributeArray_int64, KernelInfoGetAttributeArray_int64);
    set(t, kKernelInfoGetAttribute_tensor, KernelInfoGetAttribute_tensor);
    set(t, kKernelInfo_GetInputCount, KernelInfo_GetInputCount);
    set(t, kKernelInfo_GetOutputCount, KernelInfo_GetOutputCount);
    set(t, kKernelInfo_GetInputName, KernelInfo_GetInputName);
    set(t, kKernelInfo_GetOutputName, KernelInfo_GetOutputName);
    set(t, kKernelInfo_GetInputTypeInfo, KernelInfo_GetInputTypeInfo);
    set(t, kKernelInfo_GetOutputTypeInfo, KernelInfo_GetOutputTypeInfo);
    set(t, kKernelInfo_GetNodeName, KernelInfo_GetNodeName);
    set(t, kKernelInfo_GetOperatorDomain, KernelInfo_GetOperatorDomain);
    set(t, kKernelInfo_GetOperatorType, KernelInfo_GetOperatorType);
    set(t, kKernelInfo_GetOperatorSinceVersion, KernelInfo_GetOperatorSinceVersion);
    set(t, kKernelInfoGetConstantInput_tensor, KernelInfoGetConstantInput_tensor);
    set(t, kCopyKernelInfo, CopyKernelInfo);
    set(t, kReleaseKernelInfo, ReleaseKernelInfo);
    set(t, kKernelInfoGetAllocator, KernelInfoGetAllocator);
    set(t, kKernelInfo_GetLogger, KernelInfo_GetLogger);
    set(t, kKernelContext_GetLogger, KernelContext_GetLogger);
    set(t, kLogger_LogMessage, Logger_LogMessage);
    set(t, kLogger_GetLoggingSeverityLevel, Logger_GetLoggingSeverityLevel);
    set(t, kKernelContext_GetInputCount, KernelContext_GetInputCount);
    set(t, kKernelContext_GetOutputCount, KernelContext_GetOutputCount);
    set(t, kKernelContext_GetInput, KernelContext_GetInput);
    set(t, kKernelContext_GetOutput, KernelContext_GetOutput);
    set(t, kKernelContext_GetGPUComputeStream, KernelContext_GetGPUComputeStream);
    set(t, kKernelContext_GetAllocator, KernelContext_GetAllocator);
    set(t, kKernelContext_ParallelFor, KernelContext_ParallelFor);
    set(t, kKernelContext_GetScratchBuffer, KernelContext_GetScratchBuffer);
    set(t, kShapeInferContext_GetInputCount, ShapeInferContext_GetInputCount);
    set(t, kShapeInferContext_GetInputTypeShape, ShapeInferContext_GetInputTypeShape);
    set(t, kShapeInferContext_SetOutputTypeShape, ShapeInferContext_SetOutputTypeShape);
    set(t, kShapeInferContext_GetAttribute, ShapeInferContext_GetAttribute);
    set(t, kOpAttr_GetType, OpAttr_GetType);
    set(t, kOpAttr_GetName, OpAttr_GetName);
    set(t, kReadOpAttr, ReadOpAttr);
    return t;
  }();
  return table;
}

}  // namespace kiln::plugins::ort
