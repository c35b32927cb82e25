#include <gtest/gtest.h>

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
