// runtime/shape_profiles.cpp — shape profiles: checking them at build and load, choosing one per run.
#include <string>
#include <vector>

#include "runtime/engine_impl.h"

namespace kiln {

namespace {

std::string dims_string(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
  return s + "]";
}

std::string range_string(const ShapeProfile& p, const std::string& name) {
  return dims_string(p.min.at(name)) + ".." + dims_string(p.max.at(name));
}

}  // namespace

Status validate_profiles(const ir::Graph& g, const std::vector<ShapeProfile>& profiles) {
  if (profiles.size() > kMaxProfiles) return invalid_argument("at most " + std::to_string(kMaxProfiles) + " shape profiles");
  for (size_t pi = 0; pi < profiles.size(); ++pi) {
    const ShapeProfile& p = profiles[pi];
    const std::string where = "shape profile " + std::to_string(pi);
    if (p.opt.empty()) return invalid_argument(where + " names no input");
    if (p.min.size() != p.opt.size() || p.max.size() != p.opt.size())
      return invalid_argument(where + ": every input needs min, opt and max shapes");
    for (const auto& [name, opt] : p.opt) {
      const ir::Value* in = nullptr;
      for (const ir::Value* v : g.inputs)
        if (v->name == name) in = v;
      if (!in) {
        std::string names;
        for (const ir::Value* v : g.inputs)
          if (!v->constant) names += (names.empty() ? "" : ", ") + v->name;
        return invalid_argument(where + " names '" + name + "', which is not an input of the model (its inputs: " + names + ")");
      }
      const auto mi = p.min.find(name), ma = p.max.find(name);
      if (mi == p.min.end() || ma == p.max.end())
        return invalid_argument(where + ": input '" + name + "' needs min, opt and max shapes");
      const std::vector<int64_t>& lo = mi->second;
      const std::vector<int64_t>& hi = ma->second;
      if (lo.size() != opt.size() || hi.size() != opt.size())
        return invalid_argument(where + ": input '" + name + "': min, opt and max differ in rank");
      const ir::Type& t = in->type;
      if (!t.is_tensor()) return invalid_argument(where + ": input '" + name + "' is not a tensor");
      if (t.shape.known && static_cast<size_t>(t.shape.rank()) != opt.size())
        return invalid_argument(where + ": input '" + name + "' has rank " + std::to_string(t.shape.rank()) + " (" +
                                t.shape.to_string() + "), the profile gives " + std::to_string(opt.size()) + " dims");
      for (size_t d = 0; d < opt.size(); ++d) {
        if (lo[d] < 0 || !(lo[d] <= opt[d] && opt[d] <= hi[d]))
          return invalid_argument(where + ": input '" + name + "' dimension " + std::to_string(d) + ": need 0 <= min <= opt <= max, got " +
                                  std::to_string(lo[d]) + ", " + std::to_string(opt[d]) + ", " + std::to_string(hi[d]));
        if (t.shape.known && t.shape.dims[d].is_static() && (lo[d] != t.shape.dims[d].value || hi[d] != t.shape.dims[d].value))
          return invalid_argument(where + ": input '" + name + "' dimension " + std::to_string(d) + " is fixed at " +
                                  std::to_string(t.shape.dims[d].value) + " by the model, the profile gives " +
                                  std::to_string(lo[d]) + ".." + std::to_string(hi[d]));
      }
    }
  }
  return Status::Ok();
}

Expected<int> choose_profile(const ir::Graph& g, const std::vector<ShapeProfile>& profiles, Slot* const* inputs) {
  if (profiles.empty()) return 0;
  for (size_t pi = 0; pi < profiles.size(); ++pi) {
    bool fits = true;
    for (size_t i = 0; fits && i < g.inputs.size(); ++i) {
      const auto it = profiles[pi].min.find(g.inputs[i]->name);
      if (it == profiles[pi].min.end()) continue;
      const Slot* s = inputs[i];
      if (!s || s->kind != Slot::Kind::kTensor) continue;
      const Shape& shape = s->tensor.shape();
      const std::vector<int64_t>& lo = it->second;
      const std::vector<int64_t>& hi = profiles[pi].max.at(g.inputs[i]->name);
      if (shape.size() != lo.size()) {
        fits = false;
        break;
      }
      for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] < lo[d] || shape[d] > hi[d]) fits = false;
    }
    if (fits) return static_cast<int>(pi);
  }
  // Name the first input that no profile holds.
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    const Slot* s = inputs[i];
    if (!s || s->kind != Slot::Kind::kTensor) continue;
    const std::string& name = g.inputs[i]->name;
    std::string ranges;
    bool named = false, held = false;
    for (size_t pi = 0; pi < profiles.size(); ++pi) {
      if (!profiles[pi].min.count(name)) continue;
      named = true;
      ranges += (ranges.empty() ? "" : ", ") + std::string("profile ") + std::to_string(pi) + ": " + range_string(profiles[pi], name);
      const std::vector<int64_t>& lo = profiles[pi].min.at(name);
      const std::vector<int64_t>& hi = profiles[pi].max.at(name);
      const Shape& shape = s->tensor.shape();
      bool in = shape.size() == lo.size();
      for (size_t d = 0; in && d < shape.size(); ++d) in = shape[d] >= lo[d] && shape[d] <= hi[d];
      held = held || in;
    }
    if (named && !held)
      return invalid_argument("input '" + name + "' has shape " + shape_to_string(s->tensor.shape()) +
                              ", outside every shape profile of this engine (" + ranges + "); rebuild with a profile that covers it");
  }
  return invalid_argument("the input shapes fit no single shape profile of this engine (each input fits some profile, "
                          "but not the same one); rebuild with a profile that covers them together");
}

}  // namespace kiln
