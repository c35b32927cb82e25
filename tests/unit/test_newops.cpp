// RotaryEmbedding, CausalConvWithState, TensorScatter, CumProd and BitCast against naive references.
#include <cstring>

#include "test_nn_util.h"

using namespace nntest;

// ---- RotaryEmbedding

namespace {

struct RopeCase {
  bool packed = false, interleaved = false, pos_ids = true;
  int64_t B = 2, H = 3, S = 4, Dh = 8, rd = 0, max_pos = 10;
  DataType dt = DataType::kFloat32;
};

void check_rope(const RopeCase& c) {
  SCOPED_TRACE(std::string(c.packed ? "3d" : "4d") + (c.interleaved ? " interleaved" : "") + (c.pos_ids ? " pos" : "") +
               " rd=" + std::to_string(c.rd));
  const Shape xs = c.packed ? Shape{c.B, c.S, c.H * c.Dh} : Shape{c.B, c.H, c.S, c.Dh};
  const int64_t rd = c.rd ? c.rd : c.Dh, half = rd / 2;
  Tensor x = random(c.dt, xs);
  Shape cs = c.pos_ids ? Shape{c.max_pos, half} : Shape{c.B, c.S, half};
  Tensor cosc = random(c.dt, cs), sinc = random(c.dt, cs);
  Tensor pos = Tensor::empty(DataType::kInt64, {c.B, c.S});
  for (int64_t i = 0; i < c.B * c.S; ++i) pos.data<int64_t>()[i] = static_cast<int64_t>(rng()() % c.max_pos);
  Attrs attrs;
  if (c.packed) attrs["num_heads"] = int_attr(c.H);
  if (c.rd) attrs["rotary_embedding_dim"] = int_attr(c.rd);
  if (c.interleaved) attrs["interleaved"] = int_attr(1);
  std::vector<Tensor> ins{x, cosc, sinc};
  if (c.pos_ids) ins.push_back(pos);
  auto y = run("RotaryEmbedding", 23, ins, attrs);
  std::vector<double> want(static_cast<size_t>(x.numel()));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t s = 0; s < c.S; ++s) {
        const int64_t base = c.packed ? ((b * c.S + s) * c.H + h) * c.Dh : ((b * c.H + h) * c.S + s) * c.Dh;
        const int64_t row = c.pos_ids ? pos.data<int64_t>()[b * c.S + s] : b * c.S + s;
        for (int64_t d = 0; d < c.Dh; ++d) want[base + d] = get(x, base + d);
        for (int64_t i = 0; i < half; ++i) {
          const double co = get(cosc, row * half + i), si = get(sinc, row * half + i);
          const int64_t a = c.interleaved ? 2 * i : i, bb = c.interleaved ? 2 * i + 1 : i + half;
          const double x1 = get(x, base + a), x2 = get(x, base + bb);
          want[base + a] = co * x1 - si * x2;
          want[base + bb] = si * x1 + co * x2;
        }
      }
  const double tol = c.dt == DataType::kFloat16 ? 5e-3 : 1e-6;
  expect_close(y[0], xs, want, tol, tol);
}

}  // namespace

TEST(NewOps, RotaryEmbedding) {
  check_rope({});
  check_rope({false, true});
  check_rope({true, false});
  check_rope({true, true, false});
  check_rope({false, false, false, 1, 2, 5, 8, 4});
  check_rope({false, true, true, 2, 2, 3, 10, 6});
  check_rope({true, true, true, 1, 4, 3, 6, 0, 10, DataType::kFloat16});
  check_rope({false, false, true, 2, 1, 2, 4, 0, 3, DataType::kFloat64});
}

TEST(NewOps, RotaryEmbeddingErrors) {
  Tensor x = random(DataType::kFloat32, {1, 2, 8}), c = random(DataType::kFloat32, {4, 4});
  EXPECT_FALSE(try_run("RotaryEmbedding", 23, {x, c, c}, {}).ok());  // 3-D without num_heads
  Tensor pos = from(DataType::kInt64, {1, 2}, {0, 7});  // position 7 beyond the cache
  EXPECT_FALSE(try_run("RotaryEmbedding", 23, {x, c, c, pos}, {{"num_heads", int_attr(1)}}).ok());
}

// ---- CausalConvWithState

