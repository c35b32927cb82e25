// util/guard.h — a barrier that turns exceptions escaping a stage into a Status, so that no input
// (a hostile model or engine file included) can abort a program that calls kiln.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "kiln/status.h"

namespace kiln {

// Runs fn() (returning Status or Expected<T>); std::bad_alloc becomes a runtime error and any other
// std::exception an internal error, each naming `what` (e.g. "building the engine").
template <typename Fn>
auto guarded(const std::string& what, Fn&& fn) -> decltype(fn()) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const std::bad_alloc&) {
    return runtime_error("out of memory while " + what);
  } catch (const std::exception& e) {
    return internal_error("unexpected error while " + what + ": " + e.what());
  }
}

}  // namespace kiln
