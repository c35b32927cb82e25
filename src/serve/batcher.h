// serve/batcher.h — the dynamic batcher of `kiln serve`: one per served model version.
//
// Requests wait in the model's queue; a worker thread per instance (execution context) takes the
// oldest request and merges the ones after it that have the same non-batch shapes, along dim 0, up
// to max_batch_size rows, until the batch is full, reaches a preferred size, or the oldest request
// has waited max_queue_delay. One engine run answers the whole batch; its outputs are split back per
// request (views of the batch's outputs, no copy). Requests whose shapes differ go to separate batches.
//
// A request is refused at once when the queue is full or the batcher is stopping, and when it waits
// longer than its timeout before a worker takes it: every refusal is a kCancelled status with a
// message saying which limit was met; infer() never waits past its timeout for a queue slot.
//
// Thread safety: infer() may be called from any number of threads; shutdown() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/status.h"
#include "kiln/tensor.h"
#include "serve/stats.h"

namespace kiln::serve {

struct BatcherOptions {
  std::string name = "model";  // for messages: "model 'resnet' version 1"
  // 0: no batching (each request runs alone, its shapes as sent); > 0: inputs carry a batch dim 0 and
  // requests are merged up to this many rows.
  int64_t max_batch_size = 0;
  std::chrono::microseconds max_queue_delay{0};
  std::vector<int64_t> preferred_batch_sizes;  // a batch reaching one of these runs at once
  size_t max_queue_size = 0;                   // requests waiting at once; 0: no limit
  std::chrono::microseconds default_timeout{0};  // longest wait in the queue; 0: no limit
};

// One instance of a model: runs one batch at a time, from its worker's thread only. Inputs are in the
// model's input order (an undefined tensor leaves an optional input out); the outputs it returns are
// the caller's to keep (they must not be overwritten by a later run).
class BatchExecutor {
 public:
  virtual ~BatchExecutor() = default;
  virtual Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs) = 0;
};

struct BatchRequest {
  std::vector<Tensor> inputs;            // the model's input order; CPU tensors
  std::chrono::microseconds timeout{0};  // 0: the batcher's default_timeout
};

class Batcher {
 public:
  // Starts one worker thread per executor (at least one executor). `stats` receives every request
  // and engine run.
  Batcher(BatcherOptions options, std::vector<std::unique_ptr<BatchExecutor>> instances,
          std::shared_ptr<ModelStats> stats);
  ~Batcher();  // shutdown()
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues the request and waits for its outputs (the model's output order), or for why it was not
  // run: kInvalidArgument when its batch dims disagree or exceed max_batch_size, kCancelled when it
  // was refused (queue full, timed out in the queue, shutting down), the executor's error otherwise.
  Expected<std::vector<Tensor>> infer(BatchRequest request);

  // From now on batches run as soon as they are gathered, without waiting for the queue delay;
  // requests are still taken (a server stopping: its fronts close while what they accepted runs).
  void drain();
  // Stops taking requests, runs every request already queued (without waiting for the queue delay)
  // and joins the workers. Idempotent.
  void shutdown();

  const BatcherOptions& options() const { return options_; }
  size_t queued() const;

 private:
  struct Pending;
  using PendingPtr = std::shared_ptr<Pending>;
  void worker(BatchExecutor& executor);
  std::vector<PendingPtr> collect(std::unique_lock<std::mutex>& lock);
  void execute(BatchExecutor& executor, const std::vector<PendingPtr>& batch);

  BatcherOptions options_;
  std::vector<std::unique_ptr<BatchExecutor>> instances_;
  std::shared_ptr<ModelStats> stats_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<PendingPtr> queue_;
  bool collecting_ = false;  // one worker at a time gathers a batch, so requests merge instead of spreading
  bool stopping_ = false;
  bool draining_ = false;  // drain(): no waiting for the queue delay
  std::vector<std::thread> workers_;
};

}  // namespace kiln::serve
