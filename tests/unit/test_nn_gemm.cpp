// MatMul, Gemm, MatMulInteger, QLinearMatMul against naive references.
#include "test_nn_util.h"

using namespace nntest;

namespace {

// numpy matmul reference in double.
std::vector<double> ref_matmul(const Tensor& a, const Tensor& b, Shape* out_shape) {
  Shape sa = a.shape(), sb = b.shape();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const int64_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2), batch;
  EXPECT_TRUE(ops::broadcast_shapes(ba, bb, &batch));
  Shape out = batch;
  if (a.rank() > 1) out.push_back(M);
  if (b.rank() > 1) out.push_back(N);
  *out_shape = out;
  std::vector<double> y;
  for (int64_t bi = 0; bi < numel(batch); ++bi) {
    auto c = coords(bi, batch);
    auto index = [&](const Shape& s) {
      std::vector<int64_t> cc(s.size());
      for (size_t d = 0; d < s.size(); ++d) cc[d] = s[d] == 1 ? 0 : c[c.size() - s.size() + d];
      return flat(cc, s);
    };
    const int64_t ia = index(ba), ib = index(bb);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += get(a, (ia * M + m) * K + k) * get(b, (ib * K + k) * N + n);
        y.push_back(s);
      }
  }
  return y;
}

void check_matmul(DataType dt, const Shape& sa, const Shape& sb, double rtol = 1e-4) {
  SCOPED_TRACE(shape_to_string(sa) + " x " + shape_to_string(sb) + " " + dtype_name(dt));
  const double lo = dtype_is_integer(dt) && !dtype_is_signed(dt) ? 0 : -3;
  Tensor a = random(dt, sa, lo, 3), b = random(dt, sb, lo, 3);
  Shape os;
  auto want = ref_matmul(a, b, &os);
  auto y = run("MatMul", 13, {a, b}, {});
  expect_close(y[0], os, want, rtol, rtol);
  EXPECT_EQ(y[0].dtype(), dt);
}

}  // namespace

TEST(NnMatMul, TwoD) {
  check_matmul(DataType::kFloat32, {3, 4}, {4, 5});
  check_matmul(DataType::kFloat32, {64, 70}, {70, 33});
}

TEST(NnMatMul, BatchBroadcast) {
  check_matmul(DataType::kFloat32, {2, 1, 3, 4}, {5, 4, 6});
  check_matmul(DataType::kFloat32, {2, 3, 4}, {4, 6});     // folded batch
  check_matmul(DataType::kFloat32, {3, 4}, {2, 4, 6});     // A broadcast
  check_matmul(DataType::kFloat32, {2, 3, 3, 4}, {2, 1, 4, 2});
}

TEST(NnMatMul, OneDOperands) {
  check_matmul(DataType::kFloat32, {4}, {4});
  check_matmul(DataType::kFloat32, {4}, {2, 4, 3});
  check_matmul(DataType::kFloat32, {2, 3, 4}, {4});
  check_matmul(DataType::kFloat32, {4}, {4, 3});
}

TEST(NnMatMul, Dtypes) {
  check_matmul(DataType::kFloat64, {2, 3, 5}, {5, 4}, 1e-12);
  check_matmul(DataType::kInt32, {2, 3, 5}, {2, 5, 4}, 0);
  check_matmul(DataType::kInt64, {3, 5}, {5, 4}, 0);
  check_matmul(DataType::kUInt32, {3, 5}, {5}, 0);
  check_matmul(DataType::kUInt64, {3, 5}, {5, 2}, 0);
  check_matmul(DataType::kFloat16, {3, 8}, {8, 4}, 2e-2);
  check_matmul(DataType::kBFloat16, {3, 8}, {8, 4}, 5e-2);
}

TEST(NnMatMul, EmptyDims) {
  check_matmul(DataType::kFloat32, {0, 3, 4}, {4, 5});
  check_matmul(DataType::kFloat32, {2, 0, 4}, {4, 5});
  // K = 0: an all-zero product.
  auto y = run("MatMul", 13, {random(DataType::kFloat32, {3, 0}), random(DataType::kFloat32, {0, 2})}, {});
  expect_close(y[0], {3, 2}, std::vector<double>(6, 0.0));
  check_matmul(DataType::kInt32, {3, 0}, {0, 2}, 0);
}

TEST(NnMatMul, RejectsMismatch) {
  auto r = try_run("MatMul", 13, {random(DataType::kFloat32, {3, 4}), random(DataType::kFloat32, {5, 2})}, {});
  EXPECT_FALSE(r.ok());
  r = try_run("MatMul", 13, {random(DataType::kFloat32, {2, 3, 4}), random(DataType::kFloat32, {3, 4, 2})}, {});
  EXPECT_FALSE(r.ok());
}

