// serve/batcher.cpp — the dynamic batcher (batcher.h).
#include "serve/batcher.h"

#include <algorithm>
#include <cstring>
#include <exception>

namespace kiln::serve {

using Clock = std::chrono::steady_clock;

namespace {

uint64_t ns_between(Clock::time_point a, Clock::time_point b) {
  return b > a ? static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count()) : 0;
}

// What must be equal for two requests to share a batch: which inputs are given, their dtypes and
// their shapes (past dim 0 when batching).
std::vector<int64_t> batch_key(const std::vector<Tensor>& inputs, bool batching) {
  std::vector<int64_t> key;
  for (const Tensor& t : inputs) {
    if (!t.defined()) {
      key.push_back(-1);
      continue;
    }
    key.push_back(static_cast<int64_t>(t.dtype()));
    key.push_back(t.rank());
    key.insert(key.end(), t.shape().begin() + (batching ? 1 : 0), t.shape().end());
  }
  return key;
}

// Rows [row, row + rows) of `t` along dim 0, sharing its storage.
Tensor rows_of(const Tensor& t, int64_t row, int64_t rows) {
  Shape shape = t.shape();
  const size_t row_bytes = t.nbytes() / static_cast<size_t>(shape[0]);
  shape[0] = rows;
  if (row_bytes == 0 || !t.storage()) return Tensor::empty(t.dtype(), shape);  // no elements to share
  const size_t base = static_cast<const char*>(t.raw()) - static_cast<const char*>(t.storage()->data);
  return Tensor::view(t.storage(), base + static_cast<size_t>(row) * row_bytes, t.dtype(), shape);
}

void copy_elements(const Tensor& src, Tensor& dst, size_t dst_offset_elems) {
  if (src.dtype() == DataType::kString) {
    const auto* s = src.data<std::string>();
    std::copy(s, s + src.numel(), dst.data<std::string>() + dst_offset_elems);
  } else if (src.nbytes() > 0) {
    std::memcpy(static_cast<char*>(dst.raw()) + dst_offset_elems * dtype_size(src.dtype()), src.raw(), src.nbytes());
  }
}

}  // namespace

struct Batcher::Pending {
  BatchRequest request;
  int64_t rows = 1;  // its batch size (dim 0 when batching)
  std::vector<int64_t> key;
  Clock::time_point arrived;
  bool taken = false;  // a worker has it: no longer in the queue
  bool done = false;
  Status status;
  std::vector<Tensor> outputs;
  uint64_t queue_ns = 0, input_ns = 0, infer_ns = 0, output_ns = 0;
  std::condition_variable cv;
};

Batcher::Batcher(BatcherOptions options, std::vector<std::unique_ptr<BatchExecutor>> instances,
                 std::shared_ptr<ModelStats> stats)
    : options_(std::move(options)), instances_(std::move(instances)), stats_(std::move(stats)) {
  if (!stats_) stats_ = std::make_shared<ModelStats>();
  for (auto& instance : instances_) workers_.emplace_back([this, e = instance.get()] { worker(*e); });
}

Batcher::~Batcher() { shutdown(); }

size_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void Batcher::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }
  work_cv_.notify_all();
}

void Batcher::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
}

Expected<std::vector<Tensor>> Batcher::infer(BatchRequest request) {
  const Clock::time_point arrived = Clock::now();
  auto fail = [&](Status st) -> Status {
    stats_->record_failure(ns_between(arrived, Clock::now()));
    return st;
  };
  auto p = std::make_shared<Pending>();
  const bool batching = options_.max_batch_size > 0;
  if (batching) {
    int64_t rows = -1;
    for (const Tensor& t : request.inputs) {
      if (!t.defined()) continue;
      if (t.rank() == 0) return fail(invalid_argument(options_.name + ": an input without the batch dim (rank 0)"));
      if (rows >= 0 && t.dim(0) != rows)
        return fail(invalid_argument(options_.name + ": inputs disagree on the batch size (dim 0: " +
                                     std::to_string(rows) + " and " + std::to_string(t.dim(0)) + ")"));
      rows = t.dim(0);
    }
    if (rows < 1 || rows > options_.max_batch_size)
      return fail(invalid_argument(options_.name + ": batch size " + std::to_string(rows) + " outside 1.." +
                                   std::to_string(options_.max_batch_size) + " (max_batch_size)"));
    p->rows = rows;
  }
  p->key = batch_key(request.inputs, batching);
  p->arrived = arrived;
  const auto timeout = request.timeout.count() > 0 ? request.timeout : options_.default_timeout;
  p->request = std::move(request);

  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return fail(cancelled(options_.name + " is shutting down: request refused"));
  if (options_.max_queue_size > 0 && queue_.size() >= options_.max_queue_size)
    return fail(cancelled(options_.name + ": queue full (" + std::to_string(queue_.size()) +
                          " requests waiting, max_queue_size " + std::to_string(options_.max_queue_size) + ")"));
  queue_.push_back(p);
  work_cv_.notify_all();
  if (timeout.count() > 0) {
    const Clock::time_point deadline = arrived + timeout;
    if (!p->cv.wait_until(lock, deadline, [&] { return p->taken; })) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), p));
      lock.unlock();
      return fail(cancelled(options_.name + ": request timed out after " + std::to_string(timeout.count()) +
                            " us in the queue"));
    }
  }
  // Taken by a worker (or no time limit): its run always ends.
  p->cv.wait(lock, [&] { return p->done; });
  lock.unlock();
  const uint64_t request_ns = ns_between(arrived, Clock::now());
  if (!p->status.ok()) {
    stats_->record_failure(request_ns);
    return p->status;
  }
  stats_->record_success(p->rows, request_ns, p->queue_ns, p->input_ns, p->infer_ns, p->output_ns);
  return std::move(p->outputs);
}

