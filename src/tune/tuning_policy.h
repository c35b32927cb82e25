// tune/tuning_policy.h — how long the tuner times a candidate, when it gives one up, and which
// layers a build does not time again (tune/tuning_policy.cpp). No device here: the tuner
// (tune/tuner.cpp) hands in callables that run a candidate, so the policy is tested with a fake clock
// (tests/unit/test_tuning_policy.cpp).
//
// One candidate: a set-up (on CUDA a captured graph of a batch of runs), one warm-up run, then timed
// samples, each a batch of runs lasting about kSampleSeconds, so the host clock's launch and
// synchronisation overhead stays small against it. The layer's first timed candidate sizes its batch
// from one timed run (the probe; a kernel of kSampleSeconds or more keeps batches of one run and the
// probe counts as its first sample); the others take the batch of the layer's best so far, so every
// candidate of a layer carries the same overhead per run, unless one's samples last under
// kResizeBelow of kSampleSeconds (it is that much faster): its batch is sized again (another set-up).
// Its time is the median of at least
// kMinSamples samples, more while the median still moves by more than kNoiseMargin, never more than
// kMaxSamples nor (past kFewestSamples) more than kCandidateSeconds of timed runs. So a 5 µs kernel
// costs a few milliseconds of timing and a 100 ms one three runs, not seconds.
//
// A candidate is abandoned when it cannot be the fastest: its first kAbandonSamples samples are all
// slower than the best by more than kAbandonMargin, or more than half of kMaxSamples samples are
// slower than the best (its median could no longer beat it). An abandoned candidate's time is the
// median of its samples so far; it is slower than the best, so it is never chosen.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kiln/status.h"
#include "tune/timing_cache.h"

