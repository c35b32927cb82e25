#include "plan/memory.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace kiln {

size_t plan_offsets(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets) {
  const size_t n = reqs.size();
  offsets.assign(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  auto rounded = [&](size_t i) { return (reqs[i].bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign; };
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
      busy.push_back({offsets[j], offsets[j] + rounded(j)});
    }
    std::sort(busy.begin(), busy.end());
    size_t off = 0;
    for (const auto& [b, e] : busy) {
      if (off + bytes <= b) break;
      off = std::max(off, e);
    }
    offsets[i] = off;
    placed.push_back(i);
    total = std::max(total, off + bytes);
  }
  return total;
}

}  // namespace kiln
