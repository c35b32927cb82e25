// onnx/sha256.h — SHA-256 (FIPS 180-4), used to fingerprint source models (Model::source_hash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::onnx {

// Incremental hasher: update() any number of times, then hex_digest() once.
// Whole blocks go through the CPU's SHA extensions where it has them (x86 SHA-NI: about 2 GB/s
// against 0.35 for the portable rounds, which matter for hashing a 600 MB model during its build).
class Sha256 {
 public:
  // `portable`: the plain C++ rounds even where the CPU has SHA extensions (the tests compare both).
  explicit Sha256(bool portable = false);
  void update(const void* data, size_t n);
  // Lower-case hex of the 32-byte digest. Finishes the hash; do not update() afterwards.
  std::string hex_digest();
  // Whether this CPU's SHA extensions hash the blocks (else the portable rounds do).
  static bool accelerated();

 private:
  void blocks(const uint8_t* p, size_t n);  // n whole 64-byte blocks
  bool portable_;
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);

}  // namespace kiln::onnx
