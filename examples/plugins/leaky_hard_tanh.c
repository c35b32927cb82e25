/* examples/plugins/leaky_hard_tanh.c — an example kiln plugin, written against include/kiln/plugin.h
 * alone (docs/plugins.md walks through it).
 *
 * Op kiln_example.LeakyHardTanh (opset 1 of domain "kiln_example"): one float32 input X, one output Y
 * of X's shape:
 *     Y = X                                 where min_val <= X <= max_val
 *     Y = max_val + slope * (X - max_val)   where X > max_val
 *     Y = min_val + slope * (X - min_val)   where X < min_val
 * Attributes: min_val (float, default -1), max_val (float, default 1), slope (float, default 0.01);
 * min_val <= max_val is checked.
 *
 * Its CPU kernel has two tactics, which the tuner times: "scalar" (one element at a time) and
 * "blocked" (8 elements per step, branch-free), computing the same values.
 */
#include <kiln/plugin.h>

#include <stdlib.h>
#include <string.h>

static const KilnPluginHost* g_host; /* kiln's table: attribute getters */

/* The parsed attributes: what create keeps as the kernel object. */
typedef struct Params {
  float min_val, max_val, slope;
} Params;

/* Reads one optional float attribute: absent keeps the default, another kind is an error. */
static int32_t read_float(const KilnAttributes* attrs, const char* name, float* value, KilnError* err) {
  int32_t st = g_host->attr_float(attrs, name, value);
  if (st == KILN_STATUS_NOT_FOUND) return KILN_STATUS_OK;
  if (st != KILN_STATUS_OK) return kiln_plugin_error(err, KILN_STATUS_INVALID_ARGUMENT, "attribute '%s' must be a float", name);
  return KILN_STATUS_OK;
}

static int32_t parse(const KilnAttributes* attrs, Params* p, KilnError* err) {
  int32_t st;
  p->min_val = -1.0f;
  p->max_val = 1.0f;
  p->slope = 0.01f;
  if ((st = read_float(attrs, "min_val", &p->min_val, err)) != KILN_STATUS_OK) return st;
  if ((st = read_float(attrs, "max_val", &p->max_val, err)) != KILN_STATUS_OK) return st;
  if ((st = read_float(attrs, "slope", &p->slope, err)) != KILN_STATUS_OK) return st;
  if (!(p->min_val <= p->max_val))
    return kiln_plugin_error(err, KILN_STATUS_INVALID_ARGUMENT, "min_val (%g) must be <= max_val (%g)", p->min_val, p->max_val);
  return KILN_STATUS_OK;
}

/* Build time: Y has X's dtype and shape, symbolic dims included. Also checks the attributes, so a bad
 * model fails when it is built, not when it runs. */
static int32_t infer(void* op_data, KilnInferContext* ctx, KilnError* err) {
  Params p;
  int32_t st = parse(ctx->attrs, &p, err);
  (void)op_data;
  if (st != KILN_STATUS_OK) return st;
  if (ctx->inputs[0].dtype != KILN_DTYPE_UNDEFINED && ctx->inputs[0].dtype != KILN_DTYPE_FLOAT32)
    return kiln_plugin_error(err, KILN_STATUS_UNSUPPORTED, "X must be float32 (dtype code %d given)", ctx->inputs[0].dtype);
  ctx->outputs[0] = ctx->inputs[0];
  ctx->outputs[0].dtype = KILN_DTYPE_FLOAT32;
  return KILN_STATUS_OK;
}

/* Once per engine: the kernel object holds the parsed attributes. */
static int32_t create(void* op_data, const KilnKernelInit* init, void** kernel, KilnError* err) {
  Params* p = (Params*)malloc(sizeof(Params));
  int32_t st;
  (void)op_data;
  if (!p) return kiln_plugin_error(err, KILN_STATUS_RUNTIME_ERROR, "out of memory");
  st = parse(init->attrs, p, err);
  if (st != KILN_STATUS_OK) {
    free(p);
    return st;
  }
  *kernel = p;
  return KILN_STATUS_OK;
}

static void destroy(void* kernel) { free(kernel); }

/* Once per input shape: Y is X's shape; no workspace. */
static int32_t reshape(const void* kernel, KilnReshapeContext* ctx, KilnError* err) {
  int32_t d;
  (void)kernel;
  (void)err;
  ctx->outputs[0].dtype = KILN_DTYPE_FLOAT32;
  ctx->outputs[0].rank = ctx->inputs[0].rank;
  for (d = 0; d < ctx->inputs[0].rank; ++d) {
    ctx->outputs[0].dims[d].value = ctx->inputs[0].dims[d];
    ctx->outputs[0].dims[d].symbol = NULL;
  }
  ctx->workspace_bytes = 0;
  return KILN_STATUS_OK;
}

static float leaky_hard_tanh(float x, const Params* p) {
  if (x > p->max_val) return p->max_val + p->slope * (x - p->max_val);
  if (x < p->min_val) return p->min_val + p->slope * (x - p->min_val);
  return x;
}

static int32_t run(const void* kernel, const KilnRunContext* ctx, KilnError* err) {
  const Params* p = (const Params*)kernel;
  const float* x = (const float*)ctx->inputs[0].data;
  float* y = (float*)ctx->outputs[0].data;
  int64_t n = 1, i = 0;
  int32_t d;
  (void)err;
  for (d = 0; d < ctx->inputs[0].rank; ++d) n *= ctx->inputs[0].dims[d];
  if (ctx->tactic == 1) { /* "blocked": 8 at a time, selects instead of branches (vectorizes) */
    for (; i + 8 <= n; i += 8) {
      int k;
      for (k = 0; k < 8; ++k) {
        const float v = x[i + k];
        const float hi = p->max_val + p->slope * (v - p->max_val);
        const float lo = p->min_val + p->slope * (v - p->min_val);
        y[i + k] = v > p->max_val ? hi : (v < p->min_val ? lo : v);
      }
    }
  }
  for (; i < n; ++i) y[i] = leaky_hard_tanh(x[i], p);
  return KILN_STATUS_OK;
}

static const char* const kTactics[] = {"scalar", "blocked"};

static const KilnPluginKernel kCpuKernel = {
    sizeof(KilnPluginKernel), KILN_DEVICE_CPU, 2, kTactics, create, reshape, run, destroy,
};

static const KilnAttrDecl kAttrs[] = {
    {"min_val", KILN_ATTR_FLOAT, 0},
    {"max_val", KILN_ATTR_FLOAT, 0},
    {"slope", KILN_ATTR_FLOAT, 0},
};

static const int32_t kDtypes[] = {KILN_DTYPE_FLOAT32};

static const KilnPluginOp kOp = {
    sizeof(KilnPluginOp),
    "kiln_example", "LeakyHardTanh", 1, /* domain, op type, since opset version */
    1, 1, 1, 1,                         /* inputs min..max, outputs min..max */
    kAttrs, 3,
    kDtypes, 1,
    NULL,                               /* op_data */
    infer,
    &kCpuKernel,
    NULL,                               /* no CUDA kernel */
};

KILN_PLUGIN_EXPORT uint32_t kiln_plugin_abi_version(void) { return KILN_PLUGIN_ABI_VERSION; }

KILN_PLUGIN_EXPORT int32_t kiln_plugin_register(const KilnPluginHost* host, KilnPluginRegistry* registry) {
  g_host = host;
  host->set_info(registry, "kiln_example", "1.0.0");
  return host->add_op(registry, &kOp);
}
