// Hostile attribute values and inputs (issues #48 and #49): each node here is the minimal shape of a
// fuzzer's report — an allocation sized by an attribute, a loop bounded by one, undefined behaviour
// on NaN or on an out-of-range byte. Each must end with a clear error naming what is wrong, or with
// a result, quickly and without allocating by the attribute.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include <unistd.h>

#include "backends/cpu/numeric.h"
#include "ops/op_table.h"
#include "ops/params_shape.h"
#include "ops/shape.h"
#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

// Shape inference of the node, as import runs it.
Status infer(OneNode& n) { return ops::infer_node(*n.node); }

// The node's run fails and its message contains `want`.
void expect_error(OneNode& n, const std::string& want) {
  auto r = n.run();
  ASSERT_FALSE(r.ok()) << "expected an error containing '" << want << "'";
  EXPECT_NE(r.status().to_string().find(want), std::string::npos) << r.status().to_string();
}

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

}  // namespace

// ---- Split: num_outputs (#48's second model, #49's equal_split_sizes bucket)

TEST(HostileAttrs, SplitNumOutputsMustMatchTheOutputs) {
  // num_outputs 2^30 with 3 outputs declared: an error before anything is sized by 2^30.
  OneNode n("Split", 18, {f32({6}, {0, 1, 2, 3, 4, 5})}, 3);
  n.i("num_outputs", 1073741824);
  const Status st = infer(n);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("num_outputs"), std::string::npos) << st.to_string();
  expect_error(n, "num_outputs");
  // As many as the outputs but more than the axis holds: allowed (onnx's expanded AffineGrid tests
  // split a dim of 2 in 3), the last parts are empty.
  OneNode m("Split", 18, {f32({2}, {0, 1})}, 3);
  m.i("num_outputs", 3);
  EXPECT_TRUE(infer(m).ok());
  EXPECT_EQ(values<float>(m.out(1)), (std::vector<float>{1}));
  EXPECT_TRUE(values<float>(m.out(2)).empty());
  // Still fine: 6 into 3.
  OneNode ok("Split", 18, {f32({6}, {0, 1, 2, 3, 4, 5})}, 3);
  ok.i("num_outputs", 3);
  EXPECT_TRUE(infer(ok).ok());
  EXPECT_EQ(values<float>(ok.out(2)), (std::vector<float>{4, 5}));
}

TEST(HostileAttrs, EqualSplitSizesOfAHugeDimDoNotOverflow) {
  // ceil(dim / parts) once computed as dim + parts - 1: signed overflow for a dim near INT64_MAX.
  ops::SplitParams p;
  std::vector<int64_t> sizes;
  ASSERT_EQ(ops::equal_split_sizes(kInt64Max, p, 2, &sizes), "");
  ASSERT_EQ(sizes.size(), 2u);
  EXPECT_EQ(sizes[0], kInt64Max / 2 + 1);
  EXPECT_EQ(sizes[0] + sizes[1], kInt64Max);
  EXPECT_NE(ops::equal_split_sizes(5, p, 0, &sizes), "");
}

// ---- Legacy broadcast axis (#48's first model, #49's legacy_b_shape bucket)

TEST(HostileAttrs, LegacyBroadcastAxisOutOfRange) {
  for (int64_t axis : {kInt64Max, std::numeric_limits<int64_t>::min(), int64_t{2}, int64_t{-3}}) {
    OneNode n("Add", 6, {f32({2, 3}, {0, 1, 2, 3, 4, 5}), f32({3}, {1, 1, 1})});
    n.i("broadcast", 1).i("axis", axis);
    const Status st = infer(n);
    ASSERT_FALSE(st.ok()) << axis;
    EXPECT_NE(st.to_string().find("out of range"), std::string::npos) << st.to_string();
    expect_error(n, "out of range");
  }
  // In range: B [3] at axis 1 of A [2, 3], and B [2] at axis 0 (as [2, 1]).
  OneNode a1("Add", 6, {f32({2, 3}, {0, 1, 2, 3, 4, 5}), f32({3}, {1, 2, 3})});
  a1.i("broadcast", 1).i("axis", 1);
  EXPECT_TRUE(infer(a1).ok());
  EXPECT_EQ(values<float>(a1.out()), (std::vector<float>{1, 3, 5, 4, 6, 8}));
  OneNode a0("Mul", 6, {f32({2, 3}, {0, 1, 2, 3, 4, 5}), f32({2}, {1, 10})});
  a0.i("broadcast", 1).i("axis", -2);
  EXPECT_TRUE(infer(a0).ok());
  EXPECT_EQ(values<float>(a0.out()), (std::vector<float>{0, 1, 2, 30, 40, 50}));
}

