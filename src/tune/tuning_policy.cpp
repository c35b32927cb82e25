// tune/tuning_policy.cpp — the tuner's timing policy and layer search (tune/tuning_policy.h says what
// and why; the numbers are there).
#include "tune/tuning_policy.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

namespace kiln::tuning {

namespace {

// A candidate that failed or computed another result: recorded so that a build with a warm cache
// needs no run, never chosen. One the layer's time limit left untried is not recorded: a later build
// with the cache measures it (and takes the others' times from the cache), so repeated builds
// complete the search instead of fixing "untried" as "unusable".
constexpr double kNotUsable = std::numeric_limits<double>::infinity();

// The upper median, as the tuner has always taken it.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Whether `kept` (ms per run, in order) settles the candidate's time: abandoned (slower than
// `best_ms`, see the header) or enough samples.
bool enough(const std::vector<double>& kept, double best_ms, double seconds, bool* abandoned) {
  const size_t n = kept.size();
  if (std::isfinite(best_ms)) {
    const bool clearly_slower = std::all_of(kept.begin(), kept.end(), [&](double ms) { return ms > best_ms * (1 + kAbandonMargin); });
    const size_t slower = static_cast<size_t>(std::count_if(kept.begin(), kept.end(), [&](double ms) { return ms > best_ms; }));
    if ((n == static_cast<size_t>(kAbandonSamples) && clearly_slower) || slower > static_cast<size_t>(kMaxSamples / 2)) {
      *abandoned = true;
      return true;
    }
  }
  if (n >= static_cast<size_t>(kMaxSamples)) return true;
  if (n >= static_cast<size_t>(kFewestSamples) && seconds >= kCandidateSeconds) return true;
  if (n < static_cast<size_t>(kMinSamples)) return false;
  const double now = median(kept), before = median(std::vector<double>(kept.begin(), kept.end() - 1));
  return std::fabs(now - before) <= kNoiseMargin * now;
}

}  // namespace

int batch_runs(double ms_per_run) {
  return static_cast<int>(std::clamp(kSampleSeconds * 1e3 / std::max(ms_per_run, 1e-6), 1.0, static_cast<double>(kMaxBatchRuns)));
}

Status time_candidate(const RunSamples& run, double best_ms, int batch, const std::function<bool()>& stop,
                      CandidateTime* out) {
  CandidateTime r;
  auto over = [&] { return stop && stop(); };
  std::vector<double> kept;  // samples of a batch of the right size
  double sizing = 0;         // the last sample that only sized a batch (the probe), kept should time run out
  bool probe = batch <= 0;
  int runs = probe ? 1 : batch;
  for (;;) {
    ++r.calls;
    const int now_runs = runs;
    bool first = true, resize = false;
    auto more = [&](double ms) {
      r.runs += now_runs;
      r.seconds += ms * now_runs * 1e-3;
      // The probe of a kernel shorter than a sample, or a batch whose sample was much shorter than
      // kSampleSeconds (a candidate much faster than the one that sized it): its samples would weigh
      // the host's overhead, so it only sizes the next batch.
      const int want = batch_runs(ms);
      const bool too_short = probe ? want >= 2 : want > now_runs && ms * now_runs < kResizeBelow * kSampleSeconds * 1e3;
      if (first && r.calls < kMaxSetUps && too_short) {
        sizing = ms;
        runs = want;
        resize = true;
        return false;
      }
      first = false;
      kept.push_back(ms);
      return !enough(kept, best_ms, r.seconds, &r.abandoned) && !over();
    };
    KILN_RETURN_IF_ERROR(run(now_runs, more));
    r.batch = now_runs;
    probe = false;
    if (!resize || over()) break;
  }
  if (kept.empty() && sizing > 0) kept.push_back(sizing);  // time ran out before a right-sized batch
  r.ms = median(kept);
  r.samples = static_cast<int>(kept.size());
  *out = r;
  return Status::Ok();
}

std::string ms_text(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f ms", ms);
  return buf;
}

TuningSession::TuningSession(TimingCache& cache, double layer_seconds, double budget_seconds, std::function<double()> now)
    : cache_(cache), layer_seconds_(layer_seconds), now_(std::move(now)) {
  if (!now_)
    now_ = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  budget_end_ = budget_seconds > 0 ? now_() + budget_seconds : std::numeric_limits<double>::infinity();
}

std::optional<LayerChoice> TuningSession::known(const std::string& key, const std::vector<std::string>& cands) const {
  const auto it = cache_.layers.find(key);
  if (it == cache_.layers.end() ||
      !std::all_of(cands.begin(), cands.end(), [&](const std::string& c) { return it->second.count(c) != 0; }))
    return std::nullopt;
  LayerChoice r;
  r.from = timed_.count(key) ? LayerChoice::From::kEarlierLayer : LayerChoice::From::kTimingCache;
  for (const std::string& c : cands) {
    const double ms = it->second.at(c);
    if (std::isfinite(ms) && (r.tactic.empty() || ms < r.ms)) {
      r.tactic = c;
      r.ms = ms;
    }
  }
  return r;
}

void TuningSession::count(const LayerChoice& c) {
  if (c.from == LayerChoice::From::kEarlierLayer) ++stats_.reused;
  if (c.from == LayerChoice::From::kTimingCache) ++stats_.cached;
}

Expected<LayerChoice> TuningSession::tune(const std::string& key, const std::vector<std::string>& cands, const LayerRunner& runner) {
  if (std::optional<LayerChoice> k = known(key, cands)) {
    count(*k);
    return *k;
  }
  LayerChoice r;
  double best_ms = std::numeric_limits<double>::infinity();
  // A candidate not used: said in the report, and recorded so a warm cache needs no run.
  auto reject = [&](const std::string& c, const std::string& why) {
    r.report += " " + c + " " + why + ";";
    cache_.record(key, c, kNotUsable);
  };
  // A candidate's time: said in the report; the fastest so far is the choice.
  auto timed = [&](const std::string& c, double ms, const char* from) {
    r.report += " " + c + " " + ms_text(ms) + from + ";";
    if (r.tactic.empty() || ms < best_ms) {
      r.tactic = c;
      best_ms = ms;
    }
  };
  // What an earlier build (or layer) measured for this one, when it lacks some candidates; copied, as
  // this loop records into the same map.
  std::map<std::string, double> known_ms;
  if (auto it = cache_.layers.find(key); it != cache_.layers.end()) known_ms = it->second;
  bool ran = false, spent = false;
  double deadline = 0;
  int batch = 0;  // runs per sample of the best timed here (0: the next candidate probes)
  for (const std::string& c : cands) {
    if (known_ms.count(c)) {
      if (std::isfinite(known_ms.at(c))) timed(c, known_ms.at(c), " (timing cache)");
      else r.report += " " + c + " not usable (timing cache);";
      continue;
    }
    if (!ran && now_() > budget_end_) {  // the build's tuning budget is spent: nothing more is run
      r.report += " " + c + " skipped (tuning budget spent);";
      spent = true;
      continue;
    }
    if (!ran) {
      KILN_RETURN_IF_ERROR(runner.reference());
      ran = true;
      deadline = std::min(now_() + layer_seconds_, budget_end_);
    }
    if (now_() > deadline) {
      r.report += " " + c + " skipped (layer time limit);";
      ++stats_.skipped;
      continue;
    }
    KILN_ASSIGN_OR_RETURN(std::string why, runner.check(c));
    if (!why.empty()) {
      reject(c, why);
      continue;
    }
    CandidateTime t;
    const RunSamples run = [&](int runs, const std::function<bool(double)>& more) { return runner.run(c, runs, more); };
    Status st = time_candidate(run, best_ms, batch, [&] { return now_() > deadline; }, &t);
    if (st.ok() && t.samples == 0) st = runtime_error("no sample taken");
    if (!st.ok()) {
      reject(c, "failed while timed (" + st.message() + ")");
      continue;
    }
    ++stats_.candidates;
    cache_.record(key, c, t.ms);
    if (t.abandoned) {  // slower than the best: recorded, never chosen
      ++stats_.abandoned;
      r.report += " " + c + " " + ms_text(t.ms) + " (abandoned after " + std::to_string(t.samples) + " samples);";
      continue;
    }
    if (r.tactic.empty() || t.ms < best_ms) batch = t.batch;
    timed(c, t.ms, "");
  }
  if (!r.report.empty()) r.report.pop_back();
  r.ms = r.tactic.empty() ? 0 : best_ms;
  if (ran) {
    ++stats_.timed;
    timed_.insert(key);
  } else if (spent) {
    ++stats_.over_budget;
  }
  return r;
}

}  // namespace kiln::tuning
