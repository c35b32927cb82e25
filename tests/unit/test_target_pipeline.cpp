// The target stages as data (builder/target_pipeline.h): each device's stages in their order, names
// unique, every stage and switch name accepted by --disable-pass and listed by kiln inspect.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "builder/build.h"
#include "builder/target_pipeline.h"

namespace kiln {
namespace {

std::vector<std::string> names_of(DeviceType d) {
  std::vector<std::string> out;
  for (const TargetStage& s : target_pipeline(d)) out.push_back(s.name);
  return out;
}

size_t index_of(const std::vector<std::string>& v, const std::string& name) {
  return static_cast<size_t>(std::find(v.begin(), v.end(), name) - v.begin());
}

TEST(TargetPipeline, CudaStagesRunInTheirDeclaredOrder) {
  const auto cuda = names_of(DeviceType::kCUDA);
  ASSERT_EQ(std::set<std::string>(cuda.begin(), cuda.end()).size(), cuda.size()) << "stage names are unique";
  // The residual fusion before the half conversion; the half conversion before the layout (it moves
  // half convolutions); the 8-bit products' I/O after the layout (it moves their Q/DQ); the stem
  // fusion on the channels-last graph; TF32 last.
  for (const char* name : {"fuse-qconv-residual", "convert-precision", "channels-last", "signed-activations",
                           "quantize-half-directly", "products-write-half", "products-write-float", "fuse-conv-max-pool",
                           "allow-tf32"})
    ASSERT_LT(index_of(cuda, name), cuda.size()) << name;
  EXPECT_LT(index_of(cuda, "fuse-qconv-residual"), index_of(cuda, "convert-precision"));
  EXPECT_LT(index_of(cuda, "convert-precision"), index_of(cuda, "channels-last"));
  EXPECT_LT(index_of(cuda, "channels-last"), index_of(cuda, "signed-activations"));
  EXPECT_LT(index_of(cuda, "signed-activations"), index_of(cuda, "quantize-half-directly"));
  EXPECT_LT(index_of(cuda, "quantize-half-directly"), index_of(cuda, "products-write-half"));
  EXPECT_LT(index_of(cuda, "convert-precision"), index_of(cuda, "products-write-float"));
  EXPECT_LT(index_of(cuda, "channels-last"), index_of(cuda, "fuse-conv-max-pool"));
  EXPECT_EQ(cuda.back(), "allow-tf32");
}

TEST(TargetPipeline, CpuStagesComputeInFloat32) {
  const auto cpu = names_of(DeviceType::kCPU);
  EXPECT_EQ(cpu, (std::vector<std::string>{"channels-last", "fold-pools-into-convs"}));
}

TEST(TargetPipeline, EveryNameTheUserMayDisableIsListedOnce) {
  const auto listed = target_stages();
  std::set<std::string> names;
  for (const auto& [name, what] : listed) {
    EXPECT_TRUE(names.insert(name).second) << name << " listed twice";
    EXPECT_FALSE(what.empty()) << name;
  }
  // Stages that decide what the engine computes are not optional.
  EXPECT_EQ(names.count("convert-precision"), 0u);
  EXPECT_EQ(names.count("allow-tf32"), 0u);
  // Every other stage, and every switch, is.
  for (DeviceType d : {DeviceType::kCPU, DeviceType::kCUDA})
    for (const TargetStage& s : target_pipeline(d)) {
      if (s.disable != TargetStage::Disable::kNever) EXPECT_EQ(names.count(s.name), 1u) << s.name;
      for (const auto& [sw, what] : s.switches) EXPECT_EQ(names.count(sw), 1u) << sw;
    }
  EXPECT_EQ(names.count("channels-last-float-convs"), 1u);
}

}  // namespace
}  // namespace kiln
