// onnx/sha256.h — SHA-256 (FIPS 180-4), used to fingerprint source models (Model::source_hash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::onnx {

// Incremental hasher: update() any number of times, then hex_digest() once.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  // Lower-case hex of the 32-byte digest. Finishes the hash; do not update() afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);

}  // namespace kiln::onnx
