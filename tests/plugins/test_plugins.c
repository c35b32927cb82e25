/* tests/plugins/test_plugins.c — small plugins that misbehave on purpose, for tests/unit/test_plugins.cpp
 * and tests/python/test_plugins.py. One source, built once per variant (-DKILN_TEST_VARIANT=...):
 *   WRONG_ABI  reports plugin ABI version 999.
 *   BAD_SHAPE  op kiln_test.BadShape: infer fails with a message when attribute `fail` is 1 (the
 *              default); with fail=0 it passes, and run fails instead; with fail=2 reshape gives
 *              the output one more dimension than infer said.
 *   OVERRIDE   overrides ai.onnx Relu with y = 2x for x > 0, else 0 (told apart from kiln's Relu).
 *   ORT_LIKE   an ONNX Runtime custom-op library's entry point only (RegisterCustomOps).
 *   INVALID    declares kiln_test.NoKernel without a CPU kernel (refused at load).
 */
#include <kiln/plugin.h>

#define WRONG_ABI 1
#define BAD_SHAPE 2
#define OVERRIDE 3
#define ORT_LIKE 4
#define INVALID 5

#if KILN_TEST_VARIANT == ORT_LIKE
KILN_PLUGIN_EXPORT void* RegisterCustomOps(void* options, const void* api) {
  (void)options;
  (void)api;
  return 0;
}
#else

static const KilnPluginHost* g_host;

static int32_t same_shape_infer(void* op_data, KilnInferContext* ctx, KilnError* err) {
  int64_t fail = 1;
  (void)op_data;
#if KILN_TEST_VARIANT == BAD_SHAPE
  g_host->attr_int(ctx->attrs, "fail", &fail);
  if (fail == 1) return kiln_plugin_error(err, KILN_STATUS_INVALID_ARGUMENT, "BadShape refuses every shape (fail=%lld)", (long long)fail);
#else
  (void)fail;
  (void)err;
#endif
  ctx->outputs[0] = ctx->inputs[0];
  return KILN_STATUS_OK;
}

/* The kernel object is the `fail` attribute (BAD_SHAPE), as a pointer-sized integer. */
static int32_t create(void* op_data, const KilnKernelInit* init, void** kernel, KilnError* err) {
  int64_t fail = 0;
  (void)op_data;
  (void)err;
  g_host->attr_int(init->attrs, "fail", &fail);
  *kernel = (void*)(intptr_t)fail;
  return KILN_STATUS_OK;
}

static int32_t reshape(const void* kernel, KilnReshapeContext* ctx, KilnError* err) {
  int32_t d;
  (void)err;
  ctx->outputs[0].dtype = ctx->inputs[0].dtype;
  ctx->outputs[0].rank = ctx->inputs[0].rank;
  for (d = 0; d < ctx->inputs[0].rank; ++d) {
    ctx->outputs[0].dims[d].value = ctx->inputs[0].dims[d];
    ctx->outputs[0].dims[d].symbol = 0;
  }
  if ((intptr_t)kernel == 2) { /* a shape infer did not promise */
    ctx->outputs[0].dims[ctx->outputs[0].rank].value = 1;
    ctx->outputs[0].dims[ctx->outputs[0].rank].symbol = 0;
    ctx->outputs[0].rank += 1;
  }
  return KILN_STATUS_OK;
}

static int32_t run(const void* kernel, const KilnRunContext* ctx, KilnError* err) {
  const float* x = (const float*)ctx->inputs[0].data;
  float* y = (float*)ctx->outputs[0].data;
  int64_t n = 1, i;
  int32_t d;
  (void)kernel;
#if KILN_TEST_VARIANT == BAD_SHAPE
  (void)x;
  (void)y;
  (void)n;
  (void)i;
  (void)d;
  return kiln_plugin_error(err, KILN_STATUS_RUNTIME_ERROR, "BadShape's kernel fails on purpose");
#else
  (void)err;
  for (d = 0; d < ctx->inputs[0].rank; ++d) n *= ctx->inputs[0].dims[d];
  for (i = 0; i < n; ++i) y[i] = x[i] > 0 ? 2 * x[i] : 0;
  return KILN_STATUS_OK;
#endif
}

static const KilnPluginKernel kCpu = {sizeof(KilnPluginKernel), KILN_DEVICE_CPU, 0, 0, create, reshape, run, 0};
static const int32_t kFloat[] = {KILN_DTYPE_FLOAT32};

#if KILN_TEST_VARIANT == BAD_SHAPE
static const KilnAttrDecl kAttrs[] = {{"fail", KILN_ATTR_INT, 0}};
static const KilnPluginOp kOp = {sizeof(KilnPluginOp), "kiln_test", "BadShape", 1, 1, 1, 1, 1, kAttrs, 1, kFloat, 1, 0,
                                 same_shape_infer, &kCpu, 0};
#define PLUGIN_NAME "kiln_test_bad_shape"
#elif KILN_TEST_VARIANT == INVALID
static const KilnPluginOp kOp = {sizeof(KilnPluginOp), "kiln_test", "NoKernel", 1, 1, 1, 1, 1, 0, 0, kFloat, 1, 0,
                                 same_shape_infer, 0, 0};
#define PLUGIN_NAME "kiln_test_invalid"
#else
static const KilnPluginOp kOp = {sizeof(KilnPluginOp), "", "Relu", 1, 1, 1, 1, 1, 0, 0, kFloat, 1, 0, same_shape_infer, &kCpu, 0};
#define PLUGIN_NAME "kiln_test_override"
#endif

KILN_PLUGIN_EXPORT uint32_t kiln_plugin_abi_version(void) {
#if KILN_TEST_VARIANT == WRONG_ABI
  return 999;
#else
  return KILN_PLUGIN_ABI_VERSION;
#endif
}

KILN_PLUGIN_EXPORT int32_t kiln_plugin_register(const KilnPluginHost* host, KilnPluginRegistry* registry) {
  g_host = host;
  host->set_info(registry, PLUGIN_NAME, "0.1");
  return host->add_op(registry, &kOp);
}
#endif
