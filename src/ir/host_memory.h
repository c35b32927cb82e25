// ir/host_memory.h — kiln's host allocations, counted against max_memory_bytes (kiln/tensor.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/tensor.h"

namespace kiln {

// Reserves `bytes` against the limit: "" when granted, else why not. release_host_memory gives
// them back.
std::string reserve_host_memory(size_t bytes);
void release_host_memory(size_t bytes);
// 64-byte aligned, uninitialized host memory of `bytes` (counted until the storage is released), or
// null with the reason in *why (over max_memory_bytes, or out of memory).
std::shared_ptr<Storage> allocate_host_storage(size_t bytes, std::string* why);

}  // namespace kiln
