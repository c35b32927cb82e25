// Runtime: the opt-in per-op profile (KILN_PROFILE=1) counts each top-level step under its op type.
#include <gtest/gtest.h>

#include "plan/plan.h"
#include "runtime/executor.h"

using namespace kiln;

TEST(Profile, CountsStepsPerOpTypeAndPrintsATable) {
  auto g = std::make_shared<ir::Graph>();
  g->opsets[""] = 17;
  const Shape shape{64, 32};
  auto type = ir::Type::tensor(DataType::kFloat32, ir::SymShape::of(shape));
  ir::Value* x = g->add_value("x", type);
  x->is_input = true;
  g->inputs.push_back(x);
  ir::Value* cur = x;
  for (int i = 0; i < 5; ++i) {  // Abs, Neg, Abs, Neg, Abs
    ir::Value* y = g->add_value("y" + std::to_string(i), type);
    g->add_node(i % 2 ? "Neg" : "Abs", "", {cur}, {y}, "op" + std::to_string(i));
    cur = y;
  }
  cur->is_output = true;
  g->outputs.push_back(cur);
  LowerOptions lo;
  lo.plan_memory = false;
  auto plan = lower(g, lo);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();

  ContextResources res;
  res.profile = std::make_unique<OpProfile>();
  Tensor in = Tensor::empty(DataType::kFloat32, shape);
  for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] = static_cast<float>(i % 7) - 3.f;
  for (int run = 0; run < 2; ++run) {
    Frame f(**plan, res, nullptr);
    f.slots[(*plan)->inputs[0]] = Value::of(in);
    ASSERT_TRUE(f.execute().ok());
  }
  const OpProfile& p = *res.profile;
  EXPECT_EQ(p.runs, 2);
  ASSERT_EQ(p.by_op.size(), 2u);
  EXPECT_EQ(p.by_op.at("Abs").calls, 6);
  EXPECT_EQ(p.by_op.at("Neg").calls, 4);
  EXPECT_GE(p.by_op.at("Abs").seconds, 0.0);

  testing::internal::CaptureStderr();
  p.print();
  const std::string table = testing::internal::GetCapturedStderr();
  EXPECT_NE(table.find("kiln profile: 2 runs"), std::string::npos) << table;
  EXPECT_NE(table.find("Abs"), std::string::npos) << table;
  EXPECT_NE(table.find("3.0"), std::string::npos) << table;  // Abs: 3 calls per run
  res.profile->runs = 0;  // nothing more to print when res goes away
}

TEST(Profile, EmptyProfilePrintsNothing) {
  OpProfile p;  // no runs recorded
  testing::internal::CaptureStderr();
  p.print();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}
