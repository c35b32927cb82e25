// tests/fuzz/fuzz_npy.cpp — a .npy file (the CLI's input format) from bytes. Seeds: corpus/npy.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::init_limits();
  static const std::string path = "/tmp/kiln_fuzz_npy_" + std::to_string(getpid()) + ".npy";
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  auto t = kiln::read_npy(path);
  if (t.ok()) (void)kiln::write_npy(path, *t);
  return 0;
}
