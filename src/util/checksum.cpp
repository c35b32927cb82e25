#include "util/checksum.h"

#include <cstring>

namespace kiln {
namespace {

constexpr uint64_t kOdd1 = 0xd6e8feb86659fd93ull;  // odd multipliers: multiplication is invertible mod 2^64
constexpr uint64_t kOdd2 = 0xa0761d6478bd642full;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint64_t step(uint64_t lane, uint64_t word) { return rotl(lane ^ (word * kOdd2), 27) * kOdd1; }
inline uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= kOdd1;
  h ^= h >> 29;
  h *= kOdd2;
  return h ^ (h >> 32);
}

}  // namespace

uint64_t checksum64(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t lane[4] = {kOdd1, kOdd2, ~kOdd1, ~kOdd2};
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    for (int k = 0; k < 4; ++k) lane[k] = step(lane[k], load64(p + i + 8 * k));
  unsigned char tail[32] = {};
  std::memcpy(tail, p + i, bytes - i);
  for (int k = 0; k < 4; ++k) lane[k] = step(lane[k], load64(tail + 8 * k));
  uint64_t h = static_cast<uint64_t>(bytes) * kOdd1;
  for (int k = 0; k < 4; ++k) h = mix(h ^ lane[k]) + rotl(lane[k], 17 * k + 1);
  return mix(h);
}

}  // namespace kiln
