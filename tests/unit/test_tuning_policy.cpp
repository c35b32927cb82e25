// The tuner's timing policy (tune/tuning_policy.h) on a fake device with a fake clock: how long a
// candidate is timed, when it is given up, which one wins, and which layers are not timed again.
// No kernel runs here; tests/unit/test_tuning.cpp tunes real CPU layers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tune/timing_cache.h"
#include "tune/tuning_policy.h"

using namespace kiln;
using namespace kiln::tuning;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A device whose kernels take a fixed time per run, times a per-sample noise factor, plus a fixed
// host overhead per timed sample (a graph launch and a synchronisation) and a set-up cost per call.
struct FakeDevice {
  double clock = 0;             // seconds
  double setup_seconds = 0.01;  // a library plan, a graph capture
  double overhead_ms = 0.015;   // per timed sample
  std::function<double(int)> noise = [](int) { return 1.0; };  // factor of the i-th sample taken
  int calls = 0, samples = 0;
  double timed_seconds = 0;  // warm-up and timed runs, overheads included, set-ups excluded

  RunSamples kernel(double ms) {
    return [this, ms](int runs, const std::function<bool(double)>& more) {
      ++calls;
      clock += setup_seconds;
      const double warmup = ms * 1e-3;
      clock += warmup;
      timed_seconds += warmup;
      for (int k = 0; k < kMaxSamples + 1; ++k) {
        const double sample_ms = ms * runs * noise(samples++) + overhead_ms;
        clock += sample_ms * 1e-3;
        timed_seconds += sample_ms * 1e-3;
        if (!more(sample_ms / runs)) break;
      }
      return Status::Ok();
    };
  }
};

CandidateTime time_one(FakeDevice& dev, double ms, double best_ms = kInf, int batch = 0) {
  CandidateTime t;
  EXPECT_TRUE(time_candidate(dev.kernel(ms), best_ms, batch, nullptr, &t).ok());
  return t;
}

// A layer of candidates with known times on the fake device; counts what the session asks of it.
struct FakeLayer {
  FakeDevice& dev;
  std::map<std::string, double> ms;          // candidate → ms per run
  std::map<std::string, std::string> wrong;  // candidate → why its outputs are not the reference's
  int references = 0, checks = 0, timings = 0;

  LayerRunner runner() {
    LayerRunner r;
    r.reference = [this] {
      ++references;
      return Status::Ok();
    };
    r.check = [this](const std::string& c) -> Expected<std::string> {
      ++checks;
      return wrong.count(c) ? wrong.at(c) : std::string();
    };
    r.run = [this](const std::string& c, int runs, const std::function<bool(double)>& more) {
      ++timings;
      return dev.kernel(ms.at(c))(runs, more);
    };
    return r;
  }
  int device_calls() const { return references + checks + timings; }
};

std::vector<std::string> names(const std::map<std::string, double>& ms) {
  std::vector<std::string> r;
  for (const auto& [c, t] : ms) r.push_back(c);
  return r;
}

}  // namespace

TEST(TuningPolicy, BatchesLastAboutOneSampleWithinTheCaps) {
  EXPECT_EQ(batch_runs(0.010), 50);               // 10 µs: 0.5 ms of runs
  EXPECT_EQ(batch_runs(0.0001), kMaxBatchRuns);   // tiny kernels: capped
  EXPECT_EQ(batch_runs(0.0), kMaxBatchRuns);
  EXPECT_EQ(batch_runs(5.0), 1);                  // long kernels: one run per sample
  EXPECT_EQ(batch_runs(0.3), 1);                  // truncated, as before the policy
}

