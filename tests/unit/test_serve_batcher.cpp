// The dynamic batcher of `kiln serve` (src/serve/batcher.h) over a fake executor: requests merge
// under concurrency, within max_batch_size and the queue delay, never across shapes; timeouts, a
// full queue and shutdown answer every request.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "serve/batcher.h"

namespace kiln::serve {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Output 0 = input 0 * 2 (float32); records each run's shape; optionally sleeps, waits for a gate or fails.
class FakeExecutor : public BatchExecutor {
 public:
  struct Log {
    std::mutex mu;
    std::vector<Shape> runs;
    std::atomic<int> running{0}, most_running{0};
    size_t count() {  // while the batcher may still run (reading runs.size() unlocked is a race: TSan)
      std::lock_guard<std::mutex> lock(mu);
      return runs.size();
    }
  };
  FakeExecutor(std::shared_ptr<Log> log, std::chrono::milliseconds sleep = 0ms,
               std::shared_future<void> gate = {}, bool fail = false)
      : log_(std::move(log)), sleep_(sleep), gate_(std::move(gate)), fail_(fail) {}

  Expected<std::vector<Tensor>> run(const std::vector<Tensor>& inputs) override {
    const int now = ++log_->running;
    for (int m = log_->most_running; now > m && !log_->most_running.compare_exchange_weak(m, now);) {}
    {
      std::lock_guard<std::mutex> lock(log_->mu);
      log_->runs.push_back(inputs[0].shape());
    }
    if (gate_.valid()) gate_.wait();
    std::this_thread::sleep_for(sleep_);
    --log_->running;
    if (fail_) return runtime_error("fake executor: failed on purpose");
    Tensor out = Tensor::empty(DataType::kFloat32, inputs[0].shape());
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = inputs[0].data<float>()[i] * 2;
    return std::vector<Tensor>{out};
  }

 private:
  std::shared_ptr<Log> log_;
  std::chrono::milliseconds sleep_;
  std::shared_future<void> gate_;
  bool fail_;
};

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::empty(DataType::kFloat32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value + static_cast<float>(i);
  return t;
}

BatcherOptions batching(int64_t max_batch_size, std::chrono::milliseconds delay) {
  BatcherOptions o;
  o.max_batch_size = max_batch_size;
  o.max_queue_delay = delay;
  return o;
}

std::unique_ptr<Batcher> make_batcher(BatcherOptions options, const std::shared_ptr<FakeExecutor::Log>& log,
                                      int instances = 1, std::chrono::milliseconds sleep = 0ms,
                                      std::shared_future<void> gate = {}, std::shared_ptr<ModelStats> stats = nullptr) {
  std::vector<std::unique_ptr<BatchExecutor>> execs;
  for (int i = 0; i < instances; ++i) execs.push_back(std::make_unique<FakeExecutor>(log, sleep, gate));
  return std::make_unique<Batcher>(std::move(options), std::move(execs), std::move(stats));
}

// Runs `n` requests from `n` threads at once; request i sends `shape_of(i)` filled from 100 * i.
std::vector<Expected<std::vector<Tensor>>> infer_concurrently(Batcher& b, int n,
                                                              const std::function<Shape(int)>& shape_of) {
  std::vector<std::future<Expected<std::vector<Tensor>>>> futures;
  for (int i = 0; i < n; ++i)
    futures.push_back(std::async(std::launch::async, [&b, i, &shape_of] {
      return b.infer({{filled(shape_of(i), 100.0f * i)}});
    }));
  std::vector<Expected<std::vector<Tensor>>> results;
  for (auto& f : futures) results.push_back(f.get());
  return results;
}

void expect_doubled(const Expected<std::vector<Tensor>>& r, const Shape& shape, float first) {
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 1u);
  const Tensor& out = (*r)[0];
  ASSERT_EQ(out.shape(), shape);
  for (int64_t i = 0; i < out.numel(); ++i) ASSERT_EQ(out.data<float>()[i], 2 * (first + static_cast<float>(i)));
}

TEST(ServeBatcher, MergesConcurrentRequestsAndSplitsTheirResults) {
  auto log = std::make_shared<FakeExecutor::Log>();
  auto stats = std::make_shared<ModelStats>();
  BatcherOptions o = batching(8, 200ms);
  auto b = make_batcher(o, log, 1, 0ms, {}, stats);
  auto results = infer_concurrently(*b, 8, [](int) { return Shape{1, 3}; });
  for (int i = 0; i < 8; ++i) expect_doubled(results[i], {1, 3}, 100.0f * i);
  EXPECT_LT(log->runs.size(), 8u);  // merged: fewer runs than requests
  StatsSnapshot s = stats->snapshot();
  EXPECT_EQ(s.success.count, 8u);
  EXPECT_EQ(s.inference_count, 8u);
  EXPECT_EQ(s.execution_count, log->runs.size());
}

