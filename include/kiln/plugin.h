/* kiln/plugin.h — the kiln plugin ABI: custom operators in a shared library that kiln loads.
 *
 * Pure C (C99), so a plugin built with another compiler, another C++ standard library or another kiln
 * release loads as long as it was built against the same KILN_PLUGIN_ABI_VERSION. A plugin includes
 * this header only; it does not link against libkiln.
 *
 * A plugin library exports two functions (both `extern "C"`, visibility default):
 *
 *   uint32_t kiln_plugin_abi_version(void);          returns KILN_PLUGIN_ABI_VERSION as compiled
 *   int32_t  kiln_plugin_register(const KilnPluginHost* host, KilnPluginRegistry* registry);
 *
 * kiln calls kiln_plugin_abi_version() first and refuses a library built for another version (the
 * message names the library, the version this kiln expects and the one found). It then calls
 * kiln_plugin_register() once; the plugin names itself (host->set_info) and declares its ops
 * (host->add_op), and returns KILN_STATUS_OK, or an error code after host->set_error. A library that
 * fails registration adds no op at all.
 *
 * An op is identified by (domain, op type, since_version): the ONNX node's domain and op_type, and the
 * oldest opset version of that domain the op implements. Ops of kiln's own table (e.g. ai.onnx Relu)
 * are overridden only when the user asks for it (`--plugin-override`, BuildOptions::plugin_override).
 *
 * Each op has, beside its declaration (attributes, input/output counts, dtypes):
 *   infer    — output dtypes and shapes from the input dtypes/shapes and attributes, at build time.
 *              Dims may be symbolic (unknown value, optional name); constant inputs are given.
 *   kernels  — one per device (CPU required; CUDA optional), following kiln's kernel contract:
 *              create   once per engine (build or load): parse attributes, pack constant inputs;
 *              reshape  on the host, once per input-shape signature: output shapes, workspace bytes;
 *              run      pointers in, work done (CPU) or queued on the stream (CUDA): no allocation,
 *                       no synchronization, no decisions kiln did not ask for;
 *              destroy  frees what create made.
 *              A kernel may offer several tactics (named implementations); the builder's tuner times
 *              them like its own and the engine file records the choice. Untuned: tactic 0.
 *
 * Errors: every callback returns a KILN_STATUS_* code; on error it writes a NUL-terminated message
 * into the KilnError it was given (kiln_plugin_error() below does both). kiln prefixes the message
 * with the library, plugin and op names, so the user sees which plugin failed.
 *
 * What kiln protects and what it cannot: kiln checks every value a plugin returns (status codes,
 * ranks, dtypes, shapes against what the plan expects, tactic indices) and turns a bad one into an
 * error naming the plugin. A C ABI cannot protect the host process from a plugin that crashes,
 * corrupts memory, writes past its buffers, or lets a C++ exception escape a callback: those take
 * the process down. Catch exceptions inside every callback (the C++ wrappers of kiln/plugin.hpp do).
 *
 * Threads: infer, create and destroy are called from one thread at a time per op. reshape and run
 * of one kernel object may be called from several threads at once (one per execution context):
 * they must not modify the kernel object.
 *
 * Forward compatibility: every struct starts with `struct_size`, set to sizeof() as the side that
 * fills it was compiled. Fields are only ever appended (within one ABI version): kiln reads fields
 * of a plugin's struct only below its struct_size, and a plugin may check host->struct_size before
 * using a newer host function. Removing or changing a field bumps KILN_PLUGIN_ABI_VERSION.
 */
#ifndef KILN_PLUGIN_H_
#define KILN_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_PLUGIN_ABI_VERSION 1u

/* Longest rank a plugin op's tensors may have (a larger one is refused before the plugin sees it). */
#define KILN_PLUGIN_MAX_RANK 16

#if defined(_WIN32)
#define KILN_PLUGIN_EXPORT __declspec(dllexport)
#else
#define KILN_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ---- Status codes (int32_t) */
#define KILN_STATUS_OK 0
#define KILN_STATUS_INVALID_ARGUMENT 1 /* bad inputs/attributes for this op (the user's model) */
#define KILN_STATUS_UNSUPPORTED 2      /* a valid case the plugin does not handle */
#define KILN_STATUS_RUNTIME_ERROR 3    /* anything else that went wrong */
#define KILN_STATUS_NOT_FOUND 4        /* attribute getters: no attribute of that name */
#define KILN_STATUS_WRONG_KIND 5       /* attribute getters: the attribute is of another kind */

/* Where a callback writes its error message (NUL-terminated, truncated to `capacity`). */
typedef struct KilnError {
  char* message;
  size_t capacity;
} KilnError;

/* Writes a printf-style message into `err` and returns `code`: `return kiln_plugin_error(err,
 * KILN_STATUS_INVALID_ARGUMENT, "alpha must be > 0, got %g", alpha);` */
