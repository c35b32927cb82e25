// ops/tfidf.cpp — types and shapes of TfIdfVectorizer.
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {

using ir::Dim;
using ir::SymShape;
using ir::Type;

namespace {

Status infer_tfidf(InferContext& c) {
  const int64_t size = parse_tfidf_unchecked(c.node).out_size;
  c.out[0] = Type::tensor(DataType::kFloat32);
  if (!c.has(0) || !c.shape(0).known) return Status::Ok();
  if (c.shape(0).rank() == 2) c.out[0].shape = SymShape({c.shape(0).dims[0], Dim(size)});
  else c.out[0].shape = SymShape({Dim(size)});
  return Status::Ok();
}

}  // namespace

void add_tfidf_ops(std::vector<OpDef>& t) {
  t.push_back({"TfIdfVectorizer", "", 9, infer_tfidf});
}

}  // namespace kiln::ops
