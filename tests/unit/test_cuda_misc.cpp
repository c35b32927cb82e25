// CUDA CumSum/CumProd and Trilu against the CPU kernels (which pass onnx's tests): every axis,
// exclusive/reverse, k positive, negative and absent, upper and lower, float and integer types.
#include <gtest/gtest.h>

#include <cstring>

#include "test_cuda_util.h"

namespace kiln::cudatest {
namespace {

Tensor ints32(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(DataType::kInt32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int32_t>()[i] = static_cast<int32_t>(rng() % 7) - 3;
  return t;
}

Tensor scalar_i64(int64_t v) {
  Tensor t = Tensor::empty(DataType::kInt64, {});
  t.data<int64_t>()[0] = v;
  return t;
}

TEST(CudaMisc, CumSumAndCumProdMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(41);
  for (const char* op : {"CumSum", "CumProd"})
    for (int64_t axis : {0, 1, 2, -1})
      for (int exclusive = 0; exclusive < 2; ++exclusive)
        for (int reverse = 0; reverse < 2; ++reverse)
          for (int f = 0; f < 2; ++f) {
            Tensor x = f ? random_tensor({3, 5, 4}, rng, 0.5f, 1.5f) : ints32({3, 5, 4}, rng);
            std::vector<Tensor> in = {x, scalar_i64(axis)};
            OneNode n(op, std::string(op) == "CumSum" ? 14 : 26, in, 1, {false, true});
            n.set_int("exclusive", exclusive);
            n.set_int("reverse", reverse);
            expect_all_same(*n.node, in, std::string(op) + " axis " + std::to_string(axis) + " ex " + std::to_string(exclusive) +
                                         " rev " + std::to_string(reverse) + (f ? " float" : " int32"));
          }
}

TEST(CudaMisc, TriluMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(42);
  for (int upper = 0; upper < 2; ++upper)
    for (int64_t k : {-7, -2, 0, 1, 3, 9, 100})
      for (int with_k = 0; with_k < 2; ++with_k) {
        if (!with_k && k != 0) continue;
        Tensor x = random_tensor({2, 3, 5, 6}, rng);
        std::vector<Tensor> in = {x};
        if (with_k) in.push_back(scalar_i64(k));
        OneNode n("Trilu", 14, in, 1, {false, true});
        n.set_int("upper", upper);
        expect_all_same(*n.node, in, std::string(upper ? "upper" : "lower") + " k " + std::to_string(k));
      }
  Tensor xi = ints32({4, 4}, rng);
  OneNode n("Trilu", 14, {xi});
  expect_all_same(*n.node, {xi}, "int32 upper");
}

}  // namespace
}  // namespace kiln::cudatest

namespace kiln::cudatest {
namespace {

// The float-only reductions on float64 (accumulated in double) against the CPU kernel.
TEST(CudaMisc, Float64ReductionsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937 rng(43);
  for (const char* op : {"ReduceLogSumExp", "ReduceLogSum", "ReduceL2", "ReduceL1", "ReduceSumSquare"})
    for (int64_t axis : {0, 1, -1}) {
      Tensor x = Tensor::empty(DataType::kFloat64, {3, 4, 5});
      std::uniform_real_distribution<double> u(0.1, 3.0);
      for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = u(rng);
      Tensor axes = Tensor::empty(DataType::kInt64, {1});
      axes.data<int64_t>()[0] = axis;
      std::vector<Tensor> in = {x, axes};
      OneNode n(op, 18, in, 1, {false, true});
      n.set_int("keepdims", axis == 0 ? 0 : 1);
      auto got = run_cuda(*n.node, in);
      ASSERT_TRUE(got.ok()) << op << ": " << got.status().to_string();
      auto want = run_node_eager(*n.node, {Slot::of(x), Slot::of(axes)});
      ASSERT_TRUE(want.ok()) << op;
      const Tensor& g = (*got)[0];
      const Tensor& w = (*want)[0].tensor;
      ASSERT_EQ(g.dtype(), DataType::kFloat64) << op;
      ASSERT_EQ(g.shape(), w.shape()) << op;
      for (int64_t i = 0; i < w.numel(); ++i)
        ASSERT_NEAR(g.data<double>()[i], w.data<double>()[i], 1e-12 * (1 + std::fabs(w.data<double>()[i])))
            << op << " axis " << axis << " element " << i;
    }
}

}  // namespace
}  // namespace kiln::cudatest
