// util/log.h — kiln's one leveled logger. Passes, the planner, the tuner and the runtime log their
// decisions here; kernels never log. Messages at or above the level go to the sink (stderr by
// default, "kiln: " prefixed). The level starts from KILN_LOG_LEVEL (error, warning, info, verbose;
// default warning); build options with `verbose` raise it to verbose for their build.
#pragma once

#include <functional>
#include <string>

namespace kiln {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kVerbose = 3 };

LogLevel log_level();
void set_log_level(LogLevel level);
// Replaces where messages go (null: back to stderr). Called with the level and the message.
void set_log_sink(std::function<void(LogLevel, const std::string&)> sink);
bool log_enabled(LogLevel level);
void log(LogLevel level, const std::string& message);

// Raises the level to at least `level` for its lifetime (a verbose build), then restores it.
class ScopedLogLevel {
 public:
  explicit ScopedLogLevel(LogLevel level);
  ~ScopedLogLevel();
  ScopedLogLevel(const ScopedLogLevel&) = delete;
  ScopedLogLevel& operator=(const ScopedLogLevel&) = delete;

 private:
  LogLevel saved_;
};

}  // namespace kiln