// ---- TfIdfVectorizer (#48's third model, #49's tfidf buckets)

namespace {

// One bigram (1, 2) in column 0, counted at every skip.
void bigram_tfidf(OneNode& n) {
  n.s("mode", "TF").i("min_gram_length", 2).i("max_gram_length", 2);
  n.ints("ngram_counts", {0, 0}).ints("ngram_indexes", {0}).ints("pool_int64s", {1, 2});
}

}  // namespace

TEST(HostileAttrs, TfIdfSkipCountBoundedByTheRow) {
  // max_skip_count 2^31 (and INT64_MAX, whose + 1 overflowed): the skips that fit in a row of 6 are
  // 1..5, so the counts are those of max_skip_count 5, and the run takes no longer than it.
  for (int64_t skips : {int64_t{5}, int64_t{2147483648}, kInt64Max}) {
    OneNode n("TfIdfVectorizer", 9, {i64({2, 6}, {1, 2, 3, 1, 3, 2, 1, 1, 1, 1, 1, 2})});
    bigram_tfidf(n);
    n.i("max_skip_count", skips);
    const auto t0 = std::chrono::steady_clock::now();
    Tensor y = n.out();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << skips;
    ASSERT_EQ(y.shape(), (Shape{2, 1})) << skips;
    EXPECT_EQ(values<float>(y), (std::vector<float>{3, 5})) << skips;
  }
  // A huge gram length fits nothing; no key of that size is built.
  OneNode n("TfIdfVectorizer", 9, {i64({6}, {1, 2, 3, 1, 3, 2})});
  bigram_tfidf(n);
  n.i("min_gram_length", int64_t{1} << 62).i("max_gram_length", kInt64Max).i("max_skip_count", 3);
  Tensor y = n.out();
  EXPECT_EQ(values<float>(y), (std::vector<float>{0}));
}

// No ngram_indexes and no pool (the structure-aware fuzzer's find, ASan/UBSan: the counts of an
// empty output were addressed at &freq[0]): an empty [rows, 0] output.
TEST(HostileAttrs, TfIdfWithoutColumnsIsAnEmptyOutput) {
  OneNode n("TfIdfVectorizer", 9, {i64({2, 6}, {1, 2, 3, 1, 3, 2, 1, 1, 1, 1, 1, 2})});
  n.s("mode", "TF").i("min_gram_length", 2).i("max_gram_length", 2).i("max_skip_count", 2147483648);
  n.ints("ngram_counts", {0, 0});
  Tensor y = n.out();
  EXPECT_EQ(y.shape(), (Shape{2, 0}));
}

TEST(HostileAttrs, TfIdfColumnsAreCheckedBeforeAllocating) {
  // A negative column would be written before the row; INT64_MAX's + 1 overflows.
  for (int64_t bad : {int64_t{-1}, kInt64Max}) {
    OneNode n("TfIdfVectorizer", 9, {i64({6}, {1, 2, 3, 1, 3, 2})});
    bigram_tfidf(n);
    n.ints("ngram_indexes", {bad});
    expect_error(n, "not an output column");
  }
  // A column of 2^40: the output [2, 2^40] is refused by the tensor limits, before counts of that size.
  OneNode n("TfIdfVectorizer", 9, {i64({2, 6}, {1, 2, 3, 1, 3, 2, 1, 1, 1, 1, 1, 2})});
  bigram_tfidf(n);
  n.ints("ngram_indexes", {int64_t{1} << 40});
  EXPECT_FALSE(n.run().ok());
}

