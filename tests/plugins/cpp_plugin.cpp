// tests/plugins/cpp_plugin.cpp — a plugin written with the C++ wrappers of kiln/plugin.hpp, for
// tests/unit/test_plugins.cpp: op kiln_test.Scale, Y = alpha * X (float32), attribute alpha (float,
// required; alpha = 0 is refused by create, as an exception the wrappers turn into an error).
#include <kiln/plugin.hpp>

namespace {

class ScaleKernel {
 public:
  ScaleKernel(const kiln_plugin::Attributes& attrs, const KilnKernelInit&) : alpha_(attrs.get_float("alpha", 1.f)) {
    if (alpha_ == 0.f) throw kiln_plugin::Error(KILN_STATUS_INVALID_ARGUMENT, "alpha must not be 0");
  }
  void reshape(KilnReshapeContext& ctx) const {
    ctx.outputs[0].dtype = KILN_DTYPE_FLOAT32;
    ctx.outputs[0].rank = ctx.inputs[0].rank;
    for (int32_t d = 0; d < ctx.inputs[0].rank; ++d) ctx.outputs[0].dims[d] = {ctx.inputs[0].dims[d], nullptr};
  }
  void run(const KilnRunContext& ctx) const {
    const auto* x = static_cast<const float*>(ctx.inputs[0].data);
    auto* y = static_cast<float*>(ctx.outputs[0].data);
    const int64_t n = kiln_plugin::numel(ctx.inputs[0].dims, ctx.inputs[0].rank);
    for (int64_t i = 0; i < n; ++i) y[i] = alpha_ * x[i];
  }

 private:
  float alpha_;
};

int32_t infer(void*, KilnInferContext* ctx, KilnError* err) {
  return kiln_plugin::guard(err, [&] {
    kiln_plugin::Attributes(ctx->attrs).get_float("alpha", 1.f);  // throws when alpha is not a float
    ctx->outputs[0] = ctx->inputs[0];
  });
}

const KilnPluginKernel kCpu = kiln_plugin::cpu_kernel<ScaleKernel>();
const KilnAttrDecl kAttrs[] = {{"alpha", KILN_ATTR_FLOAT, 1}};
const int32_t kFloat[] = {KILN_DTYPE_FLOAT32};
const KilnPluginOp kOp = {sizeof(KilnPluginOp), "kiln_test", "Scale", 1, 1, 1, 1, 1, kAttrs, 1, kFloat, 1, nullptr, infer, &kCpu, nullptr};

}  // namespace

extern "C" KILN_PLUGIN_EXPORT uint32_t kiln_plugin_abi_version(void) { return KILN_PLUGIN_ABI_VERSION; }

extern "C" KILN_PLUGIN_EXPORT int32_t kiln_plugin_register(const KilnPluginHost* host, KilnPluginRegistry* registry) {
  kiln_plugin::set_host(host);
  host->set_info(registry, "kiln_test_cpp", "0.1");
  return host->add_op(registry, &kOp);
}
