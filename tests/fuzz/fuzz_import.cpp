// tests/fuzz/fuzz_import.cpp — an ONNX model from bytes: import, optimize (constant folding runs
// kernels), lower, and one run on zeros when the model has no control flow (a Loop's trip count is
// the model's to choose). Before that, the importer alone with every raw_data read aside from the
// parse (onnx/proto_nesting.h's wire rewrite, which a build takes only for raw_data of 64 KiB or
// more). Seeds: tests/fuzz/corpus/import.
#include <string>

#include "fuzz/fuzz_common.h"
#include "onnx/importer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::init_limits();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  kiln::onnx::ImportOptions io;
  io.weights_aside_min_bytes = 1;
  (void)kiln::onnx::import_bytes(bytes, io);
  kiln::BuildOptions o;
  o.opt_level = 2;
  auto engine = kiln::Engine::build_from_bytes(bytes, o);
  if (!engine.ok()) return 0;
  if (bytes.find("Loop") == std::string::npos && bytes.find("Scan") == std::string::npos) kiln::fuzz::run_once(**engine);
  (void)(*engine)->serialize();
  return 0;
}