TEST(NewOps, CausalConvWithState) {
  struct Case { int64_t B, C, L, K; bool bias, past, silu; DataType dt; };
  for (const Case& c : {Case{2, 3, 5, 4, false, false, false, DataType::kFloat32}, Case{1, 2, 6, 3, true, true, false, DataType::kFloat32},
                        Case{2, 4, 1, 4, true, true, true, DataType::kFloat32}, Case{1, 1, 3, 1, false, false, true, DataType::kFloat32},
                        Case{2, 2, 2, 5, false, false, false, DataType::kFloat32}, Case{1, 3, 4, 3, true, true, true, DataType::kFloat64},
                        Case{2, 3, 4, 2, true, false, true, DataType::kFloat16}}) {
    SCOPED_TRACE("K=" + std::to_string(c.K) + " L=" + std::to_string(c.L));
    Tensor x = random(c.dt, {c.B, c.C, c.L}), w = random(c.dt, {c.C, 1, c.K});
    Tensor bias = c.bias ? random(c.dt, {c.C}) : Tensor(), past = c.past ? random(c.dt, {c.B, c.C, c.K - 1}) : Tensor();
    std::vector<Tensor> ins{x, w, bias, past};
    while (!ins.back().defined()) ins.pop_back();
    auto out = run("CausalConvWithState", 27, ins, {{"activation", string_attr(c.silu ? "silu" : "none")}}, 2);
    std::vector<double> y, st;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t ch = 0; ch < c.C; ++ch) {
        std::vector<double> seq;
        for (int64_t i = 0; i < c.K - 1; ++i) seq.push_back(c.past ? get(past, (b * c.C + ch) * (c.K - 1) + i) : 0.0);
        for (int64_t i = 0; i < c.L; ++i) seq.push_back(get(x, (b * c.C + ch) * c.L + i));
        for (int64_t t = 0; t < c.L; ++t) {
          double acc = c.bias ? get(bias, ch) : 0;
          for (int64_t j = 0; j < c.K; ++j) acc += get(w, ch * c.K + j) * seq[t + j];
          if (c.silu) acc = acc / (1 + std::exp(-acc));
          y.push_back(acc);
        }
        st.insert(st.end(), seq.end() - (c.K - 1), seq.end());
      }
    const double tol = c.dt == DataType::kFloat16 ? 1e-2 : 1e-5;
    expect_close(out[0], {c.B, c.C, c.L}, y, tol, tol);
    expect_close(out[1], {c.B, c.C, c.K - 1}, st, 0, 0);
  }
  Tensor x = random(DataType::kFloat32, {1, 2, 3}), w = random(DataType::kFloat32, {3, 1, 2});
  EXPECT_FALSE(try_run("CausalConvWithState", 27, {x, w}, {}, 2).ok());  // channel mismatch
}

// ---- TensorScatter

TEST(NewOps, TensorScatter) {
  for (bool circular : {false, true})
    for (int64_t axis : {-2, 1, 2}) {
      SCOPED_TRACE("axis " + std::to_string(axis) + (circular ? " circular" : ""));
      const Shape cs{2, 3, 6, 2};
      const int64_t ax = axis < 0 ? axis + 4 : axis, L = cs[ax];
      Shape us = cs;
      us[ax] = 3;
      Tensor past = random(DataType::kFloat32, cs), upd = random(DataType::kFloat32, us);
      Tensor idx = from(DataType::kInt64, {2}, {circular ? static_cast<double>(L - 1) : 0.0, static_cast<double>(L - 3)});
      auto out = run("TensorScatter", 24, {past, upd, idx},
                     {{"axis", int_attr(axis)}, {"mode", string_attr(circular ? "circular" : "linear")}});
      std::vector<double> want = values(past);
      for (int64_t i = 0; i < upd.numel(); ++i) {
        auto c = coords(i, us);
        c[ax] = (idx.data<int64_t>()[c[0]] + c[ax]) % L;
        want[flat(c, cs)] = get(upd, i);
      }
      expect_close(out[0], cs, want, 0, 0);
    }
  // No write_indices: write at 0. Out of range in linear mode: an error.
  Tensor past = random(DataType::kInt32, {2, 4, 1}, -50, 50), upd = random(DataType::kInt32, {2, 2, 1}, -50, 50);
  auto out = run("TensorScatter", 24, {past, upd}, {{"axis", int_attr(1)}});
  EXPECT_EQ(get(out[0], 0), get(upd, 0));
  EXPECT_EQ(get(out[0], 5), get(upd, 3));
  EXPECT_EQ(get(out[0], 3), get(past, 3));
  Tensor idx = from(DataType::kInt64, {2}, {3, 0});
  EXPECT_FALSE(try_run("TensorScatter", 24, {past, upd, idx}, {{"axis", int_attr(1)}}).ok());
}

