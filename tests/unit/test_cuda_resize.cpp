// CUDA Resize/Upsample against the CPU kernel (which passes onnx's resize tests): every mode,
// coordinate transformation, nearest rounding, cubic options, tf_crop_and_resize with roi and
// extrapolation, axes, keep_aspect_ratio_policy, the opset-10 and Upsample forms, float16.
#include <gtest/gtest.h>

#include "ir/float_types.h"
#include "test_cuda_util.h"

namespace kiln::cudatest {
namespace {

Tensor floats(const std::vector<float>& v) {
  Tensor t = Tensor::empty(DataType::kFloat32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i];
  return t;
}

struct ResizeCase {
  std::string mode, ctm, nearest = "round_prefer_floor";
  std::vector<float> scales;
  std::vector<int64_t> sizes;
  std::vector<float> roi;
  std::vector<int64_t> axes;
  std::string aspect = "stretch";
  float cubic_a = -0.75f;
  int exclude_outside = 0;
  float extrapolation = 0.f;
};

void check_against_cpu(const ir::Node& node, const std::vector<Tensor>& inputs, const std::string& what, bool half) {
  std::vector<Slot> cpu_in;
  for (const Tensor& t : inputs) cpu_in.push_back(t.defined() ? Slot::of(t) : Slot{});
  auto want = run_node_eager(node, cpu_in);
  ASSERT_TRUE(want.ok()) << what << ": " << want.status().to_string();
  const Tensor& w = (*want)[0].tensor;
  if (!half) {
    auto got = run_cuda(node, inputs);
    ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
    expect_close((*got)[0], w, 1e-5f, 1e-5f, what);
    return;
  }
  std::vector<Tensor> hin = inputs;
  Tensor h = Tensor::empty(DataType::kFloat16, inputs[0].shape());
  for (int64_t i = 0; i < h.numel(); ++i) h.data<uint16_t>()[i] = f32_to_f16(inputs[0].data<float>()[i]);
  hin[0] = h;
  OneNode hn(node.op_type, node.opset, hin);
  hn.node->attrs = node.attrs;
  auto got = run_cuda(*hn.node, hin);
  ASSERT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  Tensor g = Tensor::empty(DataType::kFloat32, (*got)[0].shape());
  for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = f16_to_f32((*got)[0].data<uint16_t>()[i]);
  expect_close(g, w, 2e-2f, 1e-2f, what + " (float16)");
}

TEST(CudaResize, EveryModeMatchesTheCpuKernel) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(23);
  const std::vector<ResizeCase> cases = {
      {"nearest", "half_pixel", "round_prefer_floor", {1, 1, 2, 2}},
      {"nearest", "asymmetric", "floor", {1, 1, 1.7f, 2.3f}},
      {"nearest", "align_corners", "round_prefer_ceil", {}, {2, 3, 5, 13}},
      {"nearest", "half_pixel", "ceil", {1, 1, 0.6f, 0.5f}},
      {"linear", "half_pixel", "", {1, 1, 2, 2}},
      {"linear", "pytorch_half_pixel", "", {}, {2, 3, 1, 16}},
      {"linear", "align_corners", "", {1, 1, 3, 1.5f}},
      {"linear", "asymmetric", "", {1, 1, 0.5f, 0.75f}},
      {"linear", "half_pixel_symmetric", "", {1, 1, 2.5f, 1.25f}},
      {"cubic", "half_pixel", "", {1, 1, 2, 2}},
      {"cubic", "align_corners", "", {1, 1, 0.6f, 1.8f}, {}, {}, {}, "stretch", -0.5f, 1},
      {"linear", "tf_crop_and_resize", "", {}, {2, 3, 6, 6}, {0, 0, 0.2f, -0.3f, 1, 1, 0.8f, 1.2f}, {}, "stretch", -0.75f, 0, 7.f},
      {"linear", "half_pixel", "", {}, {5, 9}, {}, {2, 3}, "not_larger"},
      {"nearest", "half_pixel", "round_prefer_floor", {}, {16}, {}, {3}, "stretch"},
      {"linear", "half_pixel", "", {}, {12, 20}, {}, {2, 3}, "not_smaller"},
  };
  for (size_t k = 0; k < cases.size(); ++k) {
    const ResizeCase& c = cases[k];
    Tensor x = random_tensor({2, 3, 7, 8}, rng);
    std::vector<Tensor> in = {x, c.roi.empty() ? Tensor() : floats(c.roi), c.scales.empty() ? Tensor() : floats(c.scales),
                              c.sizes.empty() ? Tensor() : int64_tensor(c.sizes)};
    OneNode n("Resize", 19, in, 1, {false, true, true, true});
    n.set_string("mode", c.mode);
    n.set_string("coordinate_transformation_mode", c.ctm);
    if (!c.nearest.empty()) n.set_string("nearest_mode", c.nearest);
    if (!c.axes.empty()) n.set_ints("axes", c.axes);
    n.set_string("keep_aspect_ratio_policy", c.aspect);
    n.set_float("cubic_coeff_a", c.cubic_a);
    n.set_int("exclude_outside", c.exclude_outside);
    n.set_float("extrapolation_value", c.extrapolation);
    const std::string what = "case " + std::to_string(k) + " (" + c.mode + ", " + c.ctm + ")";
    check_against_cpu(*n.node, in, what, false);
    check_against_cpu(*n.node, in, what, true);
  }
}

TEST(CudaResize, OldFormsAndRefusals) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(24);
  Tensor x = random_tensor({1, 2, 5, 6}, rng);
  {  // Resize-10: (X, scales), asymmetric
    std::vector<Tensor> in = {x, floats({1, 1, 2, 1.5f})};
    OneNode n("Resize", 10, in, 1, {false, true});
    n.set_string("mode", "linear");
    check_against_cpu(*n.node, in, "Resize-10 linear", false);
  }
  {  // Upsample-9: (X, scales), nearest
    std::vector<Tensor> in = {x, floats({1, 1, 3, 2})};
    OneNode n("Upsample", 9, in, 1, {false, true});
    n.set_string("mode", "nearest");
    check_against_cpu(*n.node, in, "Upsample-9 nearest", false);
  }
  {  // antialias stays on the CPU, with the reason
    std::vector<Tensor> in = {x, Tensor(), floats({1, 1, 0.5f, 0.5f})};
    OneNode n("Resize", 19, in, 1, {false, true, true});
    n.set_string("mode", "linear");
    n.set_int("antialias", 1);
    std::string why;
    EXPECT_EQ((*cuda_backend())->kernels().find(*n.node, &why), nullptr);
    EXPECT_NE(why.find("antialias"), std::string::npos) << why;
  }
}

}  // namespace
}  // namespace kiln::cudatest
