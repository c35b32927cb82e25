#include <gtest/gtest.h>
#include <limits>

#include "ir/graph.h"

using namespace kiln;

TEST(Graph, SortFindsCycle) {
  ir::Graph g;
  g.name = "g";
  auto* a = g.add_value("a");
  auto* b = g.add_value("b");
  auto* c = g.add_value("c");
  a->is_input = true;
  g.inputs.push_back(a);
  g.add_node("Add", "", {a, c}, {b}, "n1");
  g.add_node("Relu", "", {b}, {c}, "n2");
  Status st = g.sort();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cycle"), std::string::npos);
}

TEST(Graph, SortOrdersProducersFirst) {
  ir::Graph g;
  auto* a = g.add_value("a");
  a->is_input = true;
  g.inputs.push_back(a);
  auto* b = g.add_value("b");
  auto* c = g.add_value("c");
  g.add_node("Relu", "", {b}, {c}, "second");
  g.add_node("Relu", "", {a}, {b}, "first");
  g.outputs.push_back(c);
  ASSERT_TRUE(g.sort().ok());
  EXPECT_EQ(g.nodes()[0]->name, "first");
  EXPECT_TRUE(g.verify().ok());
}

// A zero dim makes a shape empty wherever it stands, also after dims whose product overflows int64
// but not uint64 (fuzz_npy: a size check passed at 0 bytes while the allocation asked for 2^64 - 2).
TEST(Tensor, ZeroDimAfterAnOverflowingProductIsEmpty) {
  const Shape s = {3, int64_t{1} << 62, 0};
  EXPECT_EQ(shape_numel(s), 0);
  EXPECT_EQ(shape_nbytes(DataType::kFloat16, s), 0u);
  EXPECT_EQ(check_tensor_size(DataType::kFloat16, s), "");
  const Tensor t = Tensor::empty(DataType::kFloat16, s);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0u);
  EXPECT_EQ(shape_numel({int64_t{1} << 62, 4}), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(shape_nbytes(DataType::kFloat32, {-1, 0}), SIZE_MAX);
}
