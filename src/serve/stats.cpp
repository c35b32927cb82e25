// serve/stats.cpp — counters of a served model version (stats.h).
#include "serve/stats.h"

#include <chrono>

namespace kiln::serve {

namespace {
uint64_t now_ms() {
  using namespace std::chrono;
  return static_cast<uint64_t>(duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count());
}
}  // namespace

void ModelStats::record_success(int64_t batch_size, uint64_t request_ns, uint64_t queue_ns, uint64_t input_ns,
                                uint64_t infer_ns, uint64_t output_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.success.add(request_ns);
  s_.queue.add(queue_ns);
  s_.compute.input.add(input_ns);
  s_.compute.infer.add(infer_ns);
  s_.compute.output.add(output_ns);
  s_.inference_count += static_cast<uint64_t>(batch_size);
  s_.last_inference_ms = now_ms();
}

void ModelStats::record_failure(uint64_t request_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  s_.fail.add(request_ns);
  s_.last_inference_ms = now_ms();
}

void ModelStats::record_execution(int64_t batch_size, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  ++s_.execution_count;
  ComputeDurations& b = s_.batches[batch_size];
  b.input.add(input_ns);
  b.infer.add(infer_ns);
  b.output.add(output_ns);
}

StatsSnapshot ModelStats::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return s_;
}

}  // namespace kiln::serve
