// tools/conform.cpp — `kiln conform`: runs test folders laid out as onnx's backend node tests
// (model.onnx + test_data_set_N/input_K.pb, output_K.pb) through kiln on a device and compares every
// output, all in one process. This is how onnx's node suite runs on a GPU machine whose onnx wheel
// ships no test data and whose Python cannot load a module built elsewhere: carry the folders
// (a 2 MB .tar.xz) and the kiln command.
//
// Outcomes: "pass" (every output matches and every node ran on the requested device, or stayed on the
// host as an integer shape computation on host metadata, as the placement rule allows), "pass-fallback"
// (matches, but some nodes fell back to the CPU), "fail" (an output differs), "error" (build or run
// failed, or test data kiln cannot read, e.g. sequence inputs). Float outputs are compared as
// numpy.testing.assert_allclose does (|got - want| <= atol + rtol·|want|, NaN where NaN; float16 and
// bfloat16 too), other types exactly, as onnx's runner does (rtol 1e-3, atol 1e-7 by default).
#include "conform.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace {

struct Outcome {
  std::string status, message;
  // cpu_steps: nodes that fell back to the CPU; host_shape_steps: integer shape computations on host
  // metadata, which the placement rule keeps on the host in GPU engines too (not a fallback).
  int device_steps = 0, cpu_steps = 0, host_shape_steps = 0;
};

bool host_shape_reason(const std::string& why) { return why.rfind("integer shape computation", 0) == 0; }

// IEEE binary16 bits → value (subnormals, infinities and NaN included).
double half_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(mant, -24);
  else if (exp == 31) v = mant ? std::nan("") : INFINITY;
  else v = std::ldexp(1024 + mant, exp - 25);
  return sign ? -v : v;
}

double as_double(const kiln::Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case kiln::DataType::kFloat32: return t.data<float>()[i];
    case kiln::DataType::kFloat64: return t.data<double>()[i];
    case kiln::DataType::kFloat16: {
      uint16_t h;
      std::memcpy(&h, static_cast<const char*>(t.raw()) + 2 * i, 2);
      return half_value(h);
    }
    case kiln::DataType::kBFloat16: {
      uint16_t b;
      std::memcpy(&b, static_cast<const char*>(t.raw()) + 2 * i, 2);
      const uint32_t bits = uint32_t{b} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    default: return 0;
  }
}

// "" when `got` matches `want`, else what differs.
std::string compare(const kiln::Tensor& got, const kiln::Tensor& want, double rtol, double atol) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + kiln::dtype_name(got.dtype()) + ", expected " + kiln::dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return "shape " + kiln::shape_to_string(got.shape()) + ", expected " + kiln::shape_to_string(want.shape());
  const kiln::DataType dt = want.dtype();
  if (dt == kiln::DataType::kFloat32 || dt == kiln::DataType::kFloat64 || dt == kiln::DataType::kFloat16 ||
      dt == kiln::DataType::kBFloat16) {
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      const double g = as_double(got, i), w = as_double(want, i);
      if (std::isnan(w) || std::isnan(g)) {
        bad += std::isnan(w) != std::isnan(g);
        continue;
      }
      if (std::isinf(w) || std::isinf(g)) {
        bad += g != w;
        continue;
      }
      const double d = std::abs(g - w);
      if (d > atol + rtol * std::abs(w)) {
        ++bad;
        worst = std::max(worst, d);
      }
    }
    if (bad) return std::to_string(bad) + " of " + std::to_string(want.numel()) + " elements differ (max abs diff " +
                    std::to_string(worst) + ")";
    return "";
  }
  if (dt == kiln::DataType::kString) {
    for (int64_t i = 0; i < want.numel(); ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i]) return "string element " + std::to_string(i) + " differs";
    return "";
  }
  // Integers, bool and the 8-bit float types bit for bit.
  if (got.nbytes() != want.nbytes() || std::memcmp(got.raw(), want.raw(), want.nbytes()) != 0) return "values differ";
  return "";
}

