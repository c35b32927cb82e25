// backends/staged_kernel.h — a kernel written as two functions: reshape (host only, once per
// input-shape signature: output shapes, workspace bytes, per-shape state) and run (launch only).
// The form most kernels take under the contract of backends/kernel.h.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <utility>

#include "backends/kernel.h"

namespace kiln {

class StagedKernel final : public Kernel {
 public:
  using ReshapeFn = std::function<Status(ReshapeContext&)>;
  using RunFn = std::function<Status(KernelContext&)>;
  using TacticsFn = std::function<std::vector<std::string>(const ReshapeContext&)>;
  StagedKernel(ReshapeFn reshape, RunFn run, TacticsFn tactics = nullptr)
      : reshape_(std::move(reshape)), run_(std::move(run)), tactics_(std::move(tactics)) {}
  bool has_reshape() const override { return true; }
  Status reshape(ReshapeContext& ctx) const override { return reshape_(ctx); }
  Status run(KernelContext& ctx) const override { return run_(ctx); }
  std::vector<std::string> tactics(const ReshapeContext& ctx) const override {
    return tactics_ ? tactics_(ctx) : std::vector<std::string>{};
  }

 private:
  ReshapeFn reshape_;
  RunFn run_;
  TacticsFn tactics_;
};

inline Expected<KernelPtr> make_staged(StagedKernel::ReshapeFn reshape, StagedKernel::RunFn run,
                                       StagedKernel::TacticsFn tactics = nullptr) {
  return KernelPtr(new StagedKernel(std::move(reshape), std::move(run), std::move(tactics)));
}

// A tactic asked for that the kernel does not offer for these shapes (one recorded on a machine with
// other kernels, or at another shape of the profile) gives way to the kernel's own choice (kernel.h).
inline void own_choice_unless_offered(ReshapeContext& rc, const std::vector<std::string>& offered) {
  if (!rc.tactic.empty() && std::find(offered.begin(), offered.end(), rc.tactic) == offered.end()) rc.tactic.clear();
}

// The per-shape state reshape() stored, typed.
template <typename S>
const S& shape_state(const KernelContext& ctx) {
  return *static_cast<const S*>(ctx.shape_state());
}

// Dims of a small rank held without a heap allocation (heap only past `K` dims).
template <size_t K = 8>
class SmallDims {
 public:
  explicit SmallDims(size_t n, int64_t fill = 0) {
    if (n > K) {
      heap_ = std::make_unique<int64_t[]>(n);
      p_ = heap_.get();
    }
    for (size_t i = 0; i < n; ++i) p_[i] = fill;
  }
  int64_t& operator[](size_t i) { return p_[i]; }
  int64_t operator[](size_t i) const { return p_[i]; }

 private:
  int64_t local_[K];
  std::unique_ptr<int64_t[]> heap_;
  int64_t* p_ = local_;
};

}  // namespace kiln