namespace {

void check_gemm(DataType dt, int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, float beta,
                const std::optional<Shape>& c_shape, double tol = 1e-4) {
  SCOPED_TRACE("gemm " + std::to_string(ta) + std::to_string(tb) + " C " + (c_shape ? shape_to_string(*c_shape) : "none"));
  Tensor a = random(dt, ta ? Shape{K, M} : Shape{M, K}, -2, 2);
  Tensor b = random(dt, tb ? Shape{N, K} : Shape{K, N}, -2, 2);
  Tensor c = c_shape ? random(dt, *c_shape, -2, 2) : Tensor();
  std::vector<double> want;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += get(a, ta ? k * M + m : m * K + k) * get(b, tb ? n * K + k : k * N + n);
      double cv = 0;
      if (c_shape) {
        const Shape& cs = *c_shape;
        const int64_t rows = cs.size() == 2 ? cs[0] : 1, cols = cs.empty() ? 1 : cs.back();
        cv = get(c, (rows == 1 ? 0 : m) * cols + (cols == 1 ? 0 : n));
      }
      want.push_back(alpha * s + beta * cv);
    }
  Attrs at = {{"transA", int_attr(ta)}, {"transB", int_attr(tb)}, {"alpha", float_attr(alpha)}, {"beta", float_attr(beta)}};
  std::vector<Tensor> in = {a, b};
  if (c_shape) in.push_back(c);
  auto y = run("Gemm", 13, in, at);
  expect_close(y[0], {M, N}, want, tol, tol);
}

}  // namespace

TEST(NnGemm, Flags) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check_gemm(DataType::kFloat32, 5, 7, 3, ta, tb, 0.5f, 2.0f, Shape{5, 7});
}

TEST(NnGemm, BiasShapes) {
  check_gemm(DataType::kFloat32, 4, 6, 5, false, false, 1, 1, Shape{});
  check_gemm(DataType::kFloat32, 4, 6, 5, false, false, 1, 1, Shape{6});
  check_gemm(DataType::kFloat32, 4, 6, 5, false, false, 1, 1, Shape{1});
  check_gemm(DataType::kFloat32, 4, 6, 5, false, false, 1, 1, Shape{4, 1});
  check_gemm(DataType::kFloat32, 4, 6, 5, true, false, 1, 0.25f, Shape{1, 6});
  check_gemm(DataType::kFloat32, 4, 6, 5, false, true, 3, 1, std::nullopt);
}

TEST(NnGemm, Dtypes) {
  check_gemm(DataType::kFloat64, 4, 3, 6, true, true, 1.5f, -1, Shape{4, 3}, 1e-12);
  check_gemm(DataType::kInt64, 4, 3, 6, false, true, 1, 1, Shape{3}, 0);
  check_gemm(DataType::kInt32, 4, 3, 6, true, false, 1, 1, std::nullopt, 0);
  check_gemm(DataType::kFloat16, 4, 3, 6, false, false, 1, 1, Shape{3}, 2e-2);
}

TEST(NnGemm, RejectsBadBias) {
  auto r = try_run("Gemm", 13, {random(DataType::kFloat32, {2, 3}), random(DataType::kFloat32, {3, 4}),
                                random(DataType::kFloat32, {3, 4})}, {});
  EXPECT_FALSE(r.ok());
}

TEST(NnMatMulInteger, ZeroPoints) {
  for (auto [da, db] : {std::pair{DataType::kUInt8, DataType::kUInt8}, {DataType::kInt8, DataType::kUInt8},
                        {DataType::kInt8, DataType::kInt8}}) {
    const double alo = da == DataType::kUInt8 ? 0 : -128, ahi = da == DataType::kUInt8 ? 255 : 127;
    const double blo = db == DataType::kUInt8 ? 0 : -128, bhi = db == DataType::kUInt8 ? 255 : 127;
    Tensor a = random(da, {2, 3, 4}, alo, ahi), b = random(db, {4, 5}, blo, bhi);
    Tensor az = random(da, {3}, alo, ahi);  // per row
    Tensor bz = random(db, {}, blo, bhi);   // scalar
    std::vector<double> want;
    for (int64_t bi = 0; bi < 2; ++bi)
      for (int64_t m = 0; m < 3; ++m)
        for (int64_t n = 0; n < 5; ++n) {
          double s = 0;
          for (int64_t k = 0; k < 4; ++k) s += (get(a, (bi * 3 + m) * 4 + k) - get(az, m)) * (get(b, k * 5 + n) - get(bz, 0));
          want.push_back(s);
        }
    auto y = run("MatMulInteger", 10, {a, b, az, bz}, {});
    EXPECT_EQ(y[0].dtype(), DataType::kInt32);
    expect_close(y[0], {2, 3, 5}, want, 0, 0);
    // Without zero points.
    Shape os;
    auto want2 = ref_matmul(a, b, &os);
    expect_close(run("MatMulInteger", 10, {a, b}, {})[0], os, want2, 0, 0);
  }
}

