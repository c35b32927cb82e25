/* tests/plugins/ort_test_ops.c — a small ONNX Runtime custom-op library for the tests of kiln's shim of
 * ORT's C API (src/plugins/ort_api.cpp). Written against the public ABI with declarations of its own
 * (no ORT header): the OrtApi table is read as an array of function pointers by slot index, and the
 * OrtCustomOp struct is laid out as ORT's API version 17 lays it out (ops say which version they fill). Ops, in domain kiln_ort_test:
 *
 *   Scale         Y = alpha * X (float, any shape); alpha: float attribute (default 1). V1 kernel
 *                 (CreateKernel/KernelCompute); the output's shape is given at compute time.
 *   ScaleShaped   Scale with an InferOutputShapeFn (OrtCustomOp version 17): Y's type and shape are X's.
 *   CallsMissing  calls OrtApi::SessionGetInputCount, which kiln's shim does not provide, and returns
 *                 its status (V2 kernel).
 *   Fails         returns an error status "Fails: bad input" from KernelComputeV2.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(_WIN32)
#define EXPORT __declspec(dllexport)
#else
#define EXPORT __attribute__((visibility("default")))
#endif

typedef void Status; /* OrtStatus*: opaque */
typedef void (*Fn)(void); /* one slot of the table */

/* Slot indices of OrtApi (the order of ORT's public header). */
enum {
  kCreateStatus = 0,
  kCreateCustomOpDomain = 26,
  kCustomOpDomain_Add = 27,
  kAddCustomOpDomain = 28,
  kSessionGetInputCount = 30,
  kGetTensorMutableData = 51,
  kGetDimensionsCount = 61,
  kGetDimensions = 62,
  kGetTensorShapeElementCount = 64,
  kGetTensorTypeAndShape = 65,
  kKernelInfoGetAttribute_float = 85,
  kKernelContext_GetInput = 90,
  kKernelContext_GetOutput = 91,
  kReleaseStatus = 93,
  kReleaseTensorTypeAndShapeInfo = 99,
  kShapeInferContext_GetInputTypeShape = 268,
  kShapeInferContext_SetOutputTypeShape = 270,
};

typedef struct ApiBase {
  const Fn* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)(void);
} ApiBase;

typedef struct CustomOp CustomOp;
struct CustomOp {
  uint32_t version;
  void* (*CreateKernel)(const CustomOp*, const Fn* api, const void* info);
  const char* (*GetName)(const CustomOp*);
  const char* (*GetExecutionProviderType)(const CustomOp*);
  int (*GetInputType)(const CustomOp*, size_t);
  size_t (*GetInputTypeCount)(const CustomOp*);
  int (*GetOutputType)(const CustomOp*, size_t);
  size_t (*GetOutputTypeCount)(const CustomOp*);
  void (*KernelCompute)(void*, void* context);
  void (*KernelDestroy)(void*);
  int (*GetInputCharacteristic)(const CustomOp*, size_t);
  int (*GetOutputCharacteristic)(const CustomOp*, size_t);
  int (*GetInputMemoryType)(const CustomOp*, size_t);
  int (*GetVariadicInputMinArity)(const CustomOp*);
  int (*GetVariadicInputHomogeneity)(const CustomOp*);
  int (*GetVariadicOutputMinArity)(const CustomOp*);
  int (*GetVariadicOutputHomogeneity)(const CustomOp*);
  Status* (*CreateKernelV2)(const CustomOp*, const Fn* api, const void* info, void** kernel);
  Status* (*KernelComputeV2)(void*, void* context);
  Status* (*InferOutputShapeFn)(const CustomOp*, void* context); /* from version 17 */
  int (*GetStartVersion)(const CustomOp*);
  int (*GetEndVersion)(const CustomOp*);
};

static const Fn* g_api;

#define CALL(slot, type) ((type)g_api[slot])

typedef struct ScaleKernel {
  float alpha;
} ScaleKernel;

static void* scale_create(const CustomOp* op, const Fn* api, const void* info) {
  (void)op;
  ScaleKernel* k = (ScaleKernel*)malloc(sizeof(ScaleKernel));
  if (!k) return NULL;
  k->alpha = 1.0f;
  Status* st = CALL(kKernelInfoGetAttribute_float, Status* (*)(const void*, const char*, float*))(info, "alpha", &k->alpha);
  if (st) CALL(kReleaseStatus, void (*)(Status*))(st); /* absent: the default */
  (void)api;
  return k;
}

static void scale_compute(void* kernel, void* ctx) {
  const ScaleKernel* k = (const ScaleKernel*)kernel;
  const void* x = NULL;
  void* info = NULL;
  size_t rank = 0, count = 0;
  int64_t dims[16];
  float* in = NULL;
  float* out = NULL;
  void* y = NULL;
  if (CALL(kKernelContext_GetInput, Status* (*)(const void*, size_t, const void**))(ctx, 0, &x)) return;
  if (CALL(kGetTensorTypeAndShape, Status* (*)(const void*, void**))(x, &info)) return;
  CALL(kGetDimensionsCount, Status* (*)(const void*, size_t*))(info, &rank);
  if (rank > 16) rank = 16;
  CALL(kGetDimensions, Status* (*)(const void*, int64_t*, size_t))(info, dims, rank);
  CALL(kGetTensorShapeElementCount, Status* (*)(const void*, size_t*))(info, &count);
  CALL(kReleaseTensorTypeAndShapeInfo, void (*)(void*))(info);
  if (CALL(kKernelContext_GetOutput, Status* (*)(void*, size_t, const int64_t*, size_t, void**))(ctx, 0, dims, rank, &y)) return;
  CALL(kGetTensorMutableData, Status* (*)(void*, void**))((void*)x, (void**)&in);
  CALL(kGetTensorMutableData, Status* (*)(void*, void**))(y, (void**)&out);
  for (size_t i = 0; i < count; ++i) out[i] = k->alpha * in[i];
}