static inline int32_t kiln_plugin_error(KilnError* err, int32_t code, const char* fmt, ...) {
  if (err && err->message && err->capacity) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, err->capacity, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* ---- Element types: the codes of ONNX TensorProto.DataType */
#define KILN_DTYPE_UNDEFINED 0
#define KILN_DTYPE_FLOAT32 1
#define KILN_DTYPE_UINT8 2
#define KILN_DTYPE_INT8 3
#define KILN_DTYPE_UINT16 4
#define KILN_DTYPE_INT16 5
#define KILN_DTYPE_INT32 6
#define KILN_DTYPE_INT64 7
#define KILN_DTYPE_BOOL 9
#define KILN_DTYPE_FLOAT16 10
#define KILN_DTYPE_FLOAT64 11
#define KILN_DTYPE_UINT32 12
#define KILN_DTYPE_UINT64 13
#define KILN_DTYPE_BFLOAT16 16
/* Strings, complex and sub-byte types are not passed to plugins in ABI version 1. */

/* ---- Devices */
#define KILN_DEVICE_CPU 0
#define KILN_DEVICE_CUDA 1

/* ---- Attribute kinds (an op's declaration) */
#define KILN_ATTR_INT 1
#define KILN_ATTR_FLOAT 2
#define KILN_ATTR_STRING 3
#define KILN_ATTR_INTS 4
#define KILN_ATTR_FLOATS 5
#define KILN_ATTR_TENSOR 6

/* One attribute an op takes. kiln checks each node against the list before the plugin sees it: a
 * required attribute that is missing, or one of another kind, is an error naming node and
 * attribute. Attributes the list does not name are passed through unchecked. */
typedef struct KilnAttrDecl {
  const char* name;
  int32_t kind;     /* KILN_ATTR_* */
  int32_t required; /* 1: the node must have it */
} KilnAttrDecl;

/* Opaque handles owned by kiln, valid during the call that receives them. */
typedef struct KilnAttributes KilnAttributes;
typedef struct KilnPluginRegistry KilnPluginRegistry;

/* A dimension as build-time inference sees it: `value` >= 0 when known, -1 when not (then `symbol`
 * may name it, e.g. "batch": two dims with the same symbol are equal). */
typedef struct KilnDim {
  int64_t value;
  const char* symbol; /* NULL or a name; output symbols must stay valid until infer returns */
} KilnDim;

/* A tensor's type at build time. rank -1: unknown rank (dims unused). dtype KILN_DTYPE_UNDEFINED:
 * unknown element type. */
typedef struct KilnTensorType {
  int32_t dtype;
  int32_t rank;
  KilnDim dims[KILN_PLUGIN_MAX_RANK];
} KilnTensorType;

/* A tensor with its data, read-only: constant inputs at infer/create time, inputs at run time.
 * `data` is host memory for CPU kernels and constants, device memory for a CUDA kernel's inputs.
 * Elements are dense, row-major. */
typedef struct KilnTensor {
  int32_t dtype;
  int32_t rank;
  const int64_t* dims;
  const void* data;
} KilnTensor;

/* An output at run time: its dtype and dims (as reshape gave them) and memory to write, which kiln
 * allocated and does not initialize: the kernel writes every element. */
typedef struct KilnMutableTensor {
  int32_t dtype;
  int32_t rank;
  const int64_t* dims;
  void* data;
} KilnMutableTensor;

/* ---- What infer sees and fills */
typedef struct KilnInferContext {
  size_t struct_size;
  const KilnAttributes* attrs;
  int32_t num_inputs;                /* the node's inputs; an omitted one has dtype UNDEFINED, rank -1 */
  const KilnTensorType* inputs;
  const KilnTensor* const* input_values; /* per input: its value when constant at build time, else NULL */
  int32_t num_outputs;
  KilnTensorType* outputs;           /* to fill: one per output (kiln sets them unknown beforehand) */
} KilnInferContext;

/* ---- What a kernel's create sees */
typedef struct KilnKernelInit {
  size_t struct_size;
  const KilnAttributes* attrs;
  int32_t num_inputs;
  const KilnTensorType* inputs;          /* build-time types (dims may be unknown) */
  const KilnTensor* const* constants;    /* per input: its value when constant (host memory), else NULL */
  int32_t num_outputs;
  void* stream;                          /* CUDA kernels: a cudaStream_t kiln prepares on; CPU: NULL */
} KilnKernelInit;

/* ---- What reshape sees and fills, once per input-shape signature */
typedef struct KilnReshapeContext {
  size_t struct_size;
  int32_t num_inputs;
  const KilnTensor* inputs;     /* dtypes and concrete dims; `data` set only for host-known values (constants) */
  int32_t num_outputs;
  KilnTensorType* outputs;      /* to fill: dtype, rank and every dim (concrete, >= 0) per output */
  size_t workspace_bytes;       /* to fill: scratch memory run needs (0: none) */
  int32_t tactic;               /* the tactic to plan: the tuner's choice, or 0 */
} KilnReshapeContext;

/* ---- What run sees */
typedef struct KilnRunContext {
  size_t struct_size;
  int32_t num_inputs;
  const KilnTensor* inputs;     /* an omitted input has data NULL and rank -1 */
  int32_t num_outputs;
  KilnMutableTensor* outputs;   /* an output the node does not use has data NULL */
  void* workspace;              /* workspace_bytes from reshape, 256-byte aligned; NULL when 0 */
  int32_t tactic;               /* the same as reshape was given */
  void* stream;                 /* CUDA: the cudaStream_t to queue work on; CPU: NULL */
} KilnRunContext;

/* ---- A kernel for one device */
typedef struct KilnPluginKernel {
  size_t struct_size;
  int32_t device;               /* KILN_DEVICE_CPU or KILN_DEVICE_CUDA */
  int32_t num_tactics;          /* 0 or 1: one way to run; more: the tuner times tactics 0..n-1 */
  const char* const* tactic_names; /* num_tactics short stable names ("scalar", "blocked"); may be NULL */
  /* Once per engine. `*kernel` receives the plugin's object (may stay NULL for stateless kernels). */
  int32_t (*create)(void* op_data, const KilnKernelInit* init, void** kernel, KilnError* err);
  int32_t (*reshape)(const void* kernel, KilnReshapeContext* ctx, KilnError* err);
  int32_t (*run)(const void* kernel, const KilnRunContext* ctx, KilnError* err);
  void (*destroy)(void* kernel);  /* may be NULL */
} KilnPluginKernel;

/* ---- An op */
typedef struct KilnPluginOp {
  size_t struct_size;
  const char* domain;           /* "" or "ai.onnx" for ONNX's default domain (overrides only) */
  const char* op_type;
  int32_t since_version;        /* oldest opset version of `domain` it implements (>= 1) */
  int32_t min_inputs, max_inputs, min_outputs, max_outputs;
  const KilnAttrDecl* attrs;
  int32_t num_attrs;
  /* Element types every tensor input accepts (0 entries: any; infer may refuse finer cases). */
  const int32_t* dtypes;
  int32_t num_dtypes;
  void* op_data;                /* handed back to infer and create; owned by the plugin */
  int32_t (*infer)(void* op_data, KilnInferContext* ctx, KilnError* err);
  const KilnPluginKernel* cpu;  /* required */
  const KilnPluginKernel* cuda; /* optional (NULL) */
} KilnPluginOp;

/* ---- What kiln gives the plugin: registration and attribute access */
typedef struct KilnPluginHost {
  size_t struct_size;
  uint32_t abi_version;         /* KILN_PLUGIN_ABI_VERSION of this kiln */
  const char* kiln_version;     /* "0.1.0" */

  /* Registration (only during kiln_plugin_register). `name` and `version` name the plugin in
   * messages and engine files; an engine records each op's library, plugin version and a hash of its
   * declaration, and refuses to load with another. The strings are copied. */
  void (*set_info)(KilnPluginRegistry* registry, const char* name, const char* version);
  /* Declares an op; the op struct and what it points to (names, lists, kernels) must stay valid
   * while the library is loaded (kiln never unloads it). An invalid declaration is an error here. */
  int32_t (*add_op)(KilnPluginRegistry* registry, const KilnPluginOp* op);
  /* The message of a failed registration (kiln_plugin_register then returns non-zero). */
  void (*set_error)(KilnPluginRegistry* registry, const char* message);

  /* Attribute getters: KILN_STATUS_OK, KILN_STATUS_NOT_FOUND or KILN_STATUS_WRONG_KIND. Returned
   * pointers stay valid while `attrs` is (the call that received it). */
  int32_t (*attr_int)(const KilnAttributes* attrs, const char* name, int64_t* value);
  int32_t (*attr_float)(const KilnAttributes* attrs, const char* name, float* value);
  int32_t (*attr_string)(const KilnAttributes* attrs, const char* name, const char** data, size_t* length);
  int32_t (*attr_ints)(const KilnAttributes* attrs, const char* name, const int64_t** values, size_t* count);
  int32_t (*attr_floats)(const KilnAttributes* attrs, const char* name, const float** values, size_t* count);
  int32_t (*attr_tensor)(const KilnAttributes* attrs, const char* name, KilnTensor* value);
} KilnPluginHost;

/* The two exports, as a plugin declares them. */
typedef uint32_t (*KilnPluginAbiVersionFn)(void);
typedef int32_t (*KilnPluginRegisterFn)(const KilnPluginHost* host, KilnPluginRegistry* registry);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* KILN_PLUGIN_H_ */