TEST(NnQLinearMatMul, MatchesDequantizeMatMulQuantize) {
  Tensor a = random(DataType::kUInt8, {2, 3, 4}, 0, 255), b = random(DataType::kUInt8, {4, 3}, 0, 255);
  Tensor as = from(DataType::kFloat32, {}, {0.0066f}), az = from(DataType::kUInt8, {}, {113});
  Tensor bs = from(DataType::kFloat32, {}, {0.00705f}), bz = from(DataType::kUInt8, {}, {114});
  Tensor ys = from(DataType::kFloat32, {}, {0.0107f}), yz = from(DataType::kUInt8, {}, {118});
  std::vector<double> want;
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t m = 0; m < 3; ++m)
      for (int64_t n = 0; n < 3; ++n) {
        double s = 0;
        for (int64_t k = 0; k < 4; ++k) s += (get(a, (bi * 3 + m) * 4 + k) - 113) * (get(b, k * 3 + n) - 114);
        const double q = std::nearbyint(s * (0.0066f * 0.00705f / 0.0107f)) + 118;
        want.push_back(std::min(255.0, std::max(0.0, q)));
      }
  auto y = run("QLinearMatMul", 10, {a, as, az, b, bs, bz, ys, yz}, {});
  EXPECT_EQ(y[0].dtype(), DataType::kUInt8);
  expect_close(y[0], {2, 3, 3}, want, 0, 1.0);  // one step of rounding slack
}

TEST(NnShapeInfer, MatMulAndGemm) {
  ir::Graph g;
  auto* a = g.add_value("a", ir::Type::tensor(DataType::kFloat32, ir::SymShape({ir::Dim("batch"), 1, 3, 4})));
  auto* b = g.add_value("b", ir::Type::tensor(DataType::kFloat32, ir::SymShape({5, 4, 6})));
  auto* y = g.add_value("y");
  ir::Node* n = g.add_node("MatMul", "", {a, b}, {y}, "mm");
  n->opset = 13;
  ASSERT_TRUE(ops::infer_node(*n).ok());
  EXPECT_EQ(y->type.shape.to_string(), ir::SymShape({ir::Dim("batch"), 5, 3, 6}).to_string());
  auto* v = g.add_value("v", ir::Type::tensor(DataType::kFloat32, ir::SymShape({4})));
  auto* y2 = g.add_value("y2");
  ir::Node* n2 = g.add_node("MatMul", "", {a, v}, {y2}, "mv");
  ASSERT_TRUE(ops::infer_node(*n2).ok());
  EXPECT_EQ(y2->type.shape.to_string(), ir::SymShape({ir::Dim("batch"), 1, 3}).to_string());
  auto* p = g.add_value("p", ir::Type::tensor(DataType::kFloat32, ir::SymShape({7, ir::Dim("m")})));
  auto* q = g.add_value("q", ir::Type::tensor(DataType::kFloat32, ir::SymShape({9, 7})));
  auto* y3 = g.add_value("y3");
  ir::Node* n3 = g.add_node("Gemm", "", {p, q}, {y3}, "gemm");
  n3->attrs["transA"] = int_attr(1);
  n3->attrs["transB"] = int_attr(1);
  ASSERT_TRUE(ops::infer_node(*n3).ok());
  EXPECT_EQ(y3->type.shape.to_string(), ir::SymShape({ir::Dim("m"), 9}).to_string());
}

// The "packed" tactic's kernel (backends/cpu/packed_gemm.h) against a double reference: tile edges
// in M (not a multiple of 6) and N (not a multiple of 16), one k block (K up to 1024), several equal
// ones (K past 1024: 1500 = 2 x 750, 2305 = 3 x 577 + 574), K = 0, B transposed or not, with and without a bias row, strided A and C, 1 and 2 threads.
#include <omp.h>

#include "backends/cpu/packed_gemm.h"