// A 5 µs kernel: a probe, then five samples of the batch it sized — milliseconds, not a second.
TEST(TuningPolicy, CheapKernelsGetMillisecondsOfTiming) {
  FakeDevice dev;
  const CandidateTime t = time_one(dev, 0.005);
  EXPECT_FALSE(t.abandoned);
  EXPECT_EQ(t.calls, 2);  // the probe, then the batch it sized
  EXPECT_EQ(t.batch, batch_runs(0.005 + dev.overhead_ms));
  EXPECT_EQ(t.samples, kMinSamples);
  // The host overhead, spread over the batch, is in the time (the same for every candidate of the
  // layer, which takes the same batch).
  EXPECT_GE(t.ms, 0.005);
  EXPECT_LT(t.ms, 0.005 * 1.15);
  EXPECT_LT(dev.timed_seconds, 2e-3);
  EXPECT_LE(t.runs, 1 + kMinSamples * t.batch);
  // With the layer's best's batch, no probe: one set-up, the same time.
  FakeDevice dev2;
  const CandidateTime u = time_one(dev2, 0.005, kInf, t.batch);
  EXPECT_EQ(u.calls, 1);
  EXPECT_EQ(dev2.calls, 1);
  EXPECT_DOUBLE_EQ(u.ms, t.ms);
}

// The cost follows the kernel's time: 1 ms of kernel gets about ten times the timing of 0.1 ms.
TEST(TuningPolicy, TimingGrowsWithTheKernelUpToTheCap) {
  FakeDevice a, b, c;
  const CandidateTime fast = time_one(a, 0.1), mid = time_one(b, 1.0), slow = time_one(c, 100.0);
  EXPECT_EQ(fast.samples, kMinSamples);
  EXPECT_EQ(mid.samples, kMinSamples);
  EXPECT_LT(a.timed_seconds, b.timed_seconds);
  EXPECT_LT(b.timed_seconds, 0.01);
  // 100 ms per run: the probe counts as the first sample (one set-up), and the hard cap stops it at
  // kFewestSamples samples.
  EXPECT_EQ(slow.calls, 1);
  EXPECT_EQ(slow.samples, kFewestSamples);
  EXPECT_EQ(slow.runs, kFewestSamples);
  EXPECT_LE(slow.seconds, kCandidateSeconds + 0.1 + 1e-9);  // the cap, overshot by at most one sample
  EXPECT_NEAR(slow.ms, 100.0, 0.1);
}

// Samples that keep moving the median get more of them, never more than kMaxSamples; the median is
// what is kept.
TEST(TuningPolicy, NoisySamplesAreCappedAndTheMedianKept) {
  FakeDevice dev;
  dev.overhead_ms = 0;
  const double pattern[] = {1.0, 1.6, 0.7, 1.9, 0.6, 1.8, 0.5, 2.0, 0.4, 2.1, 0.3, 2.2};
  dev.noise = [&](int i) { return pattern[i % 12]; };
  const CandidateTime t = time_one(dev, 1.0);
  EXPECT_GT(t.samples, kMinSamples);
  EXPECT_LE(t.samples, kMaxSamples);
  // The probe (1.0) and the samples after it, sorted: their upper median.
  std::vector<double> got(pattern, pattern + t.samples);
  std::sort(got.begin(), got.end());
  EXPECT_DOUBLE_EQ(t.ms, got[got.size() / 2]);
}

// A candidate twice as slow as the best is given up after kAbandonSamples samples; one a little
// slower is given up once its median can no longer beat the best; one a little faster is timed fully.
TEST(TuningPolicy, SlowerCandidatesAreAbandonedEarly) {
  FakeDevice dev;
  dev.overhead_ms = 0;
  const CandidateTime twice = time_one(dev, 0.020, 0.010, 50);
  EXPECT_TRUE(twice.abandoned);
  EXPECT_EQ(twice.samples, kAbandonSamples);
  EXPECT_EQ(twice.calls, 1);
  EXPECT_GT(twice.ms, 0.010);

  const CandidateTime little = time_one(dev, 0.0105, 0.010, 50);  // within kAbandonMargin
  EXPECT_TRUE(little.abandoned);
  EXPECT_EQ(little.samples, kMaxSamples / 2 + 1);  // then its median is certainly slower
  EXPECT_GT(little.ms, 0.010);

  const CandidateTime faster = time_one(dev, 0.0095, 0.010, 50);
  EXPECT_FALSE(faster.abandoned);
  EXPECT_EQ(faster.samples, kMinSamples);
  EXPECT_LT(faster.ms, 0.010);
}

