#include "util/log.h"

#include "kiln/kiln.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace kiln {
namespace {

LogLevel initial_level() {
  const char* v = std::getenv("KILN_LOG_LEVEL");
  if (!v) return LogLevel::kWarning;
  if (!std::strcmp(v, "error")) return LogLevel::kError;
  if (!std::strcmp(v, "info")) return LogLevel::kInfo;
  if (!std::strcmp(v, "verbose")) return LogLevel::kVerbose;
  return LogLevel::kWarning;
}

std::atomic<int> g_level{static_cast<int>(initial_level())};
std::mutex g_mu;
std::function<void(LogLevel, const std::string&)> g_sink;

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }
void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
bool log_enabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(); }

void set_log_sink(std::function<void(LogLevel, const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_sink = std::move(sink);
}

void log(LogLevel level, const std::string& message) {
  if (!log_enabled(level)) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_sink) {
    g_sink(level, message);
    return;
  }
  std::fprintf(stderr, "kiln: %s\n", message.c_str());
}

void set_logger_severity(int severity) {
  // ONNX Runtime's numbering: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal (kiln has no fatal level).
  set_log_level(severity <= 0 ? LogLevel::kVerbose : severity == 1 ? LogLevel::kInfo : severity == 2 ? LogLevel::kWarning
                                                                                                      : LogLevel::kError);
}

ScopedLogLevel::ScopedLogLevel(LogLevel level) : saved_(log_level()) {
  if (static_cast<int>(level) > static_cast<int>(saved_)) set_log_level(level);
}
ScopedLogLevel::~ScopedLogLevel() { set_log_level(saved_); }

}  // namespace kiln
