// util/checksum.h — a fast 64-bit checksum for engine files (integrity against damage: a flipped
// bit, a truncated copy, a partial write). Not cryptographic: it does not protect against someone
// who rewrites the file on purpose (sign the file for that).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kiln {

// Four independent lanes of 8-byte words (each step a bijection of the lane's state, so any change
// to one word changes that lane for good), folded together with the length at the end. Reads about
// 10 GB/s on one core.
uint64_t checksum64(const void* data, size_t bytes);

}  // namespace kiln
