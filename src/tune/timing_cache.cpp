// tune/timing_cache.cpp — reading, writing and merging timing caches (timing_cache.h).
#include "tune/timing_cache.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "kiln/kiln.h"
#include "util/atomic_file.h"
#include "util/checksum.h"

namespace kiln {

namespace {

constexpr const char* kHeader = "kiln-timing-cache 1";
constexpr size_t kMaxBytes = size_t{64} << 20;  // a cache of a million layers is still far below this
constexpr size_t kMaxField = 4096;

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Keys and tactic names are written between tabs: no tab or line break may be part of them.
bool clean_field(const std::string& s) {
  if (s.empty() || s.size() > kMaxField) return false;
  for (char c : s)
    if (c == '\t' || c == '\n' || c == '\r') return false;
  return true;
}

}  // namespace

void TimingCache::record(const std::string& layer, const std::string& tactic, double ms) {
  if (!clean_field(layer) || !clean_field(tactic) || std::isnan(ms) || ms < 0) return;
  auto [it, fresh] = layers[layer].emplace(tactic, ms);
  if (!fresh && ms < it->second) it->second = ms;
}

void TimingCache::merge(const TimingCache& other) {
  for (const auto& [layer, tactics] : other.layers)
    for (const auto& [tactic, ms] : tactics) record(layer, tactic, ms);
}

size_t TimingCache::entries() const {
  size_t n = 0;
  for (const auto& [layer, tactics] : layers) n += tactics.size();
  return n;
}

Expected<TimingCache> TimingCache::read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return not_found("cannot open timing cache '" + path + "'");
  f.seekg(0, std::ios::end);
  const auto size = f.tellg();
  if (size < 0 || static_cast<size_t>(size) > kMaxBytes)
    return invalid_model("timing cache '" + path + "' is larger than " + std::to_string(kMaxBytes >> 20) + " MiB");
  f.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  f.read(text.data(), size);
  auto bad = [&](const std::string& why) { return invalid_model("timing cache '" + path + "' is damaged: " + why); };
  const size_t end_at = text.rfind("\nend ");
  if (end_at == std::string::npos) return bad("no closing checksum line (truncated?)");
  const std::string body = text.substr(0, end_at + 1);
  std::string tail = text.substr(end_at + 5);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
  if (tail != hex64(checksum64(body.data(), body.size()))) return bad("checksum mismatch (edited or damaged)");
  std::istringstream in(body);
  std::string line;
  if (!std::getline(in, line) || line != kHeader) return bad("not a kiln timing cache (header)");
  if (!std::getline(in, line) || line.rfind("device ", 0) != 0) return bad("no device line");
  TimingCache c;
  c.device = line.substr(7);
  while (std::getline(in, line)) {
    const size_t a = line.find('\t'), b = a == std::string::npos ? a : line.find('\t', a + 1);
    if (b == std::string::npos) return bad("a line without layer, tactic and time");
    const std::string layer = line.substr(0, a), tactic = line.substr(a + 1, b - a - 1), t = line.substr(b + 1);
    char* endp = nullptr;
    const double ms = std::strtod(t.c_str(), &endp);
    if (!clean_field(layer) || !clean_field(tactic) || t.empty() || *endp != '\0' || std::isnan(ms) || ms < 0)
      return bad("a malformed entry");
    c.record(layer, tactic, ms);
  }
  return c;
}

Status TimingCache::write(const std::string& path) const {
  std::string body = std::string(kHeader) + "\ndevice " + device + "\n";
  char buf[64];
  for (const auto& [layer, tactics] : layers)
    for (const auto& [tactic, ms] : tactics) {
      if (std::isinf(ms)) std::snprintf(buf, sizeof buf, "inf");  // a candidate that was not usable
      else std::snprintf(buf, sizeof buf, "%.6g", ms);
      body += layer + "\t" + tactic + "\t" + buf + "\n";
    }
  body += "end " + hex64(checksum64(body.data(), body.size())) + "\n";
  // Written whole to a temporary file created exclusively beside it and renamed: a reader never
  // sees half a cache, and a symlink planted at the temporary name is never written through.
  return write_file_atomically(path, body, "timing cache");
}

Status merge_timing_caches(const std::vector<std::string>& inputs, const std::string& out) {
  if (inputs.empty()) return invalid_argument("no timing caches to merge");
  TimingCache merged;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(TimingCache c, TimingCache::read(inputs[i]));
    if (i == 0) merged.device = c.device;
    else if (c.device != merged.device)
      return invalid_argument("timing caches of different devices or kiln versions cannot be merged: '" + inputs[0] + "' is for '" +
                              merged.device + "', '" + inputs[i] + "' for '" + c.device + "'");
    merged.merge(c);
  }
  return merged.write(out);
}

Expected<std::string> describe_timing_cache(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(TimingCache c, TimingCache::read(path));
  return "device: " + c.device + "\nlayers: " + std::to_string(c.layers.size()) + "\nmeasurements: " + std::to_string(c.entries()) +
         "\n";
}

}  // namespace kiln
