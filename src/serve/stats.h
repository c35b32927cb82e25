// serve/stats.h — what a served model version has done: Triton's statistics (the /stats routes) and
// the Prometheus counters of /metrics are both read from here.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace kiln::serve {

// A count of events and their summed duration.
struct Duration {
  uint64_t count = 0;
  uint64_t ns = 0;
  void add(uint64_t duration_ns) {
    ++count;
    ns += duration_ns;
  }
};

// The three phases of one engine run: gathering the batch's inputs, the run, splitting its outputs.
struct ComputeDurations {
  Duration input, infer, output;
};

struct StatsSnapshot {
  Duration success, fail, queue;    // per request; success/fail: from arrival to the answer
  ComputeDurations compute;         // per request (each request of a batch counts its batch's phases)
  uint64_t inference_count = 0;     // requests' batch sizes summed (successful ones)
  uint64_t execution_count = 0;     // engine runs
  uint64_t last_inference_ms = 0;   // wall clock (ms since the epoch) of the last answer
  std::map<int64_t, ComputeDurations> batches;  // per engine batch size: its runs
};

class ModelStats {
 public:
  // A request answered: its batch size, time from arrival to answer, time queued, and its run's phases.
  void record_success(int64_t batch_size, uint64_t request_ns, uint64_t queue_ns, uint64_t input_ns,
                      uint64_t infer_ns, uint64_t output_ns);
  // A request refused or failed after it reached the model (bad input, full queue, timeout, run error).
  void record_failure(uint64_t request_ns);
  // One engine run of `batch_size` rows.
  void record_execution(int64_t batch_size, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns);
  StatsSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  StatsSnapshot s_;
};

}  // namespace kiln::serve