void Batcher::worker(BatchExecutor& executor) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !collecting_); });
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    if (collecting_) {  // stopping: another worker is gathering; wait for it
      work_cv_.wait(lock, [&] { return !collecting_; });
      continue;
    }
    std::vector<PendingPtr> batch = collect(lock);
    work_cv_.notify_all();  // another worker may gather the next batch while this one runs
    if (batch.empty()) continue;
    lock.unlock();
    execute(executor, batch);
    lock.lock();
  }
}

// Takes the oldest request and the queued ones that can join it; waits (releasing the lock) up to the
// oldest request's queue delay for more while the batch is below max_batch_size and no preferred size.
std::vector<Batcher::PendingPtr> Batcher::collect(std::unique_lock<std::mutex>& lock) {
  std::vector<PendingPtr> batch;
  auto take = [&](std::deque<PendingPtr>::iterator it) {
    (*it)->taken = true;
    (*it)->cv.notify_all();
    batch.push_back(*it);
    return queue_.erase(it);
  };
  take(queue_.begin());
  const int64_t max_rows = options_.max_batch_size;
  if (max_rows <= 0) return batch;
  collecting_ = true;
  int64_t rows = batch[0]->rows;
  const Clock::time_point deadline = batch[0]->arrived + options_.max_queue_delay;
  auto preferred = [&] {
    const auto& sizes = options_.preferred_batch_sizes;
    return std::find(sizes.begin(), sizes.end(), rows) != sizes.end();
  };
  for (;;) {
    for (auto it = queue_.begin(); it != queue_.end() && rows < max_rows;) {
      if ((*it)->key == batch[0]->key && rows + (*it)->rows <= max_rows) {
        rows += (*it)->rows;
        it = take(it);
      } else {
        ++it;
      }
    }
    if (rows >= max_rows || preferred() || stopping_ || draining_ || Clock::now() >= deadline) break;
    work_cv_.wait_until(lock, deadline);
  }
  collecting_ = false;
  return batch;
}

void Batcher::execute(BatchExecutor& executor, const std::vector<PendingPtr>& batch) {
  const Clock::time_point start = Clock::now();
  for (const PendingPtr& p : batch) p->queue_ns = ns_between(p->arrived, start);
  Status status;
  std::vector<Tensor> outputs;
  int64_t rows = 0;
  for (const PendingPtr& p : batch) rows += p->rows;
  Clock::time_point gathered = start, ran = start;
  try {
    // Gather: one request runs on its own tensors; several are concatenated along dim 0.
    std::vector<Tensor> inputs;
    if (batch.size() == 1) {
      inputs = batch[0]->request.inputs;
    } else {
      const size_t n = batch[0]->request.inputs.size();
      inputs.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const Tensor& first = batch[0]->request.inputs[i];
        if (!first.defined()) continue;
        Shape shape = first.shape();
        shape[0] = rows;
        inputs[i] = Tensor::empty(first.dtype(), shape);
        size_t offset = 0;
        for (const PendingPtr& p : batch) {
          copy_elements(p->request.inputs[i], inputs[i], offset);
          offset += static_cast<size_t>(p->request.inputs[i].numel());
        }
      }
    }
    gathered = Clock::now();
    auto result = executor.run(inputs);
    ran = Clock::now();
    if (!result.ok()) {
      status = result.status();
    } else {
      outputs = std::move(*result);
      if (options_.max_batch_size > 0)
        for (size_t k = 0; k < outputs.size() && status.ok(); ++k)
          if (outputs[k].rank() == 0 || outputs[k].dim(0) != rows)
            status = runtime_error(options_.name + ": output " + std::to_string(k) + " has shape " +
                                   shape_to_string(outputs[k].shape()) + ", not the batch's " +
                                   std::to_string(rows) + " rows along dim 0 (the model cannot be batched)");
    }
  } catch (const std::exception& e) {
    status = runtime_error(options_.name + ": " + e.what());
  }
  // Split: each request gets its rows of every output.
  std::vector<std::vector<Tensor>> split(batch.size());
  if (status.ok()) {
    if (batch.size() == 1) {
      split[0] = std::move(outputs);
    } else {
      int64_t row = 0;
      for (size_t r = 0; r < batch.size(); ++r) {
        for (const Tensor& out : outputs) split[r].push_back(rows_of(out, row, batch[r]->rows));
        row += batch[r]->rows;
      }
    }
  }
  const Clock::time_point end = Clock::now();
  const uint64_t input_ns = ns_between(start, gathered), infer_ns = ns_between(gathered, ran),
                 output_ns = ns_between(ran, end);
  if (status.ok()) stats_->record_execution(rows, input_ns, infer_ns, output_ns);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t r = 0; r < batch.size(); ++r) {
    Pending& p = *batch[r];
    p.status = status;
    p.outputs = std::move(split[r]);
    p.input_ns = input_ns;
    p.infer_ns = infer_ns;
    p.output_ns = output_ns;
    p.done = true;
    p.cv.notify_all();
  }
}

}  // namespace kiln::serve