// ---- CumProd

TEST(NewOps, CumProd) {
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kInt64, DataType::kFloat16})
    for (int64_t axis : {0, 1, -1})
      for (int ex = 0; ex < 2; ++ex)
        for (int rev = 0; rev < 2; ++rev) {
          SCOPED_TRACE(std::string(dtype_name(dt)) + " axis " + std::to_string(axis) + " ex " + std::to_string(ex) +
                       " rev " + std::to_string(rev));
          const Shape s{2, 3, 4};
          Tensor x = random(dt, s, dtype_is_integer(dt) ? -3 : 0.5, dtype_is_integer(dt) ? 3 : 1.5);
          Tensor a = from(axis == 1 ? DataType::kInt32 : DataType::kInt64, {}, {static_cast<double>(axis)});
          auto y = run("CumProd", 26, {x, a}, {{"exclusive", int_attr(ex)}, {"reverse", int_attr(rev)}});
          const int64_t ax = axis < 0 ? axis + 3 : axis;
          std::vector<double> want(static_cast<size_t>(x.numel()));
          for (int64_t i = 0; i < x.numel(); ++i) {
            auto c = coords(i, s);
            double p = 1;
            for (int64_t k = 0; k < s[ax]; ++k) {
              const bool take = rev ? (ex ? k > c[ax] : k >= c[ax]) : (ex ? k < c[ax] : k <= c[ax]);
              if (!take) continue;
              auto c2 = c;
              c2[ax] = k;
              p *= get(x, flat(c2, s));
            }
            want[i] = p;
          }
          const double tol = dt == DataType::kFloat16 ? 1e-2 : 1e-6;
          expect_close(y[0], s, want, tol, tol);
        }
  Tensor e = random(DataType::kFloat32, {0, 3});
  auto y = run("CumProd", 26, {e, from(DataType::kInt64, {}, {1})}, {});
  EXPECT_EQ(shape_to_string(y[0].shape()), shape_to_string({0, 3}));
  EXPECT_FALSE(try_run("CumProd", 26, {e, from(DataType::kInt64, {}, {2})}, {}).ok());
}

// ---- BitCast

TEST(NewOps, BitCast) {
  Tensor f = from(DataType::kFloat32, {2, 2}, {1.0, -2.5, 0.0, 3.25});
  auto y = run("BitCast", 26, {f}, {{"to", int_attr(static_cast<int64_t>(DataType::kInt32))}});
  ASSERT_EQ(y[0].dtype(), DataType::kInt32);
  for (int i = 0; i < 4; ++i) {
    int32_t bits;
    std::memcpy(&bits, &f.data<float>()[i], 4);
    EXPECT_EQ(y[0].data<int32_t>()[i], bits);
  }
  Tensor i8 = from(DataType::kInt8, {3}, {-1, 5, -128});
  y = run("BitCast", 26, {i8}, {{"to", int_attr(static_cast<int64_t>(DataType::kUInt8))}});
  EXPECT_EQ(values(y[0]), (std::vector<double>{255, 5, 128}));
  Tensor u16 = Tensor::empty(DataType::kUInt16, {2});
  u16.data<uint16_t>()[0] = 0x3c00;  // 1.0 in float16
  u16.data<uint16_t>()[1] = 0xc000;  // -2.0
  y = run("BitCast", 26, {u16}, {{"to", int_attr(static_cast<int64_t>(DataType::kFloat16))}});
  EXPECT_EQ(values(y[0]), (std::vector<double>{1.0, -2.0}));
  // 4-bit: uint4 15 is int4 -1.
  Tensor u4 = Tensor::empty(DataType::kUInt4, {2});
  u4.data<uint8_t>()[0] = 15;
  u4.data<uint8_t>()[1] = 7;
  y = run("BitCast", 26, {u4}, {{"to", int_attr(static_cast<int64_t>(DataType::kInt4))}});
  EXPECT_EQ(y[0].data<int8_t>()[0], -1);
  EXPECT_EQ(y[0].data<int8_t>()[1], 7);
  EXPECT_FALSE(try_run("BitCast", 26, {f}, {{"to", int_attr(static_cast<int64_t>(DataType::kInt64))}}).ok());
  Tensor empty = Tensor::empty(DataType::kFloat64, {0, 2});
  y = run("BitCast", 26, {empty}, {{"to", int_attr(static_cast<int64_t>(DataType::kUInt64))}});
  EXPECT_EQ(y[0].numel(), 0);
}
