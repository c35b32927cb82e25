// util/thread_count.h — the OpenMP thread count of one run or one build, restored after it.
#pragma once

#include <omp.h>

namespace kiln {

// The most threads a run or build asks OpenMP for (the CLI's --threads and Python's
// intra_op_num_threads refuse more): past the system's thread limit the OpenMP runtime calls exit(1),
// which would take a server or a Python process down; a larger C++ setting is clamped to it.
constexpr int kMaxThreads = 1024;

// The OpenMP thread count of the calling thread for one run (ExecutionContext::set_num_threads) or one
// build (BuildOptions::threads), restored after it: a setting never leaks into other contexts or builds
// on the same thread.
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int n) : saved_(n > 0 ? omp_get_max_threads() : 0) {
    n = n < kMaxThreads ? n : kMaxThreads;
    if (n > 0 && n != saved_) omp_set_num_threads(n);
    else saved_ = 0;
  }
  ~ThreadCountScope() {
    if (saved_ > 0) omp_set_num_threads(saved_);
  }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int saved_;
};

}  // namespace kiln
