// ops/grid.cpp — types and shapes of the grid op family: GridSample and AffineGrid (their shared
// sampling rules: ops/grid_math.h).
#include "ops/op_table.h"
#include "ops/params_misc.h"

namespace kiln::ops {
namespace {

using ir::Dim;
using ir::SymShape;
using ir::Type;

Dim unknown() { return Dim(); }

Status infer_grid_sample(InferContext& c) {
  if (!c.has(0) || !c.has(1)) return c.error("X and grid are required");
  c.out[0] = Type::tensor(c.dtype(0));
  const SymShape &x = c.shape(0), &g = c.shape(1);
  if (!x.known || !g.known || g.rank() < 2) return Status::Ok();
  std::vector<Dim> d{x.dims.empty() ? unknown() : x.dims[0], x.rank() > 1 ? x.dims[1] : unknown()};
  for (int i = 1; i + 1 < g.rank(); ++i) d.push_back(g.dims[i]);
  c.out[0].shape = SymShape(d);
  return Status::Ok();
}

Status infer_affine_grid(InferContext& c) {
  if (!c.has(0) || !c.has(1)) return c.error("theta and size are required");
  c.out[0] = Type::tensor(c.dtype(0));
  const Tensor* size = c.value(1);
  if (size && (size->dtype() == DataType::kInt64) && (size->numel() == 4 || size->numel() == 5)) {
    const int64_t* s = size->data<int64_t>();
    std::vector<Dim> d{Dim(s[0])};
    for (int64_t i = 2; i < size->numel(); ++i) d.push_back(Dim(s[i]));
    d.push_back(Dim(size->numel() - 2));
    c.out[0].shape = SymShape(d);
  }
  return Status::Ok();
}

}  // namespace

void add_grid_ops(std::vector<OpDef>& t) {
  t.push_back({"GridSample", "", 16, infer_grid_sample});
  t.push_back({"AffineGrid", "", 20, infer_affine_grid});
}

}  // namespace kiln::ops
