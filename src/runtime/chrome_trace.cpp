// runtime/chrome_trace.cpp — profiled runs (ExecutionContext::set_profiling) as a Chrome trace.
#include <nlohmann/json.hpp>

#include "kiln/kiln.h"

namespace kiln {

std::string profile_to_chrome_trace(const std::vector<ProfileEvent>& events, const std::string& process_name) {
  using nlohmann::json;
  json trace = json::array();
  // Names for the process and its two rows (runs, steps) in the viewer.
  trace.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", process_name}}}});
  trace.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "runs"}}}});
  trace.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 1}, {"args", {{"name", "steps"}}}});
  for (const ProfileEvent& e : events) {
    json args = {{"run", e.run}};
    if (e.step >= 0) {
      args["step"] = e.step;
      args["op_name"] = e.op;
      args["kernel"] = e.kernel;
      args["provider"] = e.device == "cuda" ? "CUDAExecutionProvider" : "CPUExecutionProvider";
      args["device"] = e.device;
      args["tactic"] = e.tactic;
      args["input_type_shape"] = e.inputs;
      args["output_type_shape"] = e.outputs;
      args["output_size"] = e.output_bytes;
    }
    // Names come from the model file: nlohmann writes invalid UTF-8 as U+FFFD rather than throwing.
    trace.push_back({{"name", e.name},
                     {"cat", e.step >= 0 ? "Node" : "Session"},
                     {"ph", "X"},
                     {"ts", e.start_us},
                     {"dur", e.dur_us},
                     {"pid", 1},
                     {"tid", e.step >= 0 ? 1 : 0},
                     {"args", std::move(args)}});
  }
  json out = {{"traceEvents", std::move(trace)}, {"displayTimeUnit", "ms"}};
  return out.dump(1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kiln