static void destroy(void* kernel) { free(kernel); }

static Status* v2_create(const CustomOp* op, const Fn* api, const void* info, void** kernel) {
  (void)op;
  (void)api;
  (void)info;
  *kernel = malloc(1);
  return NULL;
}

static Status* missing_compute(void* kernel, void* ctx) {
  size_t n = 0;
  (void)kernel;
  (void)ctx;
  /* An OrtSession function a custom op has no business calling: kiln's shim answers an error. */
  return CALL(kSessionGetInputCount, Status* (*)(const void*, size_t*))(NULL, &n);
}

static Status* fails_compute(void* kernel, void* ctx) {
  (void)kernel;
  (void)ctx;
  return CALL(kCreateStatus, Status* (*)(int, const char*))(2 /* ORT_INVALID_ARGUMENT */, "Fails: bad input");
}

static Status* scale_shape(const CustomOp* op, void* ctx) {
  void* info = NULL;
  Status* st;
  (void)op;
  if ((st = CALL(kShapeInferContext_GetInputTypeShape, Status* (*)(const void*, size_t, void**))(ctx, 0, &info))) return st;
  st = CALL(kShapeInferContext_SetOutputTypeShape, Status* (*)(const void*, size_t, const void*))(ctx, 0, info);
  CALL(kReleaseTensorTypeAndShapeInfo, void (*)(void*))(info);
  return st;
}

static const char* scale_name(const CustomOp* op) { (void)op; return "Scale"; }
static const char* scale_shaped_name(const CustomOp* op) { (void)op; return "ScaleShaped"; }
static const char* missing_name(const CustomOp* op) { (void)op; return "CallsMissing"; }
static const char* fails_name(const CustomOp* op) { (void)op; return "Fails"; }
static const char* cpu_ep(const CustomOp* op) { (void)op; return "CPUExecutionProvider"; }
static int float_type(const CustomOp* op, size_t i) { (void)op; (void)i; return 1; /* FLOAT */ }
static size_t one(const CustomOp* op) { (void)op; return 1; }
static int required(const CustomOp* op, size_t i) { (void)op; (void)i; return 0; }
static int mem_default(const CustomOp* op, size_t i) { (void)op; (void)i; return 0; }
static int arity_one(const CustomOp* op) { (void)op; return 1; }

static CustomOp g_scale, g_scale_shaped, g_missing, g_fails;

static void common(CustomOp* op, const char* (*name)(const CustomOp*)) {
  op->version = 16;
  op->GetName = name;
  op->GetExecutionProviderType = cpu_ep;
  op->GetInputType = float_type;
  op->GetInputTypeCount = one;
  op->GetOutputType = float_type;
  op->GetOutputTypeCount = one;
  op->KernelDestroy = destroy;
  op->GetInputCharacteristic = required;
  op->GetOutputCharacteristic = required;
  op->GetInputMemoryType = mem_default;
  op->GetVariadicInputMinArity = arity_one;
  op->GetVariadicInputHomogeneity = arity_one;
  op->GetVariadicOutputMinArity = arity_one;
  op->GetVariadicOutputHomogeneity = arity_one;
}

EXPORT Status* RegisterCustomOps(void* options, const ApiBase* base) {
  void* domain = NULL;
  Status* st;
  g_api = base->GetApi(16);
  if (!g_api) return NULL;
  common(&g_scale, scale_name);
  g_scale.CreateKernel = scale_create;
  g_scale.KernelCompute = scale_compute;
  common(&g_scale_shaped, scale_shaped_name);
  g_scale_shaped.version = 17;
  g_scale_shaped.CreateKernel = scale_create;
  g_scale_shaped.KernelCompute = scale_compute;
  g_scale_shaped.InferOutputShapeFn = scale_shape;
  common(&g_missing, missing_name);
  g_missing.CreateKernelV2 = v2_create;
  g_missing.KernelComputeV2 = missing_compute;
  common(&g_fails, fails_name);
  g_fails.CreateKernelV2 = v2_create;
  g_fails.KernelComputeV2 = fails_compute;
  if ((st = CALL(kCreateCustomOpDomain, Status* (*)(const char*, void**))("kiln_ort_test", &domain))) return st;
  if ((st = CALL(kCustomOpDomain_Add, Status* (*)(void*, const CustomOp*))(domain, &g_scale))) return st;
  if ((st = CALL(kCustomOpDomain_Add, Status* (*)(void*, const CustomOp*))(domain, &g_scale_shaped))) return st;
  if ((st = CALL(kCustomOpDomain_Add, Status* (*)(void*, const CustomOp*))(domain, &g_missing))) return st;
  if ((st = CALL(kCustomOpDomain_Add, Status* (*)(void*, const CustomOp*))(domain, &g_fails))) return st;
  return CALL(kAddCustomOpDomain, Status* (*)(void*, void*))(options, domain);
}
