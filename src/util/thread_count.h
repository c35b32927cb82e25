// util/thread_count.h — the OpenMP thread count of one run or one build, restored after it.
#pragma once

#include <omp.h>

namespace kiln {

// The OpenMP thread count of the calling thread for one run (ExecutionContext::set_num_threads) or one
// build (BuildOptions::threads), restored after it: a setting never leaks into other contexts or builds
// on the same thread.
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int n) : saved_(n > 0 ? omp_get_max_threads() : 0) {
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
