#include "plan/memory.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>

namespace kiln {

size_t plan_offsets(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets) {
  const size_t n = reqs.size();
  offsets.assign(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // Saturating: a request near SIZE_MAX stays huge (and the arena's allocation then fails) instead of
  // wrapping to a small size.
  auto rounded = [&](size_t i) {
    const size_t b = reqs[i].bytes;
    return b > SIZE_MAX - kArenaAlign ? SIZE_MAX / kArenaAlign * kArenaAlign : (b + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
  };
  auto add = [](size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rounded(a) > rounded(b); });
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;
  size_t total = 0;
  for (size_t i : order) {
    const size_t bytes = rounded(i);
    if (bytes == 0) continue;
    busy.clear();
    for (size_t j : placed) {
      if (reqs[j].end < reqs[i].begin || reqs[i].end < reqs[j].begin) continue;
      busy.push_back({offsets[j], add(offsets[j], rounded(j))});
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (const auto& [b, e] : busy) {
      if (add(off, bytes) <= b) break;
      off = std::max(off, e);
    }
    offsets[i] = off;
    placed.push_back(i);
    total = std::max(total, add(off, bytes));
  }
  return total;
}

}  // namespace kiln