// One noisy sample does not give up a candidate that is in fact the fastest.
TEST(TuningPolicy, OneSlowSampleDoesNotAbandon) {
  FakeDevice dev;
  dev.overhead_ms = 0;
  dev.noise = [](int i) { return i == 0 ? 1.5 : 1.0; };
  const CandidateTime t = time_one(dev, 0.009, 0.010, 50);
  EXPECT_FALSE(t.abandoned);
  EXPECT_LT(t.ms, 0.010);
}

// A kernel whose per-run time keeps falling as batches grow (nearly all host overhead) is set up at
// most kMaxSetUps times; the last batch's samples are its time.
TEST(TuningPolicy, SetUpsAreCapped) {
  FakeDevice dev;
  dev.overhead_ms = 0.1;
  const CandidateTime t = time_one(dev, 0.0001);
  EXPECT_EQ(t.calls, kMaxSetUps);
  EXPECT_EQ(dev.calls, t.calls);
  EXPECT_EQ(t.samples, kMinSamples);
}
// A candidate much faster than the batch it was given is sized again; one a little faster is not.
TEST(TuningPolicy, MuchFasterCandidatesAreSizedAgain) {
  FakeDevice dev;
  dev.overhead_ms = 0;
  const CandidateTime much = time_one(dev, 0.002, 0.010, 50);  // 0.1 ms samples: under a quarter
  EXPECT_EQ(much.calls, 2);
  EXPECT_EQ(much.batch, kMaxBatchRuns);
  EXPECT_FALSE(much.abandoned);
  const CandidateTime little = time_one(dev, 0.006, 0.010, 50);
  EXPECT_EQ(little.calls, 1);
  EXPECT_EQ(little.batch, 50);
}

// The layer's time running out ends the sampling; the samples so far make the time.
TEST(TuningPolicy, TheLayerLimitEndsSampling) {
  FakeDevice dev;
  CandidateTime t;
  ASSERT_TRUE(time_candidate(dev.kernel(1.0), kInf, 1, [] { return true; }, &t).ok());
  EXPECT_EQ(t.samples, 1);
  EXPECT_NEAR(t.ms, 1.015, 1e-9);
  // Even when the only sample was the probe of a short kernel.
  CandidateTime p;
  ASSERT_TRUE(time_candidate(dev.kernel(0.005), kInf, 0, [] { return true; }, &p).ok());
  EXPECT_EQ(p.samples, 1);
  EXPECT_EQ(p.calls, 1);
  EXPECT_GT(p.ms, 0);
}

TEST(TuningPolicy, ErrorsFromTheDeviceAreReturned) {
  CandidateTime t;
  const RunSamples broken = [](int, const std::function<bool(double)>&) { return runtime_error("cannot be captured"); };
  const Status st = time_candidate(broken, kInf, 0, nullptr, &t);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "cannot be captured");
}

// The fastest usable candidate wins; the clearly slower ones after it are abandoned; wrong ones are
// recorded as not usable and never chosen.
TEST(TuningPolicy, TheFastestUsableCandidateIsChosen) {
  FakeDevice dev;
  dev.overhead_ms = 0;
  TimingCache cache;
  TuningSession session(cache, 2.0, 0, [&] { return dev.clock; });
  FakeLayer layer{dev, {{"a", 0.050}, {"b", 0.020}, {"c", 0.030}, {"d", 0.100}, {"e", 0.001}}, {{"e", "rejected (wrong)"}}};
  auto got = session.tune("conv#1", {"a", "b", "c", "d", "e"}, layer.runner());
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->from, LayerChoice::From::kTimed);
  EXPECT_EQ(got->tactic, "b");
  EXPECT_NEAR(got->ms, 0.020, 0.020 * 0.05);
  EXPECT_EQ(layer.references, 1);
  EXPECT_EQ(layer.checks, 5);
  EXPECT_EQ(session.stats().timed, 1);
  EXPECT_EQ(session.stats().candidates, 4);
  EXPECT_EQ(session.stats().abandoned, 2);  // c and d, slower than b from their first samples
  EXPECT_NE(got->report.find("c "), std::string::npos);
  EXPECT_NE(got->report.find("abandoned"), std::string::npos);
  EXPECT_NE(got->report.find("e rejected (wrong)"), std::string::npos);
  // Every candidate is recorded: the abandoned ones slower than the choice, the wrong one unusable.
  ASSERT_EQ(cache.layers.at("conv#1").size(), 5u);
  EXPECT_TRUE(std::isinf(cache.layers.at("conv#1").at("e")));
  for (const char* c : {"a", "c", "d"}) EXPECT_GT(cache.layers.at("conv#1").at(c), got->ms) << c;
  // A whole layer of cheap candidates costs milliseconds of device time, set-ups excluded.
  EXPECT_LT(dev.timed_seconds, 0.02);
}

