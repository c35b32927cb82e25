// plan/memory.h — the memory planner: buffers with sizes and lifetimes → offsets in one arena.
//
// Used at build time for static shapes and by execution contexts once per input-shape signature.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln {

constexpr size_t kArenaAlign = 256;

struct BufferRequest {
  size_t bytes = 0;   // rounded up to kArenaAlign by the planner
  int begin = 0;      // first step that writes it
  int end = 0;        // last step that reads it (inclusive)
};

// Offsets for `reqs` (same order) such that buffers whose lifetimes overlap never overlap in memory:
// largest first, each at the lowest offset that fits (first fit) — or, past 4096 buffers, a sweep in
// time with best fit among freed ranges (O(n log n), so a huge graph plans in seconds). Sizes
// saturate instead of wrapping. Returns the arena size needed.
size_t plan_offsets(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets);
// The two strategies, callable on their own (tests compare them).
size_t plan_offsets_greedy(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets);
size_t plan_offsets_sweep(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets);

}  // namespace kiln
