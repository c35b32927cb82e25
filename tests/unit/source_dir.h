// tests/unit/source_dir.h — where the tests find the repository's files (examples/, tests/data/):
// the source folder they were built from when it is there, else the working directory, so binaries
// carried to another machine (the GPU machine runs them from a checkout's root) find them too.
#pragma once

#include <filesystem>
#include <string>

namespace kiln::testing_support {

inline const std::string& source_dir() {
  static const std::string dir = [] {
    std::error_code ec;
    const std::string built = KILN_SOURCE_DIR;
    return std::filesystem::exists(built + "/examples/tiny_cnn.onnx", ec) ? built : std::string(".");
  }();
  return dir;
}

}  // namespace kiln::testing_support