TEST(NnPackedGemm, MatchesDoubleReference) {
  if (!kiln::cpu::packed_gemm_available()) GTEST_SKIP() << "no AVX2/FMA on this CPU";
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct Case { int64_t M, K, N; };
  for (const Case cs : {Case{1, 1, 1}, Case{5, 7, 3}, Case{6, 16, 16}, Case{7, 257, 17}, Case{13, 300, 33},
                        Case{97, 513, 130}, Case{200, 40, 300}, Case{3, 0, 20},
                        Case{11, 1500, 40}, Case{9, 2305, 18}})
    for (bool transposed : {false, true})
      for (bool with_bias : {false, true})
        for (int threads : {1, 2}) {
          SCOPED_TRACE("M " + std::to_string(cs.M) + " K " + std::to_string(cs.K) + " N " + std::to_string(cs.N) +
                       (transposed ? " transB" : "") + (with_bias ? " bias" : "") + " threads " + std::to_string(threads));
          const int64_t lda = cs.K + 3, ldc = cs.N + 5;
          std::vector<float> a(cs.M * lda), b(cs.K * cs.N), bias(cs.N), c(cs.M * ldc, -7.f);
          for (auto& v : a) v = u(rng);
          for (auto& v : b) v = u(rng);
          for (auto& v : bias) v = u(rng);
          auto pb = kiln::cpu::pack_b(b.data(), cs.K, cs.N, transposed);
          ASSERT_TRUE(pb.ok());
          omp_set_num_threads(threads);
          kiln::cpu::packed_gemm(cs.M, a.data(), lda, **pb, with_bias ? bias.data() : nullptr, c.data(), ldc);
          omp_set_num_threads(2);
          double worst = 0;
          for (int64_t m = 0; m < cs.M; ++m) {
            for (int64_t n = 0; n < cs.N; ++n) {
              double s = with_bias ? bias[n] : 0.0;
              for (int64_t k = 0; k < cs.K; ++k)
                s += static_cast<double>(a[m * lda + k]) * (transposed ? b[n * cs.K + k] : b[k * cs.N + n]);
              worst = std::max(worst, std::abs(c[m * ldc + n] - s) / (1.0 + std::abs(s)));
            }
            for (int64_t n = cs.N; n < ldc; ++n) ASSERT_EQ(c[m * ldc + n], -7.f) << "wrote past N at row " << m;
          }
          EXPECT_LT(worst, 1e-5 * std::sqrt(static_cast<double>(cs.K + 1)));
        }
}

// The "gemv" tactic's kernel (gemv.h) against a double reference: K not a multiple of 16 or 8 (the
// masked / scalar tails), N not a multiple of 4 (the single-row tail) and spanning several thread
// blocks, K = 0, B transposed or not, with and without a bias; 1 and 2 threads give the same bits (each
// output is one row's dot product, whoever computes it). The AVX2 copy runs under KILN_CPU_ISA=avx2
// (scripts/test.sh).
#include "backends/cpu/gemv.h"

TEST(NnGemv, MatchesDoubleReference) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  struct Case { int64_t K, N; };
  for (const Case cs : {Case{1, 1}, Case{7, 3}, Case{16, 4}, Case{37, 130}, Case{1280, 1000}, Case{2051, 69}, Case{0, 5}})
    for (bool transposed : {false, true})
      for (bool with_bias : {false, true}) {
        SCOPED_TRACE("K " + std::to_string(cs.K) + " N " + std::to_string(cs.N) + (transposed ? " transB" : "") +
                     (with_bias ? " bias" : ""));
        std::vector<float> a(cs.K), b(cs.K * cs.N), bias(cs.N), y(cs.N + 3, -7.f), y1(cs.N + 3, -7.f);
        for (auto& v : a) v = u(rng);
        for (auto& v : b) v = u(rng);
        for (auto& v : bias) v = u(rng);
        auto gb = kiln::cpu::pack_gemv_b(b.data(), cs.K, cs.N, transposed);
        ASSERT_TRUE(gb.ok());
        kiln::cpu::gemv(a.data(), **gb, with_bias ? bias.data() : nullptr, y.data());
        omp_set_num_threads(1);
        kiln::cpu::gemv(a.data(), **gb, with_bias ? bias.data() : nullptr, y1.data());
        omp_set_num_threads(2);
        EXPECT_EQ(y, y1);
        double worst = 0;
        for (int64_t n = 0; n < cs.N; ++n) {
          double s = with_bias ? bias[n] : 0.0;
          for (int64_t k = 0; k < cs.K; ++k) s += static_cast<double>(a[k]) * (transposed ? b[n * cs.K + k] : b[k * cs.N + n]);
          worst = std::max(worst, std::abs(y[n] - s) / (1.0 + std::abs(s)));
        }
        for (int64_t n = cs.N; n < cs.N + 3; ++n) ASSERT_EQ(y[n], -7.f) << "wrote past N";
        EXPECT_LT(worst, 1e-5 * std::sqrt(static_cast<double>(cs.K + 1)));
      }
}
