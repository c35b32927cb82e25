// GridSample and AffineGrid against naive references (GridSample: the spec's recursive
// one-dimension-at-a-time interpolation).
#include "test_nn_util.h"

using namespace nntest;

namespace {

struct Gs {
  std::string mode, pad;
  bool align;
};

double gs_reflect(double x, double lo, double hi) {
  const double rng = hi - lo;
  double fx = x;
  if (fx < lo) {
    const double dx = lo - fx;
    const int n = static_cast<int>(dx / rng);
    const double r = dx - n * rng;
    fx = n % 2 == 0 ? lo + r : hi - r;
  } else if (fx > hi) {
    const double dx = fx - hi;
    const int n = static_cast<int>(dx / rng);
    const double r = dx - n * rng;
    fx = n % 2 == 0 ? hi - r : lo + r;
  }
  return fx;
}

double lo_of(const Gs& g, int64_t) { return g.align ? 0.0 : -0.5; }
double hi_of(const Gs& g, int64_t d) { return g.align ? d - 1.0 : d - 0.5; }

// A pixel of a 1-D array with the padding rule.
double pixel(const std::vector<double>& a, int64_t i, const Gs& g) {
  const int64_t d = static_cast<int64_t>(a.size());
  if (g.pad == "zeros") return i >= 0 && i < d ? a[i] : 0.0;
  if (g.pad == "border") return a[std::min(std::max<int64_t>(i, 0), d - 1)];
  return a[static_cast<int64_t>(gs_reflect(static_cast<double>(i), lo_of(g, d), hi_of(g, d)))];
}

double cubic_w(double x, int k) {
  const double A = -0.75;
  x = std::fabs(x);
  switch (k) {
    case 0: return ((A * (x + 1) - 5 * A) * (x + 1) + 8 * A) * (x + 1) - 4 * A;
    case 1: return ((A + 2) * x - (A + 3)) * x * x + 1;
    case 2: return ((A + 2) * (1 - x) - (A + 3)) * (1 - x) * (1 - x) + 1;
    default: return ((A * (2 - x) - 5 * A) * (2 - x) + 8 * A) * (2 - x) - 4 * A;
  }
}

double interp_1d(const std::vector<double>& a, double x, const Gs& g) {
  const double x0 = std::floor(x);
  const int64_t i0 = static_cast<int64_t>(x0);
  if (g.mode == "linear") return (1 - (x - x0)) * pixel(a, i0, g) + (x - x0) * pixel(a, i0 + 1, g);
  double s = 0;
  for (int k = 0; k < 4; ++k) s += cubic_w(x - x0, k) * pixel(a, i0 - 1 + k, g);
  return s;
}

// data: row-major over dims; x: pixel coordinates per dim (already clamped/reflected).
double interp_nd(const std::vector<double>& data, const Shape& dims, const std::vector<double>& x, const Gs& g) {
  if (dims.size() == 1) return interp_1d(data, x[0], g);
  const Shape sub(dims.begin() + 1, dims.end());
  const int64_t n = numel(sub);
  std::vector<double> res;
  for (int64_t i = 0; i < dims[0]; ++i) {
    std::vector<double> part(data.begin() + i * n, data.begin() + (i + 1) * n);
    res.push_back(interp_nd(part, sub, std::vector<double>(x.begin() + 1, x.end()), g));
  }
  return interp_1d(res, x[0], g);
}

double nearest_nd(const std::vector<double>& data, const Shape& dims, const std::vector<int64_t>& x, const Gs& g) {
  const int64_t d = dims[0];
  int64_t i = x[0];
  if (dims.size() == 1) return pixel(data, i, g);
  const Shape sub(dims.begin() + 1, dims.end());
  const int64_t n = numel(sub);
  if (g.pad == "zeros") {
    if (i < 0 || i >= d) return 0.0;
  } else if (g.pad == "border") {
    i = std::min(std::max<int64_t>(i, 0), d - 1);
  } else {
    i = static_cast<int64_t>(gs_reflect(static_cast<double>(i), lo_of(g, d), hi_of(g, d)));
  }
  std::vector<double> part(data.begin() + i * n, data.begin() + (i + 1) * n);
  return nearest_nd(part, sub, std::vector<int64_t>(x.begin() + 1, x.end()), g);
}

std::vector<double> grid_sample_ref(const Tensor& X, const Tensor& grid, const Gs& g) {
  const int r = X.rank() - 2;
  const int64_t N = X.dim(0), C = X.dim(1);
  Shape dims(X.shape().begin() + 2, X.shape().end());
  Shape out_sp(grid.shape().begin() + 1, grid.shape().end() - 1);
  const int64_t in_n = numel(dims), out_n = numel(out_sp);
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      std::vector<double> data;
      for (int64_t i = 0; i < in_n; ++i) data.push_back(get(X, (n * C + c) * in_n + i));
      for (int64_t p = 0; p < out_n; ++p) {
        std::vector<double> x(r);
        for (int i = 0; i < r; ++i) {
          const double v = get(grid, (n * out_n + p) * r + (r - 1 - i));
          x[i] = g.align ? (v + 1) / 2.0 * (dims[i] - 1) : ((v + 1) * dims[i] - 1) / 2.0;
          if (g.mode == "nearest") x[i] = std::nearbyint(x[i]);
          const double lo = lo_of(g, dims[i]), hi = hi_of(g, dims[i]);
          if (x[i] < lo || x[i] > hi) {
            if (g.pad == "border") x[i] = std::min(std::max(x[i], 0.0), dims[i] - 1.0);
            else if (g.pad == "reflection") x[i] = gs_reflect(x[i], lo, hi);
          }
        }
        if (g.mode == "nearest") {
          std::vector<int64_t> xi;
          for (double v : x) xi.push_back(static_cast<int64_t>(v));
          y.push_back(nearest_nd(data, dims, xi, g));
        } else {
          y.push_back(interp_nd(data, dims, x, g));
        }
      }
    }
  return y;
}

}  // namespace