// ---- Sizes from pads, targets and empty axes (#49's Pad, CenterCropPad, Reduce and strides buckets)

TEST(HostileAttrs, PadSizesCheckedBeforeTheMaps) {
  // An empty input padded to [0, 2^40 + 3]: an empty output, and no map of 2^40 entries.
  OneNode empty("Pad", 18, {f32({0, 3}, {}), i64({4}, {0, 0, 0, int64_t{1} << 40})});
  Tensor y = empty.out();
  EXPECT_EQ(y.shape(), (Shape{0, (int64_t{1} << 40) + 3}));
  // Pads that overflow the axis' size.
  OneNode over("Pad", 18, {f32({2, 3}, {0, 1, 2, 3, 4, 5}), i64({4}, {0, kInt64Max, 0, 1})});
  expect_error(over, "overflow");
  // A real output of 2^40 + 1 floats per row: refused by the tensor limit, not by an abort.
  OneNode big("Pad", 18, {f32({1, 1}, {1}), i64({4}, {0, 0, 0, int64_t{1} << 40})});
  EXPECT_FALSE(big.run().ok());
  // Removing more than an axis holds from one side, made up by the other: an error, not an overflow.
  OneNode crop("Pad", 18, {f32({1, 3}, {0, 1, 2}), i64({4}, {0, std::numeric_limits<int64_t>::min(), 0, kInt64Max})});
  expect_error(crop, "remove more");
}

TEST(HostileAttrs, CenterCropPadOfAnEmptyInput) {
  OneNode n("CenterCropPad", 18, {f32({0, 3}, {}), i64({2}, {0, int64_t{1} << 40})});
  Tensor y = n.out();
  EXPECT_EQ(y.shape(), (Shape{0, int64_t{1} << 40}));
}

TEST(HostileAttrs, ReduceOverALongEmptyAxis) {
  // [0, 2^40] reduced over axis 1: an empty [0, 1], without 2^40 offsets.
  OneNode n("ReduceSum", 13, {f32({0, int64_t{1} << 40}, {}), i64({1}, {1})});
  Tensor y = n.out();
  EXPECT_EQ(y.shape(), (Shape{0, 1}));
  // [2^40, 0] reduced over axis 1: 2^40 sums of nothing; the offsets (and the output) are over the
  // tensor limit: an error.
  OneNode m("ReduceSum", 13, {f32({int64_t{1} << 40, 0}, {}), i64({1}, {1})});
  EXPECT_FALSE(m.run().ok());
}

