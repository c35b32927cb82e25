// tune/timing_cache.h — measured tactic times, kept across builds (BuildOptions::timing_cache).
//
// A text file: a header line, the device line (kiln version and the fingerprints of the devices that
// were timed), one line per (layer, tactic) with its time in milliseconds, and a closing line with a
// checksum of everything before it. A layer is keyed by its kernel, input dtypes and shapes, and a
// hash of its node's op, opset and attributes, so layers of other models with the same signature
// reuse the measurement.
#pragma once

#include <map>
#include <string>

#include "kiln/status.h"

namespace kiln {

struct TimingCache {
  std::string device;                                        // whose measurements these are
  // layer key → tactic → ms (infinity: the candidate failed or computed another result; never
  // chosen). A candidate the time limit left untried has no entry: the next build measures it.
  std::map<std::string, std::map<std::string, double>> layers;

  // Reads a cache file; kInvalidModel when it is damaged (bad header, line or checksum) or too large.
  static Expected<TimingCache> read(const std::string& path);
  Status write(const std::string& path) const;
  // Keeps the fastest time seen for (layer, tactic).
  void record(const std::string& layer, const std::string& tactic, double ms);
  void merge(const TimingCache& other);
  size_t entries() const;
};

}  // namespace kiln
