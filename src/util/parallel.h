// util/parallel.h — kiln's thread pool: loops split over OpenMP threads, with exceptions carried back
// to the calling thread. Used by the CPU kernels and by the CUDA backend's host copies.
#pragma once

#include <cstdint>
#include <type_traits>

namespace kiln {

// A non-owning reference to a callable `void(int64_t, int64_t)`: unlike std::function it never
// allocates, so kernels can hand lambdas with many captures to parallel_for on the run path.
class RangeFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F&& f)  // NOLINT: implicit, like std::function
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(o))(b, e); }) {}
  void operator()(int64_t b, int64_t e) const { call_(obj_, b, e); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

// Runs fn(begin, end) over [0, n) in parallel chunks of at least `grain` items (OpenMP).
void parallel_for(int64_t n, int64_t grain, RangeFn fn);
// Runs fn(t, t + 1) for each task t in [0, n), the threads claiming tasks one at a time in order
// (dynamic scheduling, for a few dozen heavy tasks of equal cost such as GEMM tiles).
void parallel_tasks(int64_t n, RangeFn fn);

}  // namespace kiln