TEST(HostileAttrs, StridesThatOverflowAreAnError) {
  EXPECT_THROW(cpu::strides_of(Shape{0, int64_t{1} << 40, int64_t{1} << 40}), std::length_error);
  EXPECT_EQ(cpu::strides_of(Shape{2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  // Through a kernel: an error naming the node, not undefined behaviour.
  OneNode n("ReduceSum", 13, {f32({0, int64_t{1} << 40, int64_t{1} << 40}, {}), i64({1}, {1})});
  expect_error(n, "overflow");
}

// ---- NaN, ±inf and odd bytes where an integer or a bool is made (#49's UBSan buckets)

namespace {

Tensor u8(const Shape& s, const std::vector<uint8_t>& v) { return make_tensor(DataType::kUInt8, s, v); }
Tensor s8(const Shape& s, const std::vector<int8_t>& v) { return make_tensor(DataType::kInt8, s, v); }

}  // namespace

TEST(HostileAttrs, RequantizingNaNAndInfIsDefined) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // QLinearMatMul of 2 x 3 with y_scale NaN (NaN → 0), 0 (+inf → the type's max) and -0 (-inf → its min).
  for (const auto& [scale, want_u8, want_s8] :
       std::vector<std::tuple<float, uint8_t, int8_t>>{{nan, 0, 0}, {0.0f, 255, 127}, {-0.0f, 0, -128}}) {
    OneNode nu("QLinearMatMul", 10, {u8({1, 1}, {2}), f32({}, {1}), u8({}, {0}), u8({1, 1}, {3}), f32({}, {1}),
                                     u8({}, {0}), f32({}, {scale}), u8({}, {0})});
    Tensor yu = nu.out();
    ASSERT_EQ(yu.numel(), 1);
    EXPECT_EQ(yu.data<uint8_t>()[0], want_u8) << scale;
    OneNode ns("QLinearMatMul", 10, {s8({1, 1}, {2}), f32({}, {1}), s8({}, {0}), s8({1, 1}, {3}), f32({}, {1}),
                                     s8({}, {0}), f32({}, {scale}), s8({}, {0})});
    Tensor ys = ns.out();
    ASSERT_EQ(ys.numel(), 1);
    EXPECT_EQ(ys.data<int8_t>()[0], want_s8) << scale;
  }
}

TEST(HostileAttrs, IntegerPowByAFloatExponentIsDefined) {
  // 2^1000 saturates, (-8)^0.5 is NaN and 0^-1 is inf: both 0 (from_double), never a cast of them.
  OneNode n("Pow", 15, {make_tensor(DataType::kInt32, {3}, std::vector<int32_t>{2, -8, 0}), f32({3}, {1000.f, 0.5f, -1.f})});
  Tensor y = n.out();
  EXPECT_EQ(values<int32_t>(y), (std::vector<int32_t>{std::numeric_limits<int32_t>::max(), 0, 0}));
}

TEST(HostileAttrs, DropoutTrainingModeIsAByte) {
  // A bool tensor's byte from a file may be 2: true (nonzero), so ratio 1.5 is refused as in training.
  for (uint8_t byte : {uint8_t{2}, uint8_t{255}, uint8_t{0}}) {
    Tensor training = Tensor::empty(DataType::kBool, {});
    *static_cast<uint8_t*>(training.raw()) = byte;
    OneNode n("Dropout", 13, {f32({4}, {1, 2, 3, 4}), f32({}, {1.5f}), training});
    if (byte) {
      expect_error(n, "ratio");
    } else {
      EXPECT_EQ(values<float>(n.out()), (std::vector<float>{1, 2, 3, 4}));
    }
  }
}

TEST(HostileAttrs, RoiCoordinatesThatAreNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // RoiAlign: a NaN or infinite corner is an error naming the roi (it once sampled nothing; with an
  // adaptive grid its size came from the NaN).
  for (float bad : {nan, std::numeric_limits<float>::infinity()})
    for (int64_t sr : {0, 1}) {
      OneNode align("RoiAlign", 16, {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({2, 4}, {0, 0, 1, 1, bad, 0, 1, 1}), i64({2}, {0, 0})});
      align.i("sampling_ratio", sr);
      expect_error(align, "roi 1 is not finite");
    }
  // MaxRoiPool: a NaN or infinite batch index or corner is an error.
  for (int k : {0, 1, 4}) {
    std::vector<float> roi = {0, 0, 0, 1, 1};
    roi[k] = k == 4 ? std::numeric_limits<float>::infinity() : nan;
    OneNode pool("MaxRoiPool", 1, {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({1, 5}, roi)});
    pool.ints("pooled_shape", {1, 1});
    expect_error(pool, "not a finite number");
  }
}

// ---- MaxUnpool params against X's rank (#49's heap overflow from a mutated engine file)

TEST(HostileAttrs, MaxUnpoolParamsOfTheWrongLength) {
  // Run eagerly, as a kernel made from an engine file's stored node is: no shape inference before it.
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor ind = i64({1, 1, 2, 2}, {0, 3, 8, 15});
  OneNode strides("MaxUnpool", 11, {x, ind});
  strides.ints("kernel_shape", {2, 2}).ints("strides", {2});  // one stride for two spatial dims
  expect_error(strides, "strides must have one entry per spatial dim");
  OneNode pads("MaxUnpool", 11, {x, ind});
  pads.ints("kernel_shape", {2, 2}).ints("strides", {2, 2}).ints("pads", {0, 0});
  expect_error(pads, "pads must have two entries per spatial dim");
  OneNode huge("MaxUnpool", 11, {x, ind});
  huge.ints("kernel_shape", {2, 2}).ints("strides", {kInt64Max, 2});
  expect_error(huge, "no valid size");
  // Well-formed: 2x2 → 4x4 with the values at indexes 0, 3, 8 and 15.
  OneNode ok("MaxUnpool", 11, {x, ind});
  ok.ints("kernel_shape", {2, 2}).ints("strides", {2, 2});
  Tensor y = ok.out();
  ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(y.data<float>()[0], 1.0f);
  EXPECT_EQ(y.data<float>()[3], 2.0f);
  EXPECT_EQ(y.data<float>()[8], 3.0f);
  EXPECT_EQ(y.data<float>()[15], 4.0f);
}

// #47: one tensor may take a quarter of the machine by default (the whole machine used to be the bound,
// so a tiny model asking for a huge tensor grew the process to the machine's size first); the total
// kiln holds may take the machine. 0 restores the default.
TEST(HostileAttrs, DefaultTensorLimitIsAQuarterOfTheMachine) {
  if (std::getenv("KILN_MAX_TENSOR_BYTES")) GTEST_SKIP() << "KILN_MAX_TENSOR_BYTES is set";
  const size_t before = max_tensor_bytes();
  set_max_tensor_bytes(0);
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  ASSERT_GT(pages, 0);
  const size_t machine = static_cast<size_t>(pages) * static_cast<size_t>(page);
  EXPECT_EQ(max_tensor_bytes(), machine / 4);
  set_max_tensor_bytes(before);
}

// ---- fuzz_model's findings (#49's structure-aware fuzzer, tests/fuzz/fuzz_model.cpp)

TEST(HostileAttrs, AffineGridSizesWhoseProductOverflows) {
  // The size input is data: H = INT64_MAX made the spatial product overflow before any size check.
  const Tensor theta = f32({2, 2, 3}, std::vector<float>(12, 0.5f));
  OneNode n("AffineGrid", 20, {theta, i64({4}, {2, 3, kInt64Max, 6})});
  expect_error(n, "too large");
  // A 0 after the huge dims: an empty grid, not an overflowing product.
  OneNode e("AffineGrid", 20, {f32({0, 2, 3}, {}), i64({4}, {0, 3, kInt64Max, 6})});
  EXPECT_EQ(e.out().shape(), (Shape{0, kInt64Max, 6, 2}));
  // Well-formed: a 1x2 grid of (x, y) = theta @ (x, y, 1) at x = -0.5, 0.5 and y = 0.
  OneNode ok("AffineGrid", 20, {f32({1, 2, 3}, {1, 0, 0, 0, 1, 0}), i64({4}, {1, 1, 1, 2})});
  EXPECT_EQ(values<float>(ok.out()), (std::vector<float>{-0.5f, 0, 0.5f, 0}));
}

TEST(HostileAttrs, GridSampleCoordinatesThatAreNaNInfOrHuge) {
  // A grid coordinate of 1e19 made a pixel index past int64 (UBSan: float-cast-overflow), in every
  // mode and padding; reflection's count of periods too. Now NaN is just before the first pixel and
  // huge values stop at 2^52: defined results, the padding's own for far-away points.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  const Tensor grid = f32({1, 1, 4, 2}, {nan, 0, inf, -inf, 1e19f, -1e30f, 0, 0});
  for (const char* mode : {"linear", "nearest", "cubic"})
    for (const char* pad : {"zeros", "border", "reflection"}) {
      OneNode n("GridSample", 20, {x, grid});
      n.s("mode", mode).s("padding_mode", pad);
      const std::vector<float> y = values<float>(n.out());
      ASSERT_EQ(y.size(), 4u) << mode << " " << pad;
      if (std::string(pad) == "zeros") {
        EXPECT_EQ(y[0], 0.0f) << mode;  // NaN x: outside
        EXPECT_EQ(y[1], 0.0f) << mode;  // +inf x, -inf y: outside
      }
      if (std::string(pad) == "border") EXPECT_EQ(y[1], 2.0f) << mode;  // x clamped to the right, y to the top
    }
}

TEST(HostileAttrs, LossLabelsAreReadAsIntegers) {
  // A label of INT64_MAX went through a double (2^63) and back to int64: undefined. Now it is the
  // out-of-range error, or the ignored label when ignore_index is INT64_MAX.
  const Tensor x = f32({1, 2}, {-1.0f, -2.0f});
  for (const char* op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}) {
    OneNode n(op, 13, {x, i64({1}, {kInt64Max})});
    expect_error(n, "out of range");
    OneNode ignored(op, 13, {x, i64({1}, {kInt64Max})});
    ignored.i("ignore_index", kInt64Max).s("reduction", "sum");
    EXPECT_EQ(values<float>(ignored.out()), (std::vector<float>{0.0f})) << op;
  }
  OneNode ok("NegativeLogLikelihoodLoss", 13, {x, i64({1}, {1})});
  EXPECT_EQ(values<float>(ok.out()), (std::vector<float>{2.0f}));
}

TEST(HostileAttrs, IntegerMatMulWraps) {
  // 663136212 * 38 overflowed int32 in the integer GEMM's loops (UBSan: signed overflow). Integer
  // products now wrap, two's complement, as onnxruntime's do.
  const auto i32 = [](const Shape& s, const std::vector<int32_t>& v) { return make_tensor(DataType::kInt32, s, v); };
  OneNode n("MatMul", 13, {i32({1, 2}, {663136212, 5}), i32({2, 1}, {38, 7})});
  EXPECT_EQ(values<int32_t>(n.out()), (std::vector<int32_t>{-570627685}));
  OneNode m("MatMul", 13, {make_tensor(DataType::kInt64, {1, 1}, std::vector<int64_t>{kInt64Max}), i64({1, 1}, {2})});
  EXPECT_EQ(values<int64_t>(m.out()), (std::vector<int64_t>{-2}));
  OneNode ok("MatMul", 13, {i32({1, 2}, {3, 4}), i32({2, 1}, {5, 6})});
  EXPECT_EQ(values<int32_t>(ok.out()), (std::vector<int32_t>{39}));
}

TEST(HostileAttrs, DynamicQuantizeLinearOfNaNAndInf) {
  // NaN inputs, and ±inf (scale inf, zero point inf / inf), were converted to uint8 as NaN: undefined.
  // NaN quantizes to 0, as QuantizeLinear's NaN does.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  OneNode n("DynamicQuantizeLinear", 11, {f32({3}, {nan, 255.0f, 0.0f})}, 3);  // scale 1, zero point 0
  auto r = n.run();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(values<uint8_t>((*r)[0].tensor), (std::vector<uint8_t>{0, 255, 0}));
  OneNode m("DynamicQuantizeLinear", 11, {f32({3}, {inf, -inf, 0.0f})}, 3);
  auto q = m.run();
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_EQ(values<uint8_t>((*q)[2].tensor), (std::vector<uint8_t>{0}));  // zero point of NaN
  EXPECT_EQ(values<uint8_t>((*q)[0].tensor)[2], 0);  // 0 / inf + 0
}

TEST(HostileAttrs, QLinearConvBiasIsInt32) {
  // A float bias of 3.4e38 was read as int32 (undefined), and an int32 bias near INT32_MAX overflowed
  // when added to the accumulator. B must be int32 now, and the sum is made in int64.
  const auto one_u8 = [](uint8_t v) { return u8({}, {v}); };
  const auto i32 = [](const Shape& s, const std::vector<int32_t>& v) { return make_tensor(DataType::kInt32, s, v); };
  const Tensor x = u8({1, 1, 1, 1}, {1}), w = u8({1, 1, 1, 1}, {1}), one = f32({}, {1.0f});
  OneNode bad("QLinearConv", 10, {x, one, one_u8(0), w, one, one_u8(0), one, one_u8(0), f32({1}, {3.4e38f})});
  expect_error(bad, "B must be int32");
  OneNode big("QLinearConv", 10, {x, one, one_u8(0), w, one, one_u8(0), one, one_u8(0), i32({1}, {2147483647})});
  EXPECT_EQ(values<uint8_t>(big.out()), (std::vector<uint8_t>{255}));  // saturated, not wrapped
  OneNode ok("QLinearConv", 10, {x, one, one_u8(0), w, one, one_u8(0), one, one_u8(0), i32({1}, {5})});
  EXPECT_EQ(values<uint8_t>(ok.out()), (std::vector<uint8_t>{6}));
}

TEST(HostileAttrs, RoiAlignHugeRoisAndBatchIndexes) {
  // A roi of 1e30 pixels makes a sampling grid of 2^50 x 2^50 per bin: its count overflowed before the
  // grid's size check. A batch index of INT64_MAX went through a double (2^63) back to int64.
  const Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  OneNode huge("RoiAlign", 16, {x, f32({1, 4}, {0, 0, 1e30f, 1e30f}), i64({1}, {0})});
  huge.i("output_height", 1).i("output_width", 1).i("sampling_ratio", 0);
  expect_error(huge, "per bin is over the limit");
  OneNode index("RoiAlign", 16, {x, f32({1, 4}, {0, 0, 1, 1}), i64({1}, {kInt64Max})});
  expect_error(index, "out of range");
  OneNode ok("RoiAlign", 16, {x, f32({1, 4}, {0, 0, 1, 1}), i64({1}, {0})});
  ok.i("output_height", 1).i("output_width", 1).i("sampling_ratio", 1).s("coordinate_transformation_mode", "output_half_pixel");
  EXPECT_EQ(values<float>(ok.out()), (std::vector<float>{2.5f}));  // the center of the 2x2 image
}

TEST(HostileAttrs, HostileRoiAlignIsRefusedQuickly) {
  // #49's open timeout: spatial_scale 1e30 and sampling_ratio -2 on a 1x1x10x10 input with 3 rois ran
  // for over 30 s (the run's deadline is checked between steps, not inside a kernel). Each hostile
  // attribute or roi is an error now, before any sample is made, and each fails within a second or two.
  const Tensor x = f32({1, 1, 10, 10}, std::vector<float>(100, 1.0f));
  const Tensor rois = f32({3, 4}, {0, 0, 9, 9, 1, 1, 5, 5, 2, 3, 8, 7});
  const Tensor idx = i64({3}, {0, 0, 0});
  struct Case {
    double spatial_scale;
    int64_t sampling_ratio, out_h, out_w;
    const char* want;
  };
  const Case cases[] = {
      {1e30, -2, 1, 1, "sampling_ratio must be >= 0"},   // the fuzzer's model
      {1.0, -1, 1, 1, "sampling_ratio must be >= 0"},
      {1e30, 0, 1, 1, "per bin is over the limit"},       // adaptive grid of 9e30 / 1 per bin
      {1e30, 0, 64, 64, "per bin is over the limit"},
      {1e5, 0, 4, 4, "per bin is over the limit"},        // 225000 x 225000 per bin, no overflow
      {1.0, kInt64Max, 1, 1, "per bin is over the limit"},
      {1.0, 1025, 1, 1, "per bin is over the limit"},     // 1025^2 > 2^20
      {1.0, 2, 2048, 2048, "samples (the limit"},         // 4 per bin, 2^24 per roi
      {1.0, 0, int64_t{1} << 32, int64_t{1} << 32, "overflows"},  // out_h x out_w
      {1.0, 0, 1, kInt64Max, "samples (the limit"},       // 9 x 1 per bin, INT64_MAX bins
      {std::numeric_limits<double>::infinity(), 0, 1, 1, "spatial_scale must be a finite number"},
      {std::numeric_limits<double>::quiet_NaN(), 1, 1, 1, "spatial_scale must be a finite number"},
      {1.0, 1, 0, 1, "output size must be positive"},
      {1.0, 1, 1, -5, "output size must be positive"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.want) + ", sampling_ratio " + std::to_string(c.sampling_ratio));
    OneNode n("RoiAlign", 16, {x, rois, idx});
    n.f("spatial_scale", static_cast<float>(c.spatial_scale)).i("sampling_ratio", c.sampling_ratio);
    n.i("output_height", c.out_h).i("output_width", c.out_w);
    const auto t0 = std::chrono::steady_clock::now();
    expect_error(n, c.want);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0);
  }
  // At the limits, still computed: 1024 x 1024 samples per bin (an average of a constant image is
  // that constant; the roi lies inside the map), and 2^22 samples for one roi.
  OneNode at_bin("RoiAlign", 16, {x, f32({1, 4}, {1, 1, 8, 8}), i64({1}, {0})});
  at_bin.i("sampling_ratio", 1024).i("output_height", 1).i("output_width", 1);
  const std::vector<float> one = values<float>(at_bin.out());
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NEAR(one[0], 1.0f, 1e-5);
  OneNode at_roi("RoiAlign", 16, {x, f32({1, 4}, {1, 1, 8, 8}), i64({1}, {0})});
  at_roi.i("sampling_ratio", 2).i("output_height", 1024).i("output_width", 1024);  // 4 x 2^20
  const std::vector<float> many = values<float>(at_roi.out());
  ASSERT_EQ(many.size(), size_t{1024} * 1024);
  EXPECT_NEAR(many[12345], 1.0f, 1e-5);
}