TEST(TuningPolicy, NoUsableCandidateLeavesTheKernelsOwnChoice) {
  FakeDevice dev;
  TimingCache cache;
  TuningSession session(cache, 2.0, 0, [&] { return dev.clock; });
  FakeLayer layer{dev, {{"a", 0.05}, {"b", 0.02}}, {{"a", "failed (x)"}, {"b", "rejected (y)"}}};
  auto got = session.tune("k", {"a", "b"}, layer.runner());
  ASSERT_TRUE(got.ok());
  EXPECT_TRUE(got->tactic.empty());
  EXPECT_EQ(layer.timings, 0);
  // Known now (both unusable): the next identical layer does not run them again.
  auto again = session.tune("k", {"a", "b"}, layer.runner());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->tactic.empty());
  EXPECT_EQ(again->from, LayerChoice::From::kEarlierLayer);
  EXPECT_EQ(layer.checks, 2);
}

// Identical layers (one signature, elsewhere in the model or in another shape profile) are timed
// once per build; another signature is timed; a layer offering one more candidate times only that one.
TEST(TuningPolicy, RepeatedSignaturesAreNotRetimed) {
  FakeDevice dev;
  TimingCache cache;
  TuningSession session(cache, 2.0, 0, [&] { return dev.clock; });
  FakeLayer layer{dev, {{"a", 0.03}, {"b", 0.02}, {"c", 0.01}}, {}};
  auto first = session.tune("conv 3x3 #1", {"a", "b"}, layer.runner());
  ASSERT_TRUE(first.ok());
  const int calls = layer.device_calls(), device_calls = dev.calls;
  EXPECT_GT(calls, 0);
  for (int i = 0; i < 3; ++i) {
    auto same = session.tune("conv 3x3 #1", {"a", "b"}, layer.runner());
    ASSERT_TRUE(same.ok());
    EXPECT_EQ(same->from, LayerChoice::From::kEarlierLayer);
    EXPECT_EQ(same->tactic, first->tactic);
    EXPECT_DOUBLE_EQ(same->ms, first->ms);
  }
  EXPECT_EQ(layer.device_calls(), calls);  // not one run more
  EXPECT_EQ(dev.calls, device_calls);
  EXPECT_EQ(session.stats().timed, 1);
  EXPECT_EQ(session.stats().reused, 3);

  auto other = session.tune("conv 3x3 #2", {"a", "b"}, layer.runner());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->from, LayerChoice::From::kTimed);
  EXPECT_EQ(session.stats().timed, 2);

  const int checks = layer.checks;
  auto more = session.tune("conv 3x3 #1", {"a", "b", "c"}, layer.runner());
  ASSERT_TRUE(more.ok());
  EXPECT_EQ(layer.checks, checks + 1);  // c only; a and b from the first layer's times
  EXPECT_EQ(more->tactic, "c");
  EXPECT_EQ(session.stats().timed, 3);
}

// Layers an earlier build measured come from the timing cache and count as such, not as reused.
TEST(TuningPolicy, TheTimingCacheIsNotRetimedEither) {
  FakeDevice dev;
  TimingCache cache;
  cache.record("gemm #9", "x", 0.5);
  cache.record("gemm #9", "y", 0.25);
  TuningSession session(cache, 2.0, 0, [&] { return dev.clock; });
  FakeLayer layer{dev, {{"x", 0.5}, {"y", 0.25}}, {}};
  auto got = session.tune("gemm #9", {"x", "y"}, layer.runner());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->from, LayerChoice::From::kTimingCache);
  EXPECT_EQ(got->tactic, "y");
  EXPECT_EQ(layer.device_calls(), 0);
  EXPECT_EQ(session.stats().cached, 1);
  EXPECT_EQ(session.stats().reused, 0);
  // known() alone counts nothing; count() does.
  ASSERT_TRUE(session.known("gemm #9", {"x", "y"}).has_value());
  EXPECT_FALSE(session.known("gemm #9", {"x", "y", "z"}).has_value());
  EXPECT_EQ(session.stats().cached, 1);
}

