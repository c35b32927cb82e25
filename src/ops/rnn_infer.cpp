// ops/rnn_infer.cpp — types and shapes of the recurrent op family: RNN, GRU and LSTM (their
// activation lists: ops/rnn.cpp).
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {

using ir::Dim;
using ir::SymShape;
using ir::Type;

namespace {

// RNN/GRU/LSTM: Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), Y_h and Y_c
// [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]).
Status infer_rnn(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const RnnParams p = parse_rnn_unchecked(c.node);
  const int64_t layout = p.layout;
  const Dim dirs(p.num_dir);
  Dim hidden;
  if (p.has_hidden_size) hidden = Dim(p.hidden_size);
  else if (c.has(2) && c.shape(2).known && c.shape(2).rank() == 3) hidden = c.shape(2).dims[2];
  Dim seq, batch;
  const SymShape& x = c.shape(0);
  if (x.known) {
    if (x.rank() != 3) return c.error("X must be 3-D");
    seq = x.dims[layout == 1 ? 1 : 0];
    batch = x.dims[layout == 1 ? 0 : 1];
  }
  const DataType dt = c.dtype(0);
  for (size_t i = 0; i < c.out.size(); ++i) {
    std::vector<Dim> dims;
    if (i == 0) dims = layout == 1 ? std::vector<Dim>{batch, seq, dirs, hidden} : std::vector<Dim>{seq, dirs, batch, hidden};
    else dims = layout == 1 ? std::vector<Dim>{batch, dirs, hidden} : std::vector<Dim>{dirs, batch, hidden};
    c.out[i] = Type::tensor(dt, SymShape(dims));
  }
  return Status::Ok();
}

}  // namespace

void add_rnn_ops(std::vector<OpDef>& t) {
  t.push_back({"RNN", "", 7, infer_rnn});
  t.push_back({"GRU", "", 7, infer_rnn});
  t.push_back({"LSTM", "", 7, infer_rnn});
}

}  // namespace kiln::ops