void count_steps(const std::string& placement, const std::string& device, Outcome& o) {
  std::istringstream in(placement);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" -> ") == std::string::npos) continue;  // copies and the summary
    if (line.rfind("[" + device + "]", 0) == 0) ++o.device_steps;
    else if (line.rfind("[cpu]", 0) != 0) continue;
    else if (line.find("  [integer shape computation") != std::string::npos) ++o.host_shape_steps;
    else ++o.cpu_steps;
  }
}

// input_0.pb, input_1.pb, ... in numeric order.
std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) != 0 || e.path().extension() != ".pb") continue;
    try {
      found.push_back({std::stoi(n.substr(prefix.size())), e.path()});
    } catch (const std::exception&) {
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

// Placement only: "placed" when every node would run on the device, else "placed-fallback" (the ops
// that would not are added to `cpu_ops`), "error" when the model cannot be planned.
Outcome place_one(const fs::path& dir, const ConformOptions& o, std::map<std::string, int>& cpu_ops) {
  Outcome r;
  auto placed = kiln::Engine::plan_placement((dir / "model.onnx").string(), o.build);
  if (!placed.ok()) return {"error", "placement: " + placed.status().to_string()};
  std::set<std::string> ops;
  for (const auto& e : *placed) {
    if (e.device == "cpu" && o.build.device != kiln::DeviceType::kCPU && host_shape_reason(e.why)) {
      ++r.host_shape_steps;
    } else if (e.device == "cpu" && o.build.device != kiln::DeviceType::kCPU) {
      ++r.cpu_steps;
      ops.insert(e.op + (e.why.rfind("no CUDA kernel", 0) == 0 ? "" : " (" + e.why + ")"));
    } else if (e.device.empty()) {
      return {"error", "placement: " + e.op + ": " + e.why};
    } else {
      ++r.device_steps;
    }
  }
  for (const auto& op : ops) ++cpu_ops[op];
  r.status = r.cpu_steps ? "placed-fallback" : "placed";
  for (const auto& op : ops) r.message += (r.message.empty() ? "" : ", ") + op;
  return r;
}

Outcome run_one(const fs::path& dir, const ConformOptions& o) {
  Outcome r;
  auto engine = kiln::Engine::build((dir / "model.onnx").string(), o.build);
  if (!engine.ok()) return {"error", "build: " + engine.status().to_string()};
  const bool on_device = o.build.device != kiln::DeviceType::kCPU;
  count_steps((*engine)->placement_report(), on_device ? "cuda" : "cpu", r);
  if (!on_device) r.cpu_steps = r.host_shape_steps = 0;
  auto ctx = (*engine)->create_context();
  if (!ctx.ok()) return {"error", "context: " + ctx.status().to_string()};
  const auto& infos = (*engine)->inputs();
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {"error", "no test_data_set_* folder"};
  for (const fs::path& set : sets) {
    std::map<std::string, kiln::Value> feed;
    const auto inputs = numbered(set, "input_");
    for (size_t k = 0; k < inputs.size(); ++k) {
      std::string name;
      auto t = kiln::read_tensor_proto(inputs[k].string(), &name);
      if (!t.ok()) return {"error", set.filename().string() + ": " + t.status().to_string()};
      // By name when the file names a model input, else by position.
      bool known = false;
      for (const auto& ti : infos) known |= ti.name == name;
      if (!known) {
        if (k >= infos.size()) return {"error", "more inputs in the data than the model has"};
        name = infos[k].name;
      }
      feed[name] = kiln::Value::of(std::move(*t));
    }
    auto outs = (*ctx)->run(feed);
    if (!outs.ok()) return {"error", set.filename().string() + ": run: " + outs.status().to_string()};
    const auto expected = numbered(set, "output_");
    if (expected.size() > outs->size()) return {"error", "the model has fewer outputs than the data"};
    for (size_t k = 0; k < expected.size(); ++k) {
      auto want = kiln::read_tensor_proto(expected[k].string());
      if (!want.ok()) return {"error", set.filename().string() + ": " + want.status().to_string()};
      const kiln::Value& got = (*outs)[k];
      if (got.kind != kiln::Value::Kind::kTensor) return {"error", "output " + std::to_string(k) + " is not a tensor"};
      std::string why = compare(got.tensor, *want, o.rtol, o.atol);
      if (!why.empty()) {
        r.status = "fail";
        r.message = set.filename().string() + ": output " + std::to_string(k) + ": " + why;
        return r;
      }
    }
  }
  r.status = r.cpu_steps ? "pass-fallback" : "pass";
  return r;
}

}  // namespace

