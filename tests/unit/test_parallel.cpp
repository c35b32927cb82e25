// tests/unit/test_parallel.cpp — the CPU thread helpers (backends/cpu/cpu_kernels.h): parallel_for's
// ranges and parallel_tasks' tasks cover [0, n) exactly once at 1, 2 and 3 threads, and an exception
// thrown on any thread comes back on the caller (an exception leaving an OpenMP region would
// terminate the process).
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace {

using kiln::cpu::parallel_for;
using kiln::cpu::parallel_tasks;

// Runs f at 1, 2 and 3 threads, then restores the thread count.
template <typename F>
void at_thread_counts(const F& f) {
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    f(threads);
  }
  omp_set_num_threads(saved);
}

TEST(Parallel, RangesAndTasksCoverEveryIndexOnce) {
  at_thread_counts([](int threads) {
    for (int64_t n : {1, 2, 7, 100}) {
      std::vector<std::atomic<int>> seen_for(n), seen_tasks(n);
      parallel_for(n, 3, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++seen_for[i];
      });
      parallel_tasks(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) ++seen_tasks[i];
      });
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(seen_for[i], 1) << "parallel_for, index " << i << " of " << n << ", " << threads << " threads";
        EXPECT_EQ(seen_tasks[i], 1) << "parallel_tasks, index " << i << " of " << n << ", " << threads << " threads";
      }
    }
  });
}

TEST(Parallel, AnExceptionOnAnyThreadReachesTheCaller) {
  at_thread_counts([](int threads) {
    for (int64_t bad : {0, 5, 99}) {
      auto fail_at = [bad](int64_t b, int64_t e) {
        if (b <= bad && bad < e) throw std::runtime_error("task " + std::to_string(bad));
      };
      EXPECT_THROW(parallel_for(100, 1, fail_at), std::runtime_error) << threads << " threads, index " << bad;
      EXPECT_THROW(parallel_tasks(100, fail_at), std::runtime_error) << threads << " threads, index " << bad;
    }
  });
}

}  // namespace
