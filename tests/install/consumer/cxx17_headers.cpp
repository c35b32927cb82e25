// Every public header, used as a C++17 program uses them: the CMake package exports cxx_std_17, so
// the headers must compile with -std=c++17 (kiln itself builds as C++20). kiln_consumer compiles this
// file with CMAKE_CXX_STANDARD 17 and no extensions (scripts/check_install.sh); by hand:
//   g++ -std=c++17 -pedantic-errors -fsyntax-only -Iinclude tests/install/consumer/cxx17_headers.cpp
#include "kiln/dtype.h"
#include "kiln/kiln.h"
#include "kiln/status.h"
#include "kiln/tensor.h"

#if __cplusplus > 201703L && !defined(_MSC_VER)
#error "compile this file as C++17: it checks that kiln's public headers need nothing newer"
#endif

namespace {

// The options are plain structs: set the fields by name (designated initializers are C++20).
kiln::BuildOptions cuda_fp16_options() {
  kiln::BuildOptions options;
  options.device = kiln::DeviceType::kCUDA;
  options.precision = kiln::Precision::kFloat16;
  options.profiles.push_back({{{"x", {1, 3, 224, 224}}}, {{"x", {8, 3, 224, 224}}}, {{"x", {32, 3, 224, 224}}}});
  return options;
}

kiln::Expected<int> input_count(const std::string& model) {
  KILN_ASSIGN_OR_RETURN(auto engine, kiln::Engine::build(model, cuda_fp16_options()));
  return static_cast<int>(engine->inputs().size());
}

}  // namespace

// Linked into kiln_consumer (never called): the uses above must also resolve against libkiln.
bool cxx17_headers_ok() {
  const kiln::Device cpu, cuda{kiln::DeviceType::kCUDA, 0};
  const kiln::Tensor t = kiln::Tensor::empty(kiln::DataType::kFloat32, {2, 3});
  const kiln::Value v = kiln::Value::of(t);
  const kiln::Status st = kiln::invalid_argument("example");
  (void)&input_count;
  return cpu == kiln::Device{} && cpu != cuda && v.kind == kiln::Value::Kind::kTensor &&
         t.numel() == 6 && !st.ok() && kiln::dtype_size(t.dtype()) == 4;
}