namespace kiln::tuning {

// ---- The policy's numbers, all of them ----
// A timed sample lasts about this long: host-clock overhead around a sample (a graph launch and a
// device synchronisation, ~10-20 µs) is a few percent of it.
constexpr double kSampleSeconds = 0.5e-3;
// Runs per sample at most: a 2 µs kernel gets 0.2 ms samples rather than thousands of runs.
constexpr int kMaxBatchRuns = 100;
// A candidate's time is the median of at least this many samples (as before this policy: 5)...
constexpr int kMinSamples = 5;
// ...and of at most this many, taken while the median moves by more than kNoiseMargin.
constexpr int kMaxSamples = 9;
// Two timings of one kernel on an idle device differ by up to about this, relative: a median that
// moved less than this with the last sample is stable.
constexpr double kNoiseMargin = 0.02;
// Hard cap on a candidate's timed seconds, reached only by kernels of tens of milliseconds: past it,
// no new sample once kFewestSamples are in (a 100 ms kernel: three runs).
constexpr double kCandidateSeconds = 0.25;
constexpr int kFewestSamples = 3;
// A candidate whose first kAbandonSamples samples are all slower than the layer's best by more than
// kAbandonMargin (five times the noise) is given up: it is clearly not the fastest.
constexpr int kAbandonSamples = 2;
constexpr double kAbandonMargin = 0.10;
// A batch whose first sample lasted under this fraction of kSampleSeconds is sized again, and a
// candidate is set up at most kMaxSetUps times (the probe, the batch it sized, one sized again).
constexpr double kResizeBelow = 0.25;
constexpr int kMaxSetUps = 3;

// Runs of a candidate per sample for a kernel of `ms_per_run`: kSampleSeconds' worth, 1 to
// kMaxBatchRuns (truncated, as the tuner always sized its batches).
int batch_runs(double ms_per_run);

// Runs a candidate once set up: a warm-up run, then timed samples of `runs` runs each, calling
// `more(ms per run)` after each sample until it returns false (at most kMaxSamples + 1 samples).
// Each call is one set-up of the candidate, which can cost more than its runs (a library plan, a
// graph capture), so the policy makes one or two calls, rarely three.
using RunSamples = std::function<Status(int runs, const std::function<bool(double ms)>& more)>;

struct CandidateTime {
  double ms = 0;           // median ms per run (0 when no sample was taken)
  int samples = 0;         // samples in the median
  int batch = 0;           // runs per sample of those
  int calls = 0;           // set-ups (calls of the RunSamples)
  int runs = 0;            // timed runs, probe and discarded samples included
  double seconds = 0;      // timed seconds, the same runs
  bool abandoned = false;  // given up as slower than `best_ms`
};

// Times one candidate. `best_ms`: the layer's best so far (infinity: none yet, nothing is
// abandoned); `batch`: runs per sample, the best's (0: probe with one run and size it from that);
// `stop` (may be null): true when the layer's time is up, which ends the sampling (the samples so far
// make the time; the probe's when there are none). An error from `run` is returned as is.
Status time_candidate(const RunSamples& run, double best_ms, int batch, const std::function<bool()>& stop,
                      CandidateTime* out);

// What the tuner needs from the device to search one layer.
struct LayerRunner {
  // Runs the kernel's own choice, the reference the candidates must match; called once, before the
  // layer's first candidate runs. The layer's time limit starts after it (its first run may build a
  // library plan: the kernel's cost, not the search's).
  std::function<Status()> reference;
  // Runs `tactic` once: "" when its outputs match the reference's, else why not ("failed (...)",
  // "rejected (...)"); an error only for what stops the build.
  std::function<Expected<std::string>(const std::string& tactic)> check;
  // Times `tactic` (see RunSamples).
  std::function<Status(const std::string& tactic, int runs, const std::function<bool(double ms)>& more)> run;
};

// A layer's outcome.
struct LayerChoice {
  enum class From { kTimed, kEarlierLayer, kTimingCache };
  From from = From::kTimed;
  std::string tactic;  // the fastest usable candidate; "" when none is usable (the kernel's own choice)
  double ms = 0;
  std::string report;  // per candidate, for the log: " c 0.0123 ms; d rejected (...); ..."
};

// What a build's tuning did, for its summary line.
struct TuningStats {
  int timed = 0;      // layers whose candidates were run
  int reused = 0;     // layers with the signature of one timed earlier in this build (not timed)
  int cached = 0;     // layers whose candidates all came from the timing cache file
  int candidates = 0; // candidates timed
  int abandoned = 0;  // of those, given up early as slower than the best
  int skipped = 0;    // candidates left untried by a layer's time limit
  int over_budget = 0; // layers left to their kernels' own choices once the build's budget was spent
};

// One build's tuning: the layer search, and the memo of the layers it timed. Measurements go into
// `cache` (the timing cache file's contents, or an empty one), keyed by layer signature; a layer whose
// signature is in it with every candidate is not run again — whether an earlier build or an
// identical layer earlier in this build (elsewhere in the model, or in another shape profile) timed
// it. Not thread-safe.
class TuningSession {
 public:
  // `layer_seconds`: the time limit of one layer's search (BuildOptions::tune_layer_seconds);
  // `budget_seconds`: the whole build's (BuildOptions::tune_budget_seconds; 0: none), counted from
  // this session's creation: once spent, a layer not known (cache, earlier layer) keeps its kernel's
  // own choice, and a search under way stops as at its layer's limit. `now` (seconds, any origin)
  // defaults to the steady clock.
  TuningSession(TimingCache& cache, double layer_seconds, double budget_seconds = 0, std::function<double()> now = nullptr);

  // The layer's choice when `cache` holds every candidate, else nothing. Counts nothing.
  std::optional<LayerChoice> known(const std::string& key, const std::vector<std::string>& cands) const;
  // known(), else a search: candidates the cache lacks are checked and timed (the fastest by median
  // wins; the first wins a tie), each measurement recorded in `cache`. Counts the layer in stats().
  Expected<LayerChoice> tune(const std::string& key, const std::vector<std::string>& cands, const LayerRunner& runner);
  // Counts a choice made by known() outside tune() (the tuner's pass over the plan's shapes).
  void count(const LayerChoice& c);

  const TuningStats& stats() const { return stats_; }

 private:
  TimingCache& cache_;
  double layer_seconds_;
  std::function<double()> now_;
  double budget_end_;  // now_() past which nothing more is timed (infinity: no budget)
  std::set<std::string> timed_;  // signatures timed in this build
  TuningStats stats_;
};

// "0.0123 ms": how the tuner's log writes a time.
std::string ms_text(double ms);

}  // namespace kiln::tuning
