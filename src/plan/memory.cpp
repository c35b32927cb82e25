#include "plan/memory.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <queue>
#include <utility>

namespace kiln {

namespace {

// Saturating: a request near SIZE_MAX stays huge (and the arena's allocation then fails) instead of
// wrapping to a small size.
size_t round_up(size_t b) {
  return b > SIZE_MAX - kArenaAlign ? SIZE_MAX / kArenaAlign * kArenaAlign : (b + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
}
size_t add_sat(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

}  // namespace

// O(n log n) for large graphs: a sweep over time that frees buffers once their last reader has run
// (coalescing free ranges) and places each new buffer in the smallest free range that holds it,
// growing the arena at its end otherwise.
size_t plan_offsets_sweep(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets) {
  const size_t n = reqs.size();
  offsets.assign(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reqs[a].begin != reqs[b].begin ? reqs[a].begin < reqs[b].begin : round_up(reqs[a].bytes) > round_up(reqs[b].bytes);
  });
  std::map<size_t, size_t> free_at;             // offset → size
  std::multimap<size_t, size_t> free_by_size;  // size → offset
  auto erase_free = [&](std::map<size_t, size_t>::iterator it) {
    auto range = free_by_size.equal_range(it->second);
    for (auto r = range.first; r != range.second; ++r)
      if (r->second == it->first) { free_by_size.erase(r); break; }
    return free_at.erase(it);
  };
  auto release = [&](size_t off, size_t size) {
    auto next = free_at.lower_bound(off);
    if (next != free_at.end() && add_sat(off, size) == next->first) {
      size = add_sat(size, next->second);
      next = erase_free(next);
    }
    if (next != free_at.begin()) {
      auto prev = std::prev(next);
      if (add_sat(prev->first, prev->second) == off) {
        off = prev->first;
        size = add_sat(size, prev->second);
        erase_free(prev);
      }
    }
    free_at[off] = size;
    free_by_size.emplace(size, off);
  };
  using Live = std::pair<int, size_t>;  // (last step, request), earliest end first
  std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;
  size_t total = 0;
  for (size_t i : order) {
    const size_t bytes = round_up(reqs[i].bytes);
    if (bytes == 0) continue;
    while (!live.empty() && live.top().first < reqs[i].begin) {
      const size_t j = live.top().second;
      live.pop();
      release(offsets[j], round_up(reqs[j].bytes));
    }
    auto fit = free_by_size.lower_bound(bytes);
    if (fit != free_by_size.end()) {
      const size_t off = fit->second, size = fit->first;
      free_by_size.erase(fit);
      free_at.erase(off);
      offsets[i] = off;
      if (size > bytes) release(off + bytes, size - bytes);
    } else if (!free_at.empty() && add_sat(std::prev(free_at.end())->first, std::prev(free_at.end())->second) == total) {
      // The free range at the arena's end is too small: start the buffer there and grow.
      auto last = std::prev(free_at.end());
      offsets[i] = last->first;
      erase_free(last);
      total = add_sat(offsets[i], bytes);
    } else {
      offsets[i] = total;
      total = add_sat(total, bytes);
    }
    live.push({std::max(reqs[i].begin, reqs[i].end), i});
  }
  return total;
}

size_t plan_offsets(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets) {
  // Greedy by size (tightest arenas) is quadratic in the worst case; past this many buffers the sweep.
  constexpr size_t kGreedyLimit = 4096;
  return reqs.size() > kGreedyLimit ? plan_offsets_sweep(reqs, offsets) : plan_offsets_greedy(reqs, offsets);
}

size_t plan_offsets_greedy(const std::vector<BufferRequest>& reqs, std::vector<size_t>& offsets) {
  const size_t n = reqs.size();
  offsets.assign(n, 0);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  auto rounded = [&](size_t i) { return round_up(reqs[i].bytes); };
  auto add = add_sat;
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