TEST(HostileAttrs, LinearAttentionStateIsFloat) {
  // present_state takes past_state's type: a uint16 past state had the float state (-3398.66) stored
  // into it (undefined). A past state that is not floating-point is an error now.
  const Tensor q = f32({1, 1, 2}, {1, 0}), k = f32({1, 1, 2}, {1, 0}), v = f32({1, 1, 1}, {3});
  const Tensor bad_past = make_tensor(DataType::kUInt16, {1, 1, 2, 1}, std::vector<uint16_t>{1, 2});
  OneNode bad("LinearAttention", 27, {q, k, v, bad_past}, 2);
  bad.i("q_num_heads", 1).i("kv_num_heads", 1).s("update_rule", "linear");
  expect_error(bad, "past_state must be a floating-point tensor");
  // The float state: S = past + k^T v = [[1 + 3], [2]], present_state is S.
  OneNode ok("LinearAttention", 27, {q, k, v, f32({1, 1, 2, 1}, {1, 2})}, 2);
  ok.i("q_num_heads", 1).i("kv_num_heads", 1).s("update_rule", "linear");
  EXPECT_EQ(values<float>(ok.out(1)), (std::vector<float>{4, 2}));
}

TEST(HostileAttrs, OneHotFloatIndicesThatAreHugeOrNaN) {
  // OneHot takes float indices and depth: 1e30 and NaN were cast to int64 (undefined). They saturate
  // now: such an index is off everywhere, such a depth an error.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OneNode n("OneHot", 11, {f32({4}, {1e30f, nan, 1, -1}), f32({}, {3}), f32({2}, {0, 1})});
  EXPECT_EQ(values<float>(n.out()), (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}));
  OneNode depth("OneHot", 11, {f32({1}, {0}), f32({}, {nan}), f32({2}, {0, 1})});
  expect_error(depth, "depth must be positive");
  OneNode huge("OneHot", 11, {f32({1}, {0}), f32({}, {-1e30f}), f32({2}, {0, 1})});
  expect_error(huge, "depth must be positive");
}
