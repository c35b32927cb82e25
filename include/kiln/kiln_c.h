/* kiln/kiln_c.h — kiln's C API: build or load an engine, run it, read its outputs. For languages
 * that call C (the role of ONNX Runtime's C API); C++ code uses kiln/kiln.h.
 *
 * Conventions:
 *  - Every function that can fail returns a KilnCode (KILN_OK = 0) and leaves a message naming what
 *    is wrong in kiln_last_error() (per thread, valid until this thread's next failing call).
 *  - Objects are opaque and released by their kiln_*_release function (NULL is accepted). An engine
 *    may be released while its contexts live: they keep what they need.
 *  - A context runs on one thread at a time; different contexts of one engine run concurrently.
 *  - Element types are ONNX's TensorProto codes (1 float32, 7 int64, 10 float16, ...), one element
 *    per dtype size; bool elements are bytes 0 or 1. The 4- and 2-bit types and strings are not
 *    taken (nor given) by the C API.
 *  - Tensors given to kiln_context_run are CPU memory, read in place during the call.
 *  - Outputs are owned by the KilnOutputs the run returns; their data stays valid until it is
 *    released.
 */
#ifndef KILN_KILN_C_H_
#define KILN_KILN_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum KilnCode {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1, /* a wrong name, dtype, shape or option */
  KILN_NOT_FOUND = 2,        /* a missing file */
  KILN_INVALID_MODEL = 3,    /* a model or engine file kiln refuses */
  KILN_UNSUPPORTED = 4,      /* an op or feature kiln lacks */
  KILN_ENGINE_MISMATCH = 5,  /* an engine built for another device, machine or format */
  KILN_RUNTIME_ERROR = 6,    /* anything else (out of memory, a device error, cancelled, ...) */
  KILN_IO_ERROR = 7,         /* reading or writing a file failed (a model that cannot be read, too) */
  KILN_CODE_MAX_ = 0x7fffffff /* keeps the enum 32 bits wide */
} KilnCode;

typedef struct KilnEngine KilnEngine;
typedef struct KilnContext KilnContext;
typedef struct KilnOutputs KilnOutputs;

/* Build options; kiln_build_options_default() fills the defaults (CPU, float32, opt level 2) and
 * struct_size, which lets later releases add fields at the end: the library reads only the fields
 * the caller's struct_size covers (the others keep their defaults). */
typedef struct KilnBuildOptions {
  uint32_t struct_size;  /* sizeof(KilnBuildOptions) as the caller compiled it */
  const char* device;    /* "cpu" or "cuda" */
  const char* precision; /* "fp32", "tf32", "fp16", "bf16", "best" (reduced float precisions: CUDA), or
                            "int8", "fp8" (8 bits from calibration data: calibration_dir or _cache) */
  int opt_level;         /* 0-3 */
  int tune;              /* -1: on CUDA; 0: no; 1: yes */
  const char* timing_cache; /* a file or folder, or NULL */
  /* 8-bit precisions (kiln::BuildOptions describes them); NULL: none / the precision's own. */
  const char* calibration_dir;   /* one subfolder of <input>.npy per set, or one .npy per set */
  const char* calibration_cache; /* ranges read from it when written for this model, else written */
  const char* rest_precision;    /* the precision of what is not in 8 bits (default fp16 on CUDA, fp32 on the CPU) */
  /* 1: float outputs keep the engine's half type (fp16/bf16 engines, or an 8-bit one whose rest is
     half) instead of a Cast back to float32 each; 0 (default): float32 outputs as the model declares. */
  int half_outputs;
} KilnBuildOptions;

/* One input: a CPU tensor by name. */
typedef struct KilnTensor {
  const char* name;
  int32_t dtype;        /* ONNX TensorProto code */
  size_t rank;
  const int64_t* shape; /* rank dims */
  const void* data;     /* row-major, the dtype's size times the element count */
} KilnTensor;

const char* kiln_version(void);
const char* kiln_last_error(void);

/* Fills the defaults of a KilnBuildOptions of struct_size bytes (the caller's sizeof), writing no
 * byte past it. kiln_build_options_default(o) is this with the header's sizeof; the exported function
 * of that name (for programs built against the first header, whose struct ended at timing_cache)
 * fills that first layout only. */
void kiln_build_options_init(KilnBuildOptions* options, size_t struct_size);
void kiln_build_options_default(KilnBuildOptions* options);
#define kiln_build_options_default(options) kiln_build_options_init((options), sizeof(KilnBuildOptions))
/* An .onnx file (external data beside it) built for options' device; options NULL: the defaults. */
KilnCode kiln_engine_build(const char* onnx_path, const KilnBuildOptions* options, KilnEngine** engine);
/* An engine file written by kiln_engine_save (or `kiln build -o`). */
KilnCode kiln_engine_load(const char* engine_path, KilnEngine** engine);
KilnCode kiln_engine_save(const KilnEngine* engine, const char* engine_path);
void kiln_engine_release(KilnEngine* engine);

/* The engine's inputs and outputs: count, and each one's name, dtype and declared shape (a dynamic
 * dim is -1). Strings and arrays belong to the engine. */
size_t kiln_engine_input_count(const KilnEngine* engine);
size_t kiln_engine_output_count(const KilnEngine* engine);
const char* kiln_engine_input_name(const KilnEngine* engine, size_t index);
const char* kiln_engine_output_name(const KilnEngine* engine, size_t index);
KilnCode kiln_engine_input_info(const KilnEngine* engine, size_t index, int32_t* dtype, size_t* rank, const int64_t** shape);
KilnCode kiln_engine_output_info(const KilnEngine* engine, size_t index, int32_t* dtype, size_t* rank,
                                 const int64_t** shape);

KilnCode kiln_context_create(const KilnEngine* engine, KilnContext** context);
void kiln_context_release(KilnContext* context);
/* Runs the engine on `count` named inputs (an input with a default may be left out). */
KilnCode kiln_context_run(KilnContext* context, const KilnTensor* inputs, size_t count, KilnOutputs** outputs);

/* The outputs of one run, in engine order. */
size_t kiln_outputs_count(const KilnOutputs* outputs);
KilnCode kiln_outputs_get(const KilnOutputs* outputs, size_t index, KilnTensor* tensor);
void kiln_outputs_release(KilnOutputs* outputs);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KILN_C_H_ */