// Candidates the layer's time limit leaves untried are said, counted and not recorded (the next
// build measures them); the limit starts after the reference run.
TEST(TuningPolicy, TheLayerLimitLeavesCandidatesUntried) {
  FakeDevice dev;
  dev.setup_seconds = 0.4;
  TimingCache cache;
  TuningSession session(cache, 1.0, 0, [&] { return dev.clock; });
  FakeLayer layer{dev, {{"a", 0.01}, {"b", 0.01}, {"c", 0.01}, {"d", 0.01}}, {}};
  LayerRunner runner = layer.runner();
  runner.reference = [&] {
    dev.clock += 5.0;  // a library plan built at first use: not the search's time
    return Status::Ok();
  };
  auto got = session.tune("slow set-up", {"a", "b", "c", "d"}, runner);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->tactic.empty());
  EXPECT_GE(session.stats().skipped, 1);
  EXPECT_LT(session.stats().skipped, 4);
  EXPECT_NE(got->report.find("skipped (layer time limit)"), std::string::npos);
  EXPECT_EQ(cache.layers.at("slow set-up").size(), static_cast<size_t>(4 - session.stats().skipped));
}

// The build's tuning budget: layers reached after it is spent keep their kernels' own choices (said,
// counted, nothing run, nothing recorded), a search under way stops at it, and layers already known
// (the timing cache, an identical layer) still take their measured choice.
TEST(TuningPolicy, TheBuildBudgetLeavesLaterLayersToTheirKernels) {
  FakeDevice dev;
  dev.setup_seconds = 0.3;
  TimingCache cache;
  TuningSession session(cache, 2.0, /*budget_seconds=*/1.0, [&] { return dev.clock; });
  FakeLayer layer{dev, {{"a", 0.02}, {"b", 0.01}}, {}};
  auto first = session.tune("conv #1", {"a", "b"}, layer.runner());  // ~0.6 s of set-ups: within the budget
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->tactic, "b");
  dev.clock += 1.0;  // the rest of the build's tuning spends the budget
  const int calls = layer.device_calls();
  auto late = session.tune("conv #2", {"a", "b"}, layer.runner());
  ASSERT_TRUE(late.ok());
  EXPECT_TRUE(late->tactic.empty());  // the kernel's own choice
  EXPECT_EQ(layer.device_calls(), calls);
  EXPECT_EQ(layer.references, 1);
  EXPECT_NE(late->report.find("skipped (tuning budget spent)"), std::string::npos);
  EXPECT_EQ(cache.layers.count("conv #2"), 0u);  // the next build (with the cache) measures it
  EXPECT_EQ(session.stats().over_budget, 1);
  auto known = session.tune("conv #1", {"a", "b"}, layer.runner());  // an identical layer: free
  ASSERT_TRUE(known.ok());
  EXPECT_EQ(known->tactic, "b");
  EXPECT_EQ(known->from, LayerChoice::From::kEarlierLayer);
}

// A search under way ends at the budget as at its layer's limit.
TEST(TuningPolicy, TheBudgetEndsASearchUnderWay) {
  FakeDevice dev;
  dev.setup_seconds = 0.4;
  TimingCache cache;
  TuningSession session(cache, 10.0, /*budget_seconds=*/1.0, [&] { return dev.clock; });
  FakeLayer layer{dev, {{"a", 0.01}, {"b", 0.01}, {"c", 0.01}, {"d", 0.01}, {"e", 0.01}}, {}};
  auto got = session.tune("k", {"a", "b", "c", "d", "e"}, layer.runner());
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->tactic.empty());
  EXPECT_GE(session.stats().skipped, 1);
  EXPECT_LT(dev.clock, 2.0);
}
