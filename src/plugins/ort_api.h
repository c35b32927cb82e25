// plugins/ort_api.h — kiln's implementation of the part of ONNX Runtime's public C API that custom-op
// libraries use (OrtApiBase, the OrtApi function table, OrtCustomOp, OrtAllocator), so a library
// exporting `RegisterCustomOps(OrtSessionOptions*, const OrtApiBase*)` (onnxruntime-extensions, a
// user's own) loads unchanged and its ops run as kiln plugin ops (plugins/ort_ops.cpp).
//
// The declarations here are kiln's own, written against the layout of ONNX Runtime's versioned public
// header (onnxruntime_c_api.h): the order of the table's function pointers (ort_api_slots.inc), the
// fields of OrtCustomOp and OrtAllocator, and the enum values. The table only ever grows, and fields of
// OrtCustomOp are read only where the op's `version` says it has them. Every slot kiln does not
// implement points to a function that answers an error status naming the API function (and records
// the name, so kiln's error names the op and the function even when the library ignores the status).
//
// The opaque ORT handles (OrtStatus*, OrtValue*, OrtKernelInfo*, ...) are the structs below; a library
// only ever holds pointers to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/kernel.h"
#include "ir/graph.h"

namespace kiln::plugins::ort {

// ---- The ABI: enums (values of ORT's public header)
enum ErrorCode : int32_t {
  kOrtOk = 0, kOrtFail = 1, kOrtInvalidArgument = 2, kOrtNoSuchFile = 3, kOrtNoModel = 4, kOrtEngineError = 5,
  kOrtRuntimeException = 6, kOrtInvalidProtobuf = 7, kOrtModelLoaded = 8, kOrtNotImplemented = 9, kOrtInvalidGraph = 10,
  kOrtEpFail = 11,
};
// ONNXTensorElementDataType: the codes of ONNX's TensorProto.DataType, as kiln's DataType.
constexpr int32_t kElemUndefined = 0;
constexpr int32_t kElemString = 8;
// ONNXType
constexpr int32_t kOnnxTypeTensor = 1;
// OrtCustomOpInputOutputCharacteristic
constexpr int32_t kRequired = 0, kOptional = 1, kVariadic = 2;
// OrtMemType / OrtAllocatorType / OrtMemoryInfoDeviceType
constexpr int32_t kMemTypeDefault = 0, kDeviceAllocator = 0, kDeviceCpu = 0;

// The highest OrtApi version whose table kiln lays out (GetApi answers null above it, as ONNX Runtime
// does for a version newer than itself), and the version string it reports.
constexpr uint32_t kMaxApiVersion = 24;
constexpr const char* kVersionString = "1.24.0";

// The table's slots, in order.
enum ApiSlot : size_t {
#define KILN_ORT_SLOT(name, kind) k##name,
#include "plugins/ort_api_slots.inc"
#undef KILN_ORT_SLOT
  kSlotCount
};
// The API function a slot holds ("KernelContext_GetOutput"); "" out of range.
const char* slot_name(size_t slot);

struct KernelInfo;
struct KernelContext;
struct ShapeInferContext;
struct MemoryInfo;

// OrtApiBase
struct ApiBase {
  const void* (*get_api)(uint32_t version) noexcept;
  const char* (*get_version_string)() noexcept;
};

// OrtCustomOp, field by field; which fields exist depends on `version` (the ORT_API_VERSION the library
// was built with): the characteristics from 8, the variadic arity from 14, CreateKernelV2/
// KernelComputeV2 from 16, InferOutputShapeFn and the opset range from 17, in-place/alias maps from 18.
struct Status;
struct CustomOp {
  uint32_t version;
  void* (*CreateKernel)(const CustomOp* op, const void* api, const KernelInfo* info);
  const char* (*GetName)(const CustomOp* op);
  const char* (*GetExecutionProviderType)(const CustomOp* op);
  int32_t (*GetInputType)(const CustomOp* op, size_t index);
  size_t (*GetInputTypeCount)(const CustomOp* op);
  int32_t (*GetOutputType)(const CustomOp* op, size_t index);
  size_t (*GetOutputTypeCount)(const CustomOp* op);
  void (*KernelCompute)(void* kernel, KernelContext* context);
  void (*KernelDestroy)(void* kernel);
  int32_t (*GetInputCharacteristic)(const CustomOp* op, size_t index);
  int32_t (*GetOutputCharacteristic)(const CustomOp* op, size_t index);
  int32_t (*GetInputMemoryType)(const CustomOp* op, size_t index);
  int (*GetVariadicInputMinArity)(const CustomOp* op);
  int (*GetVariadicInputHomogeneity)(const CustomOp* op);
  int (*GetVariadicOutputMinArity)(const CustomOp* op);
  int (*GetVariadicOutputHomogeneity)(const CustomOp* op);
  Status* (*CreateKernelV2)(const CustomOp* op, const void* api, const KernelInfo* info, void** kernel);
  Status* (*KernelComputeV2)(void* kernel, KernelContext* context);
  Status* (*InferOutputShapeFn)(const CustomOp* op, ShapeInferContext* context);
  int (*GetStartVersion)(const CustomOp* op);
  int (*GetEndVersion)(const CustomOp* op);
  size_t (*GetMayInplace)(int** input_index, int** output_index);
  void (*ReleaseMayInplace)(int* input_index, int* output_index);
  size_t (*GetAliasMap)(int** input_index, int** output_index);
  void (*ReleaseAliasMap)(int* input_index, int* output_index);
};

// OrtAllocator (Reserve from version 18, GetStats from 23).
struct Allocator {
  uint32_t version;
  void* (*Alloc)(Allocator* self, size_t size);
  void (*Free)(Allocator* self, void* p);
  const MemoryInfo* (*Info)(const Allocator* self);
  void* (*Reserve)(Allocator* self, size_t size);
  void* GetStats;  // not provided (null): the library must not call it
};

// ---- kiln's objects behind the opaque handles
struct Status {
  int32_t code = kOrtFail;
  std::string message;
};

struct MemoryInfo {
  std::string name = "Cpu";
  int32_t allocator_type = kDeviceAllocator;
  int32_t mem_type = kMemTypeDefault;
  int id = 0;
  bool heap = false;  // made by CreateMemoryInfo/CreateCpuMemoryInfo: ReleaseMemoryInfo frees it
};

// OrtTensorTypeAndShapeInfo: element type and dims (-1 unknown; symbols where named).
struct TensorInfo {
  int32_t elem = kElemUndefined;
  bool has_shape = false;
  std::vector<int64_t> dims;
  std::vector<std::string> symbols;
};

// OrtTypeInfo (kiln passes tensors only).
struct TypeInfo {
  TensorInfo tensor;
};

// OrtValue: a tensor the library reads (an input, a constant), writes (an output) or owns (made by
// CreateTensorAsOrtValue or an attribute getter; ReleaseValue frees those only).
struct Value {
  const Tensor* in = nullptr;  // read-only view
  Tensor* out = nullptr;       // writable view
  Tensor owned;                // storage of a value the library owns
  bool heap = false;
  const Tensor& tensor() const { return out ? *out : in ? *in : owned; }
  Tensor* mutable_tensor() { return out ? out : in ? const_cast<Tensor*>(in) : &owned; }
};

// OrtKernelInfo: what CreateKernel sees of the node (copied, so CopyKernelInfo's copies outlive it).
struct KernelInfo {
  std::string node_name, domain, op_type;
  int since_version = 1;
  std::map<std::string, ir::Attribute> attrs;
  std::vector<std::string> input_names, output_names;
  std::vector<TensorInfo> input_types, output_types;
  std::vector<std::shared_ptr<Value>> constants;  // per input: its value when constant, else null
};

// OrtKernelContext: one run of the kernel.
struct KernelContext {
  ::kiln::KernelContext* ctx = nullptr;
  std::vector<Value> inputs;
  std::vector<Value> outputs;
  std::vector<bool> made;                  // per output: GetOutput made it
  std::vector<int32_t> output_elem;        // per output: its element type (the plan's, or the op's)
  std::vector<std::shared_ptr<void>> scratch;
};

// OrtShapeInferContext: build-time shapes for an op's InferOutputShapeFn.
struct ShapeInferContext {
  const std::map<std::string, ir::Attribute>* attrs = nullptr;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  std::vector<bool> set;  // per output: the op set it
};

// OrtSessionOptions as RegisterCustomOps sees it: the domains the library adds.
struct Domain {
  std::string name;
  std::vector<const CustomOp*> ops;
};
struct SessionOptions {
  std::vector<Domain> domains;
};

// The OrtApiBase kiln hands to RegisterCustomOps.
const ApiBase* api_base();
// The table GetApi(version) answers (the same one for every supported version).
const void* api_table();

// Unimplemented API functions a library called on this thread since the last take (the first one).
std::string take_missing_call();
// A status for a kiln error (the caller owns it), and the message of one (freeing it); "" for null.
Status* make_status(int32_t code, const std::string& message);
std::string consume_status(Status* st);

// Maps an ORT element type to kiln's dtype, and back (both are ONNX's codes); false for codes kiln
// cannot hold.
bool elem_ok(int32_t elem);

}  // namespace kiln::plugins::ort
