// The CUDA backend loaded on demand (backends/cuda_module.h): in a CUDA build libkiln opens
// libkiln_cuda.so from its own folder (build/ here) once per process; without CUDA every CUDA query
// says why. tests/python/test_cuda_on_demand.py covers an installed package whose module cannot load.
#include <gtest/gtest.h>

#include "backends/cuda_module.h"

namespace kiln {
namespace {

TEST(CudaModule, OpensOnceBesideLibkilnOrSaysWhy) {
  auto m = cuda_module();
#if KILN_TEST_CUDA_MODULE
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(*m, *cuda_module());  // decided once
  EXPECT_EQ((*m)->abi, kCudaModuleAbi);
  EXPECT_EQ((*m)->version, std::string(KILN_TEST_VERSION));
  ASSERT_NE(cuda_kernel_registry(), nullptr);
  EXPECT_EQ(cuda_kernel_registry(), (*m)->kernel_registry());
  EXPECT_GT(cuda_kernel_registry()->all().size(), 100u);
  for (const KernelDef& d : cuda_kernel_registry()->all()) ASSERT_EQ(d.name.rfind("cuda.", 0), 0u) << d.name;
  // Without a GPU the module still loads; the backend's probe is what fails, and says so.
  auto b = cuda_backend();
  if (!b.ok()) EXPECT_NE(b.status().message().find("no CUDA GPU visible"), std::string::npos) << b.status().message();
  else EXPECT_EQ((*b)->name(), "cuda");
#else
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("built without CUDA"), std::string::npos) << m.status().message();
  EXPECT_EQ(cuda_kernel_registry(), nullptr);
  auto b = cuda_backend();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().message(), m.status().message());
#endif
}

}  // namespace
}  // namespace kiln