TEST(ServeBatcher, RespectsMaxBatchSize) {
  auto log = std::make_shared<FakeExecutor::Log>();
  BatcherOptions o = batching(4, 100ms);
  auto b = make_batcher(o, log);
  // Requests of 1 and 2 rows: no batch may pass 4 rows.
  auto results = infer_concurrently(*b, 10, [](int i) { return Shape{1 + i % 2, 2}; });
  for (int i = 0; i < 10; ++i) expect_doubled(results[i], {1 + i % 2, 2}, 100.0f * i);
  int64_t rows = 0;
  for (const Shape& s : log->runs) {
    EXPECT_LE(s[0], 4);
    rows += s[0];
  }
  EXPECT_EQ(rows, 15);
  // A request larger than max_batch_size is refused, naming the limit.
  auto big = b->infer({{filled({5, 2}, 0)}});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("max_batch_size"), std::string::npos) << big.status().message();
}

TEST(ServeBatcher, WaitsTheQueueDelayOnlyWhileTheBatchIsNotFull) {
  auto log = std::make_shared<FakeExecutor::Log>();
  BatcherOptions o = batching(4, 150ms);
  auto b = make_batcher(o, log);
  auto t0 = Clock::now();
  expect_doubled(b->infer({{filled({1, 2}, 1)}}), {1, 2}, 1);
  auto alone = Clock::now() - t0;
  EXPECT_GE(alone, 140ms);  // waited for company
  EXPECT_LT(alone, 2s);
  // A full batch (one request of max_batch_size rows) goes at once.
  t0 = Clock::now();
  expect_doubled(b->infer({{filled({4, 2}, 1)}}), {4, 2}, 1);
  EXPECT_LT(Clock::now() - t0, 100ms);
  // So does a batch that reaches a preferred size.
  o.preferred_batch_sizes = {1};
  auto p = make_batcher(o, log);
  t0 = Clock::now();
  expect_doubled(p->infer({{filled({1, 2}, 1)}}), {1, 2}, 1);
  EXPECT_LT(Clock::now() - t0, 100ms);
}

TEST(ServeBatcher, NeverMixesShapes) {
  auto log = std::make_shared<FakeExecutor::Log>();
  BatcherOptions o = batching(16, 100ms);
  auto b = make_batcher(o, log);
  auto shape_of = [](int i) { return Shape{1, i % 2 ? 3 : 5}; };
  auto results = infer_concurrently(*b, 8, shape_of);
  for (int i = 0; i < 8; ++i) expect_doubled(results[i], shape_of(i), 100.0f * i);
  int64_t rows3 = 0, rows5 = 0;
  for (const Shape& s : log->runs) (s[1] == 3 ? rows3 : rows5) += s[0];
  EXPECT_EQ(rows3, 4);
  EXPECT_EQ(rows5, 4);
  EXPECT_GE(log->runs.size(), 2u);
}

TEST(ServeBatcher, SplitsOutputsWithoutElements) {
  auto log = std::make_shared<FakeExecutor::Log>();
  auto b = make_batcher(batching(8, 100ms), log);
  auto results = infer_concurrently(*b, 4, [](int) { return Shape{1, 0}; });
  for (auto& r : results) expect_doubled(r, {1, 0}, 0);
}

TEST(ServeBatcher, TimesOutInTheQueueInsteadOfHanging) {
  auto log = std::make_shared<FakeExecutor::Log>();
  std::promise<void> open;
  BatcherOptions o;  // no batching: one request at a time
  auto b = make_batcher(o, log, 1, 0ms, open.get_future().share());
  auto first = std::async(std::launch::async, [&] { return b->infer({{filled({2}, 0)}}); });
  while (log->running == 0) std::this_thread::sleep_for(1ms);  // the only worker is busy
  BatchRequest late{{filled({2}, 0)}, 50ms};
  auto t0 = Clock::now();
  auto r = b->infer(late);
  EXPECT_LT(Clock::now() - t0, 1s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCancelled);
  EXPECT_NE(r.status().message().find("timed out"), std::string::npos) << r.status().message();
  EXPECT_EQ(b->queued(), 0u);  // the timed-out request left the queue
  open.set_value();
  expect_doubled(first.get(), {2}, 0);
}