std::string format_placement(const std::vector<kiln::PlacementEntry>& placed) {
  std::ostringstream os;
  std::map<std::string, int> per_device;
  int host_shape = 0;
  for (const auto& e : placed) {
    const std::string dev = e.device.empty() ? "none" : e.device;
    ++per_device[dev];
    os << "[" << dev << "] " << e.node << " (" << e.op << ") -> " << (e.kernel.empty() ? "-" : e.kernel);
    if (!e.why.empty()) os << "  [" << e.why << "]";
    os << "\n";
    host_shape += host_shape_reason(e.why);
  }
  os << "steps:";
  for (const auto& [dev, n] : per_device) os << " " << n << " on " << dev << ";";
  if (host_shape) os << " " << host_shape << " of the cpu steps are integer shape computations on host values";
  os << "\n";
  return os.str();
}

namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out;
}

}  // namespace

int run_conform(const ConformOptions& o) {
  std::vector<fs::path> tests;
  for (const std::string& p : o.paths) {
    std::error_code ec;
    if (fs::exists(fs::path(p) / "model.onnx", ec)) {
      tests.push_back(p);
      continue;
    }
    if (!fs::is_directory(p, ec)) {
      std::fprintf(stderr, "kiln conform: %s is neither a test folder nor a folder of them\n", p.c_str());
      return 1;
    }
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_directory() && fs::exists(e.path() / "model.onnx", ec)) tests.push_back(e.path());
  }
  std::sort(tests.begin(), tests.end());
  std::regex filter(o.filter.empty() ? ".*" : o.filter);
  std::ofstream json;
  if (!o.json.empty()) {
    json.open(o.json);
    if (!json) {
      std::fprintf(stderr, "kiln conform: cannot write %s\n", o.json.c_str());
      return 1;
    }
  }
  std::map<std::string, int> counts, cpu_ops;
  const auto t0 = std::chrono::steady_clock::now();
  for (const fs::path& dir : tests) {
    const std::string name = dir.filename().string();
    if (!std::regex_search(name, filter)) continue;
    Outcome r;
    try {
      r = o.placement_only ? place_one(dir, o, cpu_ops) : run_one(dir, o);
    } catch (const std::exception& e) {
      r = {"error", std::string("exception: ") + e.what()};
    }
    ++counts[r.status];
    if (o.verbose || r.status == "fail" || r.status == "error")
      std::printf("%-60s %s%s%s\n", name.c_str(), r.status.c_str(), r.message.empty() ? "" : ": ", r.message.c_str());
    if (json)
      json << "{\"name\": \"" << json_escape(name) << "\", \"outcome\": \"" << r.status << "\", \"message\": \""
           << json_escape(r.message) << "\", \"device_steps\": " << r.device_steps << ", \"cpu_steps\": " << r.cpu_steps
           << ", \"host_shape_steps\": " << r.host_shape_steps << "}\n";
  }
  int total = 0;
  for (const auto& [k, n] : counts) total += n;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.placement_only) {
    std::vector<std::pair<int, std::string>> by_count;
    for (const auto& [op, n] : cpu_ops) by_count.push_back({-n, op});
    std::sort(by_count.begin(), by_count.end());
    if (!by_count.empty()) std::printf("ops that keep tests off the device (tests per op):\n");
    for (const auto& [n, op] : by_count) std::printf("  %4d  %s\n", -n, op.c_str());
    std::printf("%d tests in %.1f s: %d placed wholly on the device, %d with CPU steps, %d error\n", total, secs,
                counts["placed"], counts["placed-fallback"], counts["error"]);
    return counts["error"] ? 2 : 0;
  }
  std::printf("%d tests in %.1f s: %d pass, %d pass with CPU fallback, %d fail, %d error\n", total, secs, counts["pass"],
              counts["pass-fallback"], counts["fail"], counts["error"]);
  return counts["fail"] || counts["error"] ? 2 : 0;
}
