// Builds a CPU engine from an ONNX model through the installed kiln, runs it on an .npy input and
// prints each output's shape; with a third argument (an .npy of the expected first output) it
// fails unless the first output matches it. Usage: kiln_consumer model.onnx input.npy [expected.npy]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "kiln/kiln.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s model.onnx input.npy [expected.npy]\n", argv[0]);
    return 2;
  }
  std::printf("kiln %s\n", kiln::version());
  kiln::BuildOptions options;
  options.device = kiln::DeviceType::kCPU;
  auto engine = kiln::Engine::build(argv[1], options);
  if (!engine) {
    std::fprintf(stderr, "build: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  auto input = kiln::read_npy(argv[2]);
  if (!input) {
    std::fprintf(stderr, "input: %s\n", input.status().to_string().c_str());
    return 1;
  }
  auto ctx = (*engine)->create_context();
  if (!ctx) {
    std::fprintf(stderr, "context: %s\n", ctx.status().to_string().c_str());
    return 1;
  }
  const std::string input_name = (*engine)->inputs().at(0).name;
  auto outputs = (*ctx)->run({{input_name, kiln::Value::of(*input)}});
  if (!outputs) {
    std::fprintf(stderr, "run: %s\n", outputs.status().to_string().c_str());
    return 1;
  }
  for (size_t i = 0; i < outputs->size(); ++i) {
    const kiln::Tensor& t = (*outputs)[i].tensor;
    std::string dims;
    for (int64_t d : t.shape()) dims += (dims.empty() ? "" : "x") + std::to_string(d);
    std::printf("output %s: %s %s\n", (*engine)->outputs()[i].name.c_str(), dims.c_str(),
                kiln::dtype_name(t.dtype()));
  }
  if (argc > 3) {
    auto expected = kiln::read_npy(argv[3]);
    if (!expected) {
      std::fprintf(stderr, "expected: %s\n", expected.status().to_string().c_str());
      return 1;
    }
    const kiln::Tensor& got = (*outputs)[0].tensor;
    if (got.dtype() != kiln::DataType::kFloat32 || expected->dtype() != kiln::DataType::kFloat32 ||
        got.shape() != expected->shape()) {
      std::fprintf(stderr, "output 0 differs from %s in dtype or shape\n", argv[3]);
      return 1;
    }
    double max_err = 0;
    for (int64_t i = 0; i < got.numel(); ++i)
      max_err = std::max(max_err, std::fabs(double(got.data<float>()[i]) - double(expected->data<float>()[i])));
    std::printf("max abs difference from %s: %.3g\n", argv[3], max_err);
    if (!(max_err <= 1e-4)) return 1;
  }
  return 0;
}