TEST(ServeBatcher, RefusesWhenTheQueueIsFull) {
  auto log = std::make_shared<FakeExecutor::Log>();
  std::promise<void> open;
  auto stats = std::make_shared<ModelStats>();
  BatcherOptions o;
  o.max_queue_size = 1;
  auto b = make_batcher(o, log, 1, 0ms, open.get_future().share(), stats);
  auto running = std::async(std::launch::async, [&] { return b->infer({{filled({1}, 0)}}); });
  while (log->running == 0) std::this_thread::sleep_for(1ms);
  auto queued = std::async(std::launch::async, [&] { return b->infer({{filled({1}, 1)}}); });
  while (b->queued() == 0) std::this_thread::sleep_for(1ms);
  auto refused = b->infer({{filled({1}, 2)}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kCancelled);
  EXPECT_NE(refused.status().message().find("queue full"), std::string::npos) << refused.status().message();
  open.set_value();
  expect_doubled(running.get(), {1}, 0);
  expect_doubled(queued.get(), {1}, 1);
  StatsSnapshot s = stats->snapshot();
  EXPECT_EQ(s.success.count, 2u);
  EXPECT_EQ(s.fail.count, 1u);
}

TEST(ServeBatcher, ShutdownDrainsQueuedRequestsThenRefuses) {
  auto log = std::make_shared<FakeExecutor::Log>();
  BatcherOptions o;
  o.max_batch_size = 2;
  o.max_queue_delay = 10s;  // shutdown must not wait for it
  auto b = make_batcher(o, log, 1, 20ms);
  std::vector<std::future<Expected<std::vector<Tensor>>>> futures;
  for (int i = 0; i < 5; ++i)
    futures.push_back(std::async(std::launch::async, [&b, i] { return b->infer({{filled({1, 2}, 10.0f * i)}}); }));
  while (b->queued() + log->count() == 0) std::this_thread::sleep_for(1ms);
  auto t0 = Clock::now();
  b->shutdown();
  EXPECT_LT(Clock::now() - t0, 5s);
  for (int i = 0; i < 5; ++i) {
    auto r = futures[i].get();
    // Every request that got in before shutdown ran; one that came after is refused, never left waiting.
    if (r.ok()) {
      expect_doubled(r, {1, 2}, 10.0f * i);
    } else {
      EXPECT_NE(r.status().message().find("shutting down"), std::string::npos) << r.status().message();
    }
  }
  auto after = b->infer({{filled({1, 2}, 0)}});
  ASSERT_FALSE(after.ok());
  EXPECT_NE(after.status().message().find("shutting down"), std::string::npos);
}

// drain() (a server stopping): a queued request runs without waiting for the queue delay, and
// requests still come in and run (the fronts close after it, so what they accepted must be served).
TEST(ServeBatcher, DrainRunsQueuedRequestsAtOnceAndStillTakesNewOnes) {
  auto log = std::make_shared<FakeExecutor::Log>();
  BatcherOptions o;
  o.max_batch_size = 8;
  o.max_queue_delay = 10s;
  auto b = make_batcher(o, log);
  const auto t0 = Clock::now();
  auto queued = std::async(std::launch::async, [&b] { return b->infer({{filled({1, 2}, 3.0f)}}); });
  // (Queued, or already taken by the worker gathering a batch, which waits for the delay: either way
  // drain() must let it run; one that arrives after drain() runs at once too.)
  std::this_thread::sleep_for(50ms);
  b->drain();
  expect_doubled(queued.get(), {1, 2}, 3.0f);
  expect_doubled(b->infer({{filled({1, 2}, 5.0f)}}), {1, 2}, 5.0f);
  EXPECT_LT(Clock::now() - t0, 5s);
}

TEST(ServeBatcher, InstancesRunInParallel) {
  auto log = std::make_shared<FakeExecutor::Log>();
  BatcherOptions o;
  auto b = make_batcher(o, log, 2, 150ms);
  auto results = infer_concurrently(*b, 4, [](int) { return Shape{2}; });
  for (int i = 0; i < 4; ++i) expect_doubled(results[i], {2}, 100.0f * i);
  EXPECT_EQ(log->most_running.load(), 2);
}

TEST(ServeBatcher, AnExecutorErrorReachesEveryRequestOfTheBatch) {
  auto log = std::make_shared<FakeExecutor::Log>();
  BatcherOptions o = batching(4, 100ms);
  std::vector<std::unique_ptr<BatchExecutor>> execs;
  execs.push_back(std::make_unique<FakeExecutor>(log, 0ms, std::shared_future<void>{}, true));
  Batcher b(o, std::move(execs), nullptr);
  auto results = infer_concurrently(b, 3, [](int) { return Shape{1, 2}; });
  for (auto& r : results) {
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("failed on purpose"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::serve
