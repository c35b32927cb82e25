// tests/fuzz/fuzz_engine.cpp — an engine file from bytes. The input is the FlatBuffer part; the
// target appends a valid checksum trailer so mutations reach the parser and plan checks (an unsealed
// mutation is refused by the checksum at once). Seeds: tests/fuzz/corpus/engine.
#include <cstring>
#include <string>

#include "fuzz/fuzz_common.h"
#include "util/checksum.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::init_limits();
  std::string bytes(reinterpret_cast<const char*>(data), size);
  const uint64_t sum = kiln::checksum64(bytes.data(), bytes.size()), len = bytes.size();
  bytes.append("KILNSUM1");
  bytes.append(reinterpret_cast<const char*>(&sum), 8);
  bytes.append(reinterpret_cast<const char*>(&len), 8);
  auto engine = kiln::Engine::load_from_bytes(bytes);
  if (!engine.ok()) return 0;
  kiln::fuzz::run_once(**engine);
  return 0;
}
