// util/parallel.cpp — parallel_for and parallel_tasks on OpenMP (util/parallel.h).
#include "util/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>

namespace kiln {

namespace {

// Runs body(thread number, stop) on `threads` OpenMP threads. An exception must not leave an OpenMP
// region (that calls std::terminate): the first one thrown is kept and rethrown on the calling thread,
// where the step guard turns it into a Status; from then on stop() is true, so the other threads take
// no more work.
template <typename Body>
void run_team(int threads, const Body& body) {
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto stop = [&failed] { return failed.load(std::memory_order_relaxed); };
#pragma omp parallel num_threads(threads)
  {
    try {
      body(omp_get_thread_num(), stop);
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace

void parallel_for(int64_t n, int64_t grain, RangeFn fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int threads = omp_get_max_threads();
  if (threads <= 1 || max_chunks <= 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  // Always the same team size (libgomp reallocates its team when the size changes); threads past
  // the chunks that exist have nothing to do.
  const int64_t parts = std::min<int64_t>(threads, max_chunks);
  const int64_t chunk = (n + parts - 1) / parts;
  run_team(threads, [&](int thread, const auto& stop) {
    const int64_t b = thread * chunk, e = std::min(n, b + chunk);
    if (b < e && !stop()) fn(b, e);
  });
}

void parallel_tasks(int64_t n, RangeFn fn) {
  if (n <= 0) return;
  const int threads = omp_get_max_threads();
  if (threads <= 1 || n == 1 || omp_in_parallel()) {
    fn(0, n);
    return;
  }
  // Each thread claims the next task in order: a thread slowed by anything else on its core (another
  // process, an interrupt) takes fewer tasks instead of holding the others at the barrier.
  std::atomic<int64_t> next{0};
  run_team(threads, [&](int, const auto& stop) {
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < n && !stop();
         t = next.fetch_add(1, std::memory_order_relaxed))
      fn(t, t + 1);
  });
}

}  // namespace kiln