TEST(NewOpsGrid, GridSampleMatchesReference) {
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (bool align : {false, true})
        for (int r : {1, 2, 3}) {
          if (r == 3 && std::string(mode) == "cubic") continue;  // cubic is 2-D only in ONNX
          const Gs g{mode, pad, align};
          SCOPED_TRACE(std::string(mode) + " " + pad + (align ? " align" : "") + " r=" + std::to_string(r));
          Shape xs{2, 3}, gs{2};
          const int64_t in_sz[3] = {4, 5, 3}, out_sz[3] = {3, 4, 2};
          for (int i = 0; i < r; ++i) {
            xs.push_back(in_sz[i]);
            gs.push_back(out_sz[i]);
          }
          gs.push_back(r);
          Tensor X = random(DataType::kFloat32, xs), grid = random(DataType::kFloat32, gs, -1.7, 1.7);
          auto y = run("GridSample", 22, {X, grid},
                       {{"mode", string_attr(mode)}, {"padding_mode", string_attr(pad)}, {"align_corners", int_attr(align)}});
          Shape ys{2, 3};
          for (int i = 0; i < r; ++i) ys.push_back(out_sz[i]);
          expect_close(y[0], ys, grid_sample_ref(X, grid, g), 1e-4, 1e-5);
        }
}

TEST(NewOpsGrid, GridSampleOpset16NamesAndDtypes) {
  Tensor X = random(DataType::kFloat64, {1, 2, 3, 4}), grid = random(DataType::kFloat64, {1, 2, 5, 2}, -1.2, 1.2);
  auto y = run("GridSample", 16, {X, grid}, {{"mode", string_attr("bicubic")}});
  expect_close(y[0], {1, 2, 2, 5}, grid_sample_ref(X, grid, {"cubic", "zeros", false}), 1e-10, 1e-10);
  y = run("GridSample", 16, {X, grid}, {});  // default bilinear
  expect_close(y[0], {1, 2, 2, 5}, grid_sample_ref(X, grid, {"linear", "zeros", false}), 1e-10, 1e-10);
  Tensor Xh = random(DataType::kFloat16, {1, 1, 3, 3}), gh = random(DataType::kFloat16, {1, 2, 2, 2});
  y = run("GridSample", 20, {Xh, gh}, {{"padding_mode", string_attr("border")}});
  expect_close(y[0], {1, 1, 2, 2}, grid_sample_ref(Xh, gh, {"linear", "border", false}), 1e-2, 1e-2);
  EXPECT_FALSE(try_run("GridSample", 20, {X, grid}, {{"mode", string_attr("area")}}).ok());
  Tensor bad = random(DataType::kFloat64, {1, 2, 5, 3});
  EXPECT_FALSE(try_run("GridSample", 20, {X, bad}, {}).ok());
  Tensor empty_grid = random(DataType::kFloat64, {1, 0, 5, 2});
  y = run("GridSample", 20, {X, empty_grid}, {});
  EXPECT_EQ(shape_to_string(y[0].shape()), shape_to_string({1, 2, 0, 5}));
}

TEST(NewOpsGrid, AffineGrid) {
  for (int r : {2, 3})
    for (bool align : {false, true}) {
      SCOPED_TRACE("r=" + std::to_string(r) + (align ? " align" : ""));
      const int64_t N = 2;
      Shape size{N, 3, 4, 5};
      if (r == 3) size = {N, 3, 2, 4, 5};
      if (r == 2 && align) size = {N, 1, 1, 3};  // a dim of 1 with align_corners
      Tensor theta = random(DataType::kFloat32, {N, r, r + 1});
      std::vector<double> sv(size.begin(), size.end());
      Tensor st = from(DataType::kInt64, {static_cast<int64_t>(size.size())}, sv);
      auto y = run("AffineGrid", 20, {theta, st}, {{"align_corners", int_attr(align)}});
      Shape sp(size.begin() + 2, size.end());
      Shape ys{N};
      for (int64_t d : sp) ys.push_back(d);
      ys.push_back(r);
      std::vector<double> want;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t p = 0; p < numel(sp); ++p) {
          auto c = coords(p, sp);
          std::vector<double> pos;  // x (last dim) first
          for (int i = r - 1; i >= 0; --i) {
            const double len = static_cast<double>(sp[i]);
            pos.push_back(align ? (sp[i] == 1 ? -1.0 : -1 + 2.0 * c[i] / (len - 1)) : -1 + (2.0 * c[i] + 1) / len);
          }
          pos.push_back(1);
          for (int o = 0; o < r; ++o) {
            double v = 0;
            for (int k = 0; k <= r; ++k) v += get(theta, (n * r + o) * (r + 1) + k) * pos[k];
            want.push_back(v);
          }
        }
      expect_close(y[0], ys, want, 1e-5, 1e-6);
    }
  Tensor theta = random(DataType::kFloat32, {1, 2, 3});
  EXPECT_FALSE(try_run("AffineGrid", 20, {theta, from(DataType::kInt64, {5}, {1, 1, 2, 2, 2})}, {}).ok());
}
