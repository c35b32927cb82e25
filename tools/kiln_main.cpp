// tools/kiln_main.cpp — the `kiln` command: info, build, run, bench, inspect.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
#include <cstring>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <iostream>
#include <new>
#include <map>
#include <memory>
#include <random>
#include <functional>
#include <set>
#include <system_error>
#include <thread>

#include <nlohmann/json.hpp>

#include "ir/float_types.h"  // header only: the library's float16/bfloat16 conversions
#include "kiln/kiln.h"
#include "conform.h"
#include "gpu_timer.h"
#include "util/file.h"

namespace {

int fail(const kiln::Status& st) {
  std::cerr << "kiln: error: " << st.to_string() << "\n";
  return 1;
}

std::string dims_string(const kiln::TensorInfo& t) {
  if (!t.rank_known) return "[*]";
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i)
    s += (i ? "," : "") + (t.shape[i] >= 0 ? std::to_string(t.shape[i]) : (t.dim_names[i].empty() ? "?" : t.dim_names[i]));
  return s + "]";
}

kiln::DeviceType parse_device(const std::string& d) {
  return d == "cuda" || d == "gpu" ? kiln::DeviceType::kCUDA : kiln::DeviceType::kCPU;
}

// The CLI's --precision values are checked by CLI11 against the same names (kiln::parse_precision).
kiln::Precision parse_precision(const std::string& p) {
  auto v = kiln::parse_precision(p);
  return v.ok() ? *v : kiln::Precision::kFloat32;
}

// The largest random input kiln invents: a model can declare an input of gigabytes (a [1, 2^30]
// float is 4 GiB), and a run that was not given one should not make it up (#48). The library itself
// runs a real input of any size the limits allow.
constexpr size_t kMaxRandomInputBytes = size_t{1} << 30;

// Random inputs for a model run without --input: dynamic dims become 1. Floats uniform in [-1, 1),
// integers 0 or 1 (safe as indices and sizes), bools either, strings short random words.
kiln::Expected<kiln::Tensor> random_input(const kiln::TensorInfo& info, std::mt19937& rng) {
  if (info.kind != "tensor" || !info.rank_known)
    return kiln::invalid_argument("input '" + info.name + "' needs --input (its type is " + info.type_string() + ")");
  kiln::Shape shape;
  for (int64_t d : info.shape) shape.push_back(d >= 0 ? d : 1);
  if (std::string why = kiln::check_tensor_size(info.dtype, shape); !why.empty())
    return kiln::invalid_argument("input '" + info.name + "': " + why + "; give it with --input name=file.npy");
  if (const size_t bytes = kiln::shape_nbytes(info.dtype, shape); bytes > kMaxRandomInputBytes)
    return kiln::invalid_argument("input '" + info.name + "' of shape " + kiln::shape_to_string(shape) + " (" +
                                  kiln::dtype_name(info.dtype) + ") needs " + std::to_string(bytes) +
                                  " bytes; kiln makes up random inputs of at most 1 GiB: give it with --input "
                                  "name=file.npy");
  kiln::Tensor t = kiln::Tensor::empty(info.dtype, shape);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int64_t n = t.numel();
  auto fill = [&](auto* p, auto gen) {
    for (int64_t i = 0; i < n; ++i) p[i] = gen();
  };
  auto bit = [&] { return static_cast<int>(rng() % 2); };
  switch (info.dtype) {
    case kiln::DataType::kFloat32: fill(t.data<float>(), [&] { return u(rng); }); break;
    case kiln::DataType::kFloat64: fill(t.data<double>(), [&] { return double(u(rng)); }); break;
    case kiln::DataType::kFloat16: fill(t.data<uint16_t>(), [&] { return kiln::f32_to_f16(u(rng)); }); break;
    case kiln::DataType::kBFloat16: fill(t.data<uint16_t>(), [&] { return kiln::f32_to_bf16(u(rng)); }); break;
    case kiln::DataType::kInt8: fill(t.data<int8_t>(), [&] { return int8_t(bit()); }); break;
    case kiln::DataType::kUInt8: fill(t.data<uint8_t>(), [&] { return uint8_t(bit()); }); break;
    case kiln::DataType::kInt16: fill(t.data<int16_t>(), [&] { return int16_t(bit()); }); break;
    case kiln::DataType::kUInt16: fill(t.data<uint16_t>(), [&] { return uint16_t(bit()); }); break;
    case kiln::DataType::kInt32: fill(t.data<int32_t>(), [&] { return int32_t(bit()); }); break;
    case kiln::DataType::kUInt32: fill(t.data<uint32_t>(), [&] { return uint32_t(bit()); }); break;
    case kiln::DataType::kInt64: fill(t.data<int64_t>(), [&] { return int64_t(bit()); }); break;
    case kiln::DataType::kUInt64: fill(t.data<uint64_t>(), [&] { return uint64_t(bit()); }); break;
    case kiln::DataType::kBool: fill(t.data<bool>(), [&] { return bit() != 0; }); break;
    case kiln::DataType::kString:
      fill(t.data<std::string>(), [&] {
        std::string w(1 + rng() % 8, 'a');
        for (char& c : w) c = static_cast<char>('a' + rng() % 26);
        return w;
      });
      break;
    default: return kiln::unsupported("no random generator for input '" + info.name + "' of type " + info.type_string() +
                                      ": give it with --input name=file.npy");
  }
  return t;
}

// A file name for an output: the model names its outputs, so the name is untrusted — any character
// outside [A-Za-z0-9._-] becomes '_' (no '/', no '..' component, nothing absolute), a leading '.'
// gets a '_' in front, and a name already taken gets a numeric suffix. Every file stays in the folder.
std::string output_file_stem(const std::string& name, std::set<std::string>& taken) {
  std::string stem;
  for (char c : name.substr(0, 200)) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    stem += ok ? c : '_';
  }
  if (stem.empty() || stem[0] == '.') stem = "_" + stem;
  std::string unique = stem;
  for (int k = 2; !taken.insert(unique).second; ++k) unique = stem + "_" + std::to_string(k);
  return unique;
}

void print_tensor_summary(const std::string& name, const kiln::Tensor& t) {
  std::printf("  %s: %s %s", name.c_str(), kiln::dtype_name(t.dtype()), kiln::shape_to_string(t.shape()).c_str());
  if (t.dtype() == kiln::DataType::kFloat32 && t.numel() > 0) {
    const float* p = t.data<float>();
    double sum = 0, mn = p[0], mx = p[0];
    for (int64_t i = 0; i < t.numel(); ++i) { sum += p[i]; mn = std::min<double>(mn, p[i]); mx = std::max<double>(mx, p[i]); }
    std::printf("  min %.6g max %.6g mean %.6g  first:", mn, mx, sum / t.numel());
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 5); ++i) std::printf(" %.6g", p[i]);
  } else if (t.dtype() == kiln::DataType::kInt64 && t.numel() > 0) {
    std::printf("  first:");
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 8); ++i) std::printf(" %lld", static_cast<long long>(t.data<int64_t>()[i]));
  }
  std::printf("\n");
}

struct Inputs {
  std::vector<std::string> specs;  // name=file.npy
  unsigned seed = 0;
};

// Element i of a numeric tensor as a double; false for dtypes compared by bytes only.
bool element_as_double(const kiln::Tensor& t, int64_t i, double& out) {
  using D = kiln::DataType;
  switch (t.dtype()) {
    case D::kFloat32: out = t.data<float>()[i]; return true;
    case D::kFloat64: out = t.data<double>()[i]; return true;
    case D::kFloat16: out = kiln::f16_to_f32(t.data<uint16_t>()[i]); return true;
    case D::kBFloat16: out = kiln::bf16_to_f32(t.data<uint16_t>()[i]); return true;
    case D::kInt8: out = t.data<int8_t>()[i]; return true;
    case D::kUInt8: out = t.data<uint8_t>()[i]; return true;
    case D::kInt16: out = t.data<int16_t>()[i]; return true;
    case D::kUInt16: out = t.data<uint16_t>()[i]; return true;
    case D::kInt32: out = t.data<int32_t>()[i]; return true;
    case D::kUInt32: out = t.data<uint32_t>()[i]; return true;
    case D::kInt64: out = static_cast<double>(t.data<int64_t>()[i]); return true;
    case D::kUInt64: out = static_cast<double>(t.data<uint64_t>()[i]); return true;
    case D::kBool: out = t.data<bool>()[i] ? 1 : 0; return true;
    default: return false;
  }
}

// How outputs are judged: relative L2 of the whole output <= rtol (kiln against kiln), or, when
// `elementwise`, every element within |a - b| <= atol + rtol * |b| with b the reference (polygraphy's
// rule; `kiln compare --against onnxruntime`). NaN must stand where the reference has NaN.
struct Tolerance {
  double rtol = 1e-4, atol = 0;
  bool elementwise = false;
};

std::string index_string(const kiln::Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = std::max<int64_t>(shape[d], 1);
    idx[d] = flat % n;
    flat /= n;
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? "," : "") + std::to_string(idx[d]);
  return s + "]";
}

// One output of A against its reference: prints a line, returns whether it passes.
bool compare_output(const std::string& name, const kiln::Tensor& x, const kiln::Tensor& y, const Tolerance& tol,
                    const char* indent) {
  double probe = 0;
  const bool numeric = element_as_double(x, 0, probe) || x.numel() == 0;
  if (x.shape() != y.shape() || !numeric || !(element_as_double(y, 0, probe) || y.numel() == 0)) {
    const bool same = x.dtype() == y.dtype() && x.shape() == y.shape() && x.nbytes() == y.nbytes() &&
                      x.dtype() != kiln::DataType::kString && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
    std::printf("%s%s: %s %s vs %s %s: %s\n", indent, name.c_str(), kiln::dtype_name(x.dtype()),
                kiln::shape_to_string(x.shape()).c_str(), kiln::dtype_name(y.dtype()), kiln::shape_to_string(y.shape()).c_str(),
                same ? "identical" : "DIFFERENT (dtype, shape or bytes)");
    return same;
  }
  double diff2 = 0, ref2 = 0, maxabs = 0, maxrel = 0;
  int64_t nans = 0, bad = 0, first_bad = -1;
  for (int64_t k = 0; k < x.numel(); ++k) {
    double a = 0, b = 0;
    element_as_double(x, k, a);
    element_as_double(y, k, b);
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) != std::isnan(b)) {
        ++nans;
        if (first_bad < 0) first_bad = k;
      }
      continue;
    }
    const double d = std::abs(a - b);
    if (std::isinf(a) || std::isinf(b)) {
      if (a != b && first_bad < 0) first_bad = k;
      bad += a != b;
      continue;
    }
    diff2 += d * d;
    ref2 += b * b;
    maxabs = std::max(maxabs, d);
    if (b != 0) maxrel = std::max(maxrel, d / std::abs(b));
    if (tol.elementwise && d > tol.atol + tol.rtol * std::abs(b)) {
      ++bad;
      if (first_bad < 0) first_bad = k;
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  const bool good = nans == 0 && (tol.elementwise ? bad == 0 : rel <= tol.rtol && bad == 0);
  std::printf("%s%s: %s %s  max abs diff %.3e  max rel diff %.3e  relative L2 %.3e  NaN mismatches %lld", indent, name.c_str(),
              kiln::dtype_name(x.dtype()), kiln::shape_to_string(x.shape()).c_str(), maxabs, maxrel, rel,
              static_cast<long long>(nans));
  if (tol.elementwise && bad + nans > 0)
    std::printf("  %lld of %lld elements outside atol %.1e + rtol %.1e; first at %s: %.9g vs %.9g",
                static_cast<long long>(bad + nans), static_cast<long long>(x.numel()), tol.atol, tol.rtol,
                index_string(x.shape(), first_bad).c_str(), [&] { double v = 0; element_as_double(x, first_bad, v); return v; }(),
                [&] { double v = 0; element_as_double(y, first_bad, v); return v; }());
  std::printf("  %s\n", good ? "OK" : "MISMATCH");
  return good;
}

// Prints, per output of A, A against the reference output of the same name (by position when the
// reference has no output of that name); false when one fails `tol` or has no counterpart.
bool print_comparison(const std::vector<std::string>& a_names, const std::vector<kiln::Value>& ra,
                      const std::vector<std::string>& b_names, const std::vector<kiln::Value>& rb, const Tolerance& tol,
                      const char* indent = "  ") {
  bool ok = true;
  for (size_t i = 0; i < ra.size(); ++i) {
    const std::string& name = a_names[i];
    size_t j = 0;
    while (j < b_names.size() && b_names[j] != name) ++j;
    if (j == b_names.size()) {
      j = i;
      if (j >= rb.size()) {
        std::printf("%s%s: MISSING in B\n", indent, name.c_str());
        ok = false;
        continue;
      }
      std::printf("%s%s: B has no output of this name; compared with B's output %zu ('%s')\n", indent, name.c_str(), j,
                  b_names[j].c_str());
    }
    if (ra[i].kind != kiln::Value::Kind::kTensor || rb[j].kind != kiln::Value::Kind::kTensor) {
      std::printf("%s%s: not a tensor on both sides: not compared\n", indent, name.c_str());
      continue;
    }
    ok &= compare_output(name, ra[i].tensor, rb[j].tensor, tol, indent);
  }
  return ok;
}

std::vector<std::string> output_names(const kiln::Engine& e) {
  std::vector<std::string> names;
  for (const auto& o : e.outputs()) names.push_back(o.name);
  return names;
}

kiln::Expected<std::map<std::string, kiln::Value>> load_inputs(const kiln::Engine& e, const Inputs& in) {
  std::map<std::string, kiln::Value> feed;
  for (const std::string& spec : in.specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos) return kiln::invalid_argument("--input expects name=file.npy, got '" + spec + "'");
    KILN_ASSIGN_OR_RETURN(kiln::Tensor t, kiln::read_npy(spec.substr(eq + 1)));
    feed[spec.substr(0, eq)] = kiln::Value::of(t);
  }
  std::mt19937 rng(in.seed);
  bool announced = false;
  for (const auto& info : e.inputs()) {
    // An input backed by an initializer (weights listed as inputs, IR < 4) keeps it unless given.
    if (feed.count(info.name) || info.has_default) continue;
    if (!announced) { std::printf("no --input for some inputs: using random data (seed %u)\n", in.seed); announced = true; }
    KILN_ASSIGN_OR_RETURN(kiln::Tensor t, random_input(info, rng));
    feed[info.name] = kiln::Value::of(t);
  }
  return feed;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Replaces each tensor of `vs` by one of its dtype and shape on `device` (its data copied when `copy`).
kiln::Status to_device(std::vector<kiln::Value>& vs, kiln::Device device, bool copy) {
  for (kiln::Value& v : vs) {
    if (v.kind != kiln::Value::Kind::kTensor) continue;
    KILN_ASSIGN_OR_RETURN(kiln::Tensor d, kiln::allocate_tensor(v.tensor.dtype(), v.tensor.shape(), device));
    if (copy) KILN_RETURN_IF_ERROR(kiln::transfer(v.tensor, d));
    v.tensor = std::move(d);
  }
  return kiln::Status::Ok();
}

// `kiln inspect` on an engine file: what it was built for, its shape profiles, and per step the
// kernel and the tactic the tuner chose.
int inspect_engine(const std::string& path) {
  auto e = kiln::Engine::load(path);
  if (!e.ok()) return fail(e.status());
  std::printf("engine: %s\n", path.c_str());
  for (const auto& [k, v] : (*e)->metadata()) std::printf("  %s: %s\n", k.c_str(), v.c_str());
  std::printf("inputs:\n");
  for (const auto& t : (*e)->inputs())
    std::printf("  %s: %s %s%s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str(),
                t.has_default ? "  (has a default: an initializer)" : "");
  std::printf("outputs:\n");
  for (const auto& t : (*e)->outputs()) std::printf("  %s: %s %s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str());
  const auto& profiles = (*e)->profiles();
  std::printf("shape profiles: %zu%s\n", profiles.size(), profiles.empty() ? " (the declared shapes)" : "");
  for (size_t p = 0; p < profiles.size(); ++p) {
    std::printf("  profile %zu:\n", p);
    for (const auto& [name, opt] : profiles[p].opt) {
      auto dims = [](const std::vector<int64_t>& d) {
        std::string s;
        for (size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
        return s;
      };
      std::printf("    %s: min %s opt %s max %s\n", name.c_str(), dims(profiles[p].min.at(name)).c_str(), dims(opt).c_str(),
                  dims(profiles[p].max.at(name)).c_str());
    }
  }
  std::printf("plan (kernel, and the tuner's tactic per profile where it chose one):\n%s", (*e)->placement_report().c_str());
  return 0;
}

bool is_engine_file(const std::string& path) {
  // Not a regular file (a FIFO would block fopen for ever): the model reader names what it is.
  if (!kiln::special_file_kind(path).empty()) return false;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char head[8] = {};
  const size_t n = std::fread(head, 1, 8, f);
  std::fclose(f);
  return n == 8 && std::memcmp(head + 4, "KILN", 4) == 0;
}

// "name:1x3x224x224,mask:1x128" (trtexec's form) into `out`; false with `why` when malformed.
bool parse_shapes(const std::string& spec, std::map<std::string, std::vector<int64_t>>& out, std::string& why) {
  size_t b = 0;
  while (b <= spec.size()) {
    size_t e = spec.find(',', b);
    if (e == std::string::npos) e = spec.size();
    const std::string item = spec.substr(b, e - b);
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size()) {
      why = "'" + item + "' is not name:dims (dims like 1x3x224x224)";
      return false;
    }
    std::vector<int64_t> dims;
    const std::string d = item.substr(colon + 1);
    size_t k = 0;
    while (k <= d.size()) {
      size_t x = d.find('x', k);
      if (x == std::string::npos) x = d.size();
      const std::string num = d.substr(k, x - k);
      if (num.empty() || num.size() > 18 || num.find_first_not_of("0123456789") != std::string::npos) {
        why = "'" + item + "': dims must be non-negative integers separated by 'x'";
        return false;
      }
      dims.push_back(std::stoll(num));
      k = x + 1;
    }
    out[item.substr(0, colon)] = dims;
    b = e + 1;
  }
  return true;
}

// Build progress on stderr: one line rewritten in place on a terminal, plain lines otherwise (for
// tuning, one every tenth of the layers).
std::function<void(const kiln::BuildProgress&)> progress_printer() {
  const bool tty = isatty(2);
  auto last_tenth = std::make_shared<int>(-1);
  return [tty, last_tenth](const kiln::BuildProgress& p) {
    if (p.stage == "tune" && p.total > 0) {
      const double eta = p.done > 0 ? p.seconds / p.done * (p.total - p.done) : 0;  // rough: time so far includes earlier stages
      if (tty) {
        std::fprintf(stderr, "\r\033[K[%6.1fs] tune %d/%d %s (eta %.0fs)", p.seconds, p.done, p.total, p.detail.c_str(), eta);
      } else if (p.done * 10 / p.total != *last_tenth) {
        *last_tenth = p.done * 10 / p.total;
        std::fprintf(stderr, "[%6.1fs] tune %d/%d %s\n", p.seconds, p.done, p.total, p.detail.c_str());
      }
      return;
    }
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (p.stage == "done") {
      std::fprintf(stderr, "[%6.1fs] built\n", p.seconds);
      return;
    }
    std::fprintf(stderr, tty ? "[%6.1fs] %s" : "[%6.1fs] %s\n", p.seconds, p.stage.c_str());
  };
}

int run_inspect(const std::string& path, int level, bool verbose) {
  if (is_engine_file(path)) return inspect_engine(path);
  auto r = kiln::inspect_model(path, level);
  if (!r.ok()) return fail(r.status());
  std::printf("model: %s\nopt level: %d\nnodes: %d before, %d after\npasses (rewrites):\n", path.c_str(), r->opt_level,
              r->nodes_before, r->nodes_after);
  for (const auto& [name, n] : r->passes) std::printf("  %-24s %d\n", name.c_str(), n);
  std::printf("target stages (kiln build runs those its device and precision ask for; --disable-pass NAME skips one, "
              "as it does a pass):\n");
  for (const auto& [name, what] : r->target_stages) std::printf("  %-26s %s\n", name.c_str(), what.c_str());
  std::vector<std::pair<int, std::string>> hist;
  for (const auto& [op, n] : r->ops_after) hist.push_back({-n, op});
  std::sort(hist.begin(), hist.end());
  std::printf("ops after:\n");
  for (const auto& [n, op] : hist) {
    auto it = r->ops_before.find(op);
    std::printf("  %-28s %d (before %d)\n", op.c_str(), -n, it == r->ops_before.end() ? 0 : it->second);
  }
  if (verbose) {
    std::printf("rewrites (%zu):\n", r->rewrites.size());
    for (const auto& s : r->rewrites) std::printf("  %s\n", s.c_str());
    std::printf("near misses (%zu):\n", r->near_misses.size());
    for (const auto& s : r->near_misses) std::printf("  %s\n", s.c_str());
  } else if (!r->near_misses.empty()) {
    std::printf("near misses: %zu (see --verbose)\n", r->near_misses.size());
  }
  return 0;
}

// Writes `text` to `path`; an error naming the file when it cannot.
kiln::Status write_text(const std::string& path, const std::string& text) {
  KILN_RETURN_IF_ERROR(kiln::check_writable_file(path, "output"));  // a FIFO would block fopen
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return kiln::io_error("cannot write '" + path + "'");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return kiln::io_error("cannot write '" + path + "'");
  return kiln::Status::Ok();
}

// `kiln profile`: the report template (tools/profile_report.html) with one placeholder line.
constexpr const char kReportHtml[] =
#include "profile_report.inc"
    ;
// `kiln compare --against onnxruntime`: the script (tools/ort_reference.py) that runs the reference.
constexpr const char kOrtReferencePy[] =
#include "ort_reference.inc"
    ;

// Runs `argv` (argv[0] looked up on PATH) and waits; its exit status, or -1 when it could not start.
int run_process(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ONNX Runtime's outputs for `model` on `feed` (by output name), through tools/ort_reference.py run
// with $KILN_PYTHON (else python3) in a temporary folder.
kiln::Status onnxruntime_reference(const std::string& model, const std::map<std::string, kiln::Value>& feed,
                                   std::vector<std::string>& names, std::vector<kiln::Value>& outputs, std::string& version) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-compare-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) return kiln::io_error("cannot make a temporary folder for onnxruntime's inputs");
  const std::filesystem::path dir = tmpl;
  struct Cleanup {
    std::filesystem::path p;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } cleanup{dir};
  std::filesystem::create_directories(dir / "out");
  nlohmann::json files = nlohmann::json::object();
  int k = 0;
  for (const auto& [name, v] : feed) {
    if (v.kind != kiln::Value::Kind::kTensor)
      return kiln::unsupported("--against onnxruntime: input '" + name + "' is not a tensor");
    const std::string file = std::to_string(k++) + ".npy";
    KILN_RETURN_IF_ERROR(kiln::write_npy((dir / file).string(), v.tensor));
    files[name] = file;
  }
  KILN_RETURN_IF_ERROR(write_text((dir / "inputs.json").string(), files.dump()));
  KILN_RETURN_IF_ERROR(write_text((dir / "ort_reference.py").string(), kOrtReferencePy));
  const char* py = std::getenv("KILN_PYTHON");
  const std::string python = py && *py ? py : "python3";
  const int rc = run_process({python, (dir / "ort_reference.py").string(), std::filesystem::absolute(model).string(),
                              dir.string(), (dir / "out").string()});
  if (rc == 3) return kiln::unsupported("--against onnxruntime: onnxruntime is not importable (see above)");
  if (rc != 0)
    return kiln::runtime_error("--against onnxruntime: " + python + " ort_reference.py failed (exit " + std::to_string(rc) +
                               (rc == 127 ? ": no such program; set KILN_PYTHON" : "") + ")");
  std::FILE* f = std::fopen((dir / "out" / "outputs.json").string().c_str(), "rb");
  if (!f) return kiln::io_error("--against onnxruntime: no outputs.json");
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  const nlohmann::json listing = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!listing.is_object() || !listing.contains("outputs")) return kiln::io_error("--against onnxruntime: bad outputs.json");
  version = listing.value("onnxruntime", "");
  for (const auto& item : listing["outputs"]) {
    names.push_back(item.at(0).get<std::string>());
    KILN_ASSIGN_OR_RETURN(kiln::Tensor t, kiln::read_npy((dir / "out" / item.at(1).get<std::string>()).string()));
    outputs.push_back(kiln::Value::of(std::move(t)));
  }
  return kiln::Status::Ok();
}

struct ProfileArgs {
  int runs = 20, warmup = 3;
  std::string out;  // prefix: PREFIX.json and PREFIX.html
};

// Runs the engine `warmup` times, then `runs` times with profiling on; writes the Chrome trace and
// the HTML report (per layer: op, kernel, device, precision, tactic, shapes, mean time) and prints
// the ten slowest layers.
int run_profile(const std::string& model_path, const kiln::Engine& e, kiln::ExecutionContext& ctx,
                const std::map<std::string, kiln::Value>& feed, const ProfileArgs& pa, const std::string& precision) {
  for (int i = 0; i < pa.warmup; ++i)
    if (auto r = ctx.run(feed); !r.ok()) return fail(r.status());
  std::vector<double> run_ms;
  ctx.set_profiling(true);
  for (int i = 0; i < pa.runs; ++i)
    if (auto r = ctx.run(feed); !r.ok()) return fail(r.status());
  const std::vector<kiln::ProfileEvent> events = ctx.take_profile();
  ctx.set_profiling(false);

  // Per step, in execution order: the first run's description, every run's time.
  struct Layer {
    const kiln::ProfileEvent* first = nullptr;
    int64_t calls = 0;
    double total_us = 0;
  };
  std::map<int, Layer> layers;
  for (const kiln::ProfileEvent& ev : events) {
    if (ev.step < 0) {
      run_ms.push_back(ev.dur_us / 1e3);
      continue;
    }
    Layer& l = layers[ev.step];
    if (!l.first) l.first = &ev;
    ++l.calls;
    l.total_us += ev.dur_us;
  }
  std::sort(run_ms.begin(), run_ms.end());
  const double median_ms = run_ms.empty() ? 0 : run_ms[run_ms.size() / 2];
  const int nruns = std::max(1, pa.runs);

  using nlohmann::json;
  json data;
  auto meta = e.metadata();
  data["kiln_version"] = kiln::version();
  data["model"] = std::filesystem::path(model_path).filename().string();
  data["device"] = meta["device"];
  data["device_name"] = meta["fingerprint"];
  data["precision"] = meta.count("precision") ? meta["precision"] : precision;
  data["runs"] = pa.runs;
  data["wall_ms_per_run"] = median_ms;
  data["arena_bytes"] = {{"cpu", ctx.arena_bytes(kiln::DeviceType::kCPU)}, {"cuda", ctx.arena_bytes(kiln::DeviceType::kCUDA)}};
  json rows = json::array();
  std::vector<std::pair<double, const Layer*>> slowest;
  for (const auto& [step, l] : layers) {
    const kiln::ProfileEvent& ev = *l.first;
    std::string prec;
    if (!ev.outputs.empty()) prec = ev.outputs[0].substr(0, ev.outputs[0].find('['));
    const double mean_ms = l.total_us / 1e3 / static_cast<double>(nruns);
    rows.push_back({{"step", step}, {"name", ev.name}, {"op", ev.op}, {"kernel", ev.kernel}, {"device", ev.device},
                    {"precision", prec}, {"tactic", ev.tactic}, {"inputs", ev.inputs}, {"outputs", ev.outputs},
                    {"output_bytes", ev.output_bytes}, {"calls", l.calls}, {"total_ms", l.total_us / 1e3}, {"mean_ms", mean_ms}});
    slowest.push_back({mean_ms, &l});
  }
  data["layers"] = std::move(rows);

  std::string prefix = pa.out.empty() ? std::filesystem::path(model_path).replace_extension("").string() + "_profile" : pa.out;
  std::string trace = kiln::profile_to_chrome_trace(events, "kiln " + data["model"].get<std::string>());
  // The data goes inside a <script> element: every '<' becomes \u003c (it can only stand in strings).
  std::string blob = data.dump(-1, ' ', false, json::error_handler_t::replace), safe;
  for (char c : blob) {
    if (c == '<') safe += "\\u003c";
    else safe += c;
  }
  std::string html = kReportHtml;
  const std::string mark = "__KILN_PROFILE_DATA__";
  const size_t at = html.find(mark);
  if (at == std::string::npos) return fail(kiln::internal_error("the report template has no data placeholder"));
  html.replace(at, mark.size(), safe);
  if (kiln::Status st = write_text(prefix + ".json", trace); !st.ok()) return fail(st);
  if (kiln::Status st = write_text(prefix + ".html", html); !st.ok()) return fail(st);

  std::sort(slowest.begin(), slowest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  double sum = 0;
  for (const auto& [ms, l] : slowest) sum += ms;
  std::printf("profiled %d runs (after %d warm-up): median %.3f ms per run, %.3f ms in %zu steps\n", pa.runs, pa.warmup,
              median_ms, sum, layers.size());
  std::printf("  %-32s %-22s %-28s %-5s %10s %6s\n", "layer", "op", "kernel", "dev", "ms/run", "%");
  for (size_t i = 0; i < std::min<size_t>(10, slowest.size()); ++i) {
    const kiln::ProfileEvent& ev = *slowest[i].second->first;
    std::printf("  %-32.32s %-22.22s %-28.28s %-5s %10.4f %6.1f\n", ev.name.c_str(), ev.op.c_str(), ev.kernel.c_str(),
                ev.device.c_str(), slowest[i].first, sum > 0 ? 100 * slowest[i].first / sum : 0.0);
  }
  std::printf("trace: %s.json (chrome://tracing, ui.perfetto.dev)\nreport: %s.html\n", prefix.c_str(), prefix.c_str());
  return 0;
}

}  // namespace

static int kiln_main(int argc, char** argv) {
  // libgomp reads OMP_WAIT_POLICY when it loads, before main: re-exec once with passive waiting after
  // a short spin unless the user chose a policy (libgomp's default spinning on busy cores slowed
  // 2-thread runs 5-70x; passive alone pays a wake-up per parallel region: python/kiln/__init__.py).
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT") && !std::getenv("KILN_NO_REEXEC")) {
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    setenv("GOMP_SPINCOUNT", "10000", 1);
    setenv("KILN_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
  }
  CLI::App app{"kiln: an inference compiler and runtime for ONNX models"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::version());
  app.require_subcommand(1);
  // --help shows every option's default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  app.footer(
      "Examples:\n"
      "  kiln info model.onnx\n"
      "  kiln build model.onnx -o model.kiln --device cuda --precision fp16\n"
      "  kiln run model.kiln -i input=x.npy --output-dir out/\n"
      "  kiln bench model.kiln --streams 2 --json bench.json\n"
      "  kiln compare model.onnx --against onnxruntime\n"
      "  kiln profile model.onnx -o prof   # prof.json (Chrome trace) and prof.html\n"
      "Run 'kiln <command> --help' for a command's options.");

  // info
  std::string info_path;
  auto* info = app.add_subcommand("info", "Describe an ONNX model: inputs, outputs, opsets, ops, parameters, unsupported ops");
  info->add_option("model", info_path, "model.onnx, or an engine file (as kiln inspect)")->required();

  // build
  std::string build_path, build_out, build_device = "cpu";
  int opt_level = 2;
  bool verbose = false, build_no_check = false;
  double build_check_rtol = 5e-2;
  auto* build = app.add_subcommand("build", "Build an engine file from an ONNX model");
  build->add_option("model", build_path, "model.onnx")->required();
  build->add_option("-o,--output", build_out, "engine file to write (default: model.kiln)");
  build->add_option("--device", build_device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  build->add_option("--opt-level", opt_level, "0 none, 1 folding/cleanup, 2 + fusions (default), 3 + aggressive")->check(CLI::Range(0, 3));
  build->add_flag("-v,--verbose", verbose, "log optimizer and planner decisions");
  build->add_flag("--no-accuracy-check", build_no_check,
                  "skip running a reduced-precision engine against a float32 engine after the build");
  build->add_option("--accuracy-rtol", build_check_rtol, "relative L2 above which the accuracy check flags an output");
  bool build_tune = false, build_no_tune = false, build_quiet = false;
  std::string timing_cache, shapes_spec;
  std::vector<std::string> min_shapes, opt_shapes, max_shapes;
  double tune_layer_seconds = 2.0;
  build->add_flag("--tune", build_tune, "time every layer's candidate kernels (tactics) on the device and keep the fastest "
                                        "(default for cuda engines)");
  build->add_flag("--no-tune", build_no_tune, "no tuning: every kernel runs its own choice");
  build->add_option("--timing-cache", timing_cache, "read measured tactic times from FILE and add this build's to it");
  build->add_option("--tune-layer-seconds", tune_layer_seconds, "time limit for tuning one layer")->check(CLI::PositiveNumber);
  double build_timeout = 0;
  build->add_option("--timeout", build_timeout, "stop the build (an error) once it has taken this many seconds")
      ->check(CLI::PositiveNumber);
  build->add_option("--shapes", shapes_spec, "fixed input shapes, e.g. input:1x3x224x224,mask:1x128 (one profile, min = opt = max)");
  build->add_option("--min-shapes", min_shapes, "smallest input shapes of a profile (repeat --min/--opt/--max-shapes for more profiles)");
  build->add_option("--opt-shapes", opt_shapes, "the shapes a profile is tuned for");
  build->add_option("--max-shapes", max_shapes, "largest input shapes of a profile");
  build->add_flag("-q,--quiet", build_quiet, "no progress lines");
  std::vector<std::string> build_disabled;
  build->add_option("--disable-pass", build_disabled,
                    "skip a pass by name (repeatable): one of the optimizer's (kiln inspect lists them) or a target "
                    "stage: channels-last, channels-last-float-convs, fold-pools-into-convs, fuse-conv-max-pool, "
                    "fuse-qconv-residual, signed-activations, quantize-half-directly, products-write-half");
  bool build_placement_only = false;
  build->add_flag("--placement-only", build_placement_only,
                  "import and optimize, then print where each node would run and why (no engine is written; needs no GPU)");
  std::string build_precision = "fp32", run_precision = "fp32", cmp_precision_a = "fp32", cmp_precision_b = "fp32";
  const auto precisions = CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "best"});
  build->add_option("--precision", build_precision,
                    "fp32, or for cuda engines tf32 (TF32 tensor cores for float32 convolutions/GEMMs), fp16/bf16 "
                    "(float32 accumulation; inputs and outputs keep their dtypes), best (fp16 + tf32) or fp8 (MatMul/Gemm "
                    "with constant weights, and on cuda the convolutions, in FP8 E4M3 on Hopper, scales from "
                    "--calibration, the rest fp16; a cpu engine emulates the FP8 products, to measure their accuracy)")
      ->check(CLI::IsMember({"fp32", "tf32", "fp16", "bf16", "best", "fp8"}));

  bool build_int8 = false;
  std::string calib_dir, calib_method = "minmax", calib_cache;
  double calib_percentile = 99.99;
  build->add_flag("--int8", build_int8,
                  "run Conv/MatMul/Gemm with constant weights in 8 bits, ranges from --calibration, int8 weights with a "
                  "scale per output channel (cpu: uint8 activations; cuda: MatMul/Gemm on int8 tensor cores, convolutions "
                  "with 16+ input channels through cuDNN with int8 activations, residual adds fused; the rest in "
                  "--precision, fp32 by default: --int8 --precision fp16 for speed)");
  build->add_option("--calibration", calib_dir,
                    "folder of calibration input sets: one subfolder per set with <input name>.npy, or one .npy per set "
                    "for a one-input model");
  build->add_option("--calibration-method", calib_method, "minmax, entropy (least KL divergence) or percentile")
      ->check(CLI::IsMember({"minmax", "entropy", "percentile"}));
  build->add_option("--percentile", calib_percentile, "the percentile of |x| kept by --calibration-method percentile")
      ->check(CLI::Range(0.0, 100.0));
  double accuracy_budget = 0;
  std::string accuracy_metric = "rel_l2";
  build->add_option("--accuracy-budget", accuracy_budget,
                    "--int8: keep the products whose 8-bit error costs most in float32, as few as hold the engine within "
                    "this error against float32 on the calibration data")
      ->check(CLI::NonNegativeNumber);
  build->add_option("--accuracy-metric", accuracy_metric, "the budget's metric: rel_l2 (outputs) or top1 (share of changed argmax)")
      ->check(CLI::IsMember({"rel_l2", "top1"}));
  build->add_option("--calibration-cache", calib_cache,
                    "read the ranges from FILE when it was written for this model and method, else write them to it");

  // cache
  auto* cache = app.add_subcommand("cache", "Timing caches: merge several into one, or describe one");
  cache->require_subcommand(1);
  std::vector<std::string> merge_inputs;
  std::string merge_out, cache_info_path;
  auto* cache_merge = cache->add_subcommand("merge", "Merge timing caches of one device (the fastest time of each tactic)");
  cache_merge->add_option("caches", merge_inputs, "timing cache files")->required();
  cache_merge->add_option("-o,--output", merge_out, "the merged cache")->required();
  auto* cache_info = cache->add_subcommand("info", "Show a timing cache's device and size");
  cache_info->add_option("cache", cache_info_path, "timing cache file")->required();

  // run / bench share their options
  std::string run_path, run_device = "cpu", out_dir;
  Inputs inputs;
  int iterations = 50, warmup = 5;
  double run_timeout = 0;
  int run_threads = 0;
  bool no_cuda_graphs = false;
  auto* run = app.add_subcommand("run", "Run an engine (or an ONNX model) once and print its outputs");
  auto* bench = app.add_subcommand("bench", "Time repeated runs (median, min, max)");
  auto* profile = app.add_subcommand("profile", "Time every layer: a Chrome trace (PREFIX.json) and an HTML report (PREFIX.html)");
  ProfileArgs profile_args;
  profile->add_option("--runs", profile_args.runs, "profiled runs")->check(CLI::PositiveNumber);
  profile->add_option("--warmup", profile_args.warmup, "unprofiled runs first")->check(CLI::NonNegativeNumber);
  profile->add_option("-o,--output", profile_args.out, "prefix of the files to write (default: <model>_profile)");
  profile->footer("Example:\n  kiln profile model.onnx --runs 50 -o prof   # writes prof.json and prof.html");
  for (auto* sc : {run, bench, profile}) {
    sc->add_option("model", run_path, "model.kiln or model.onnx")->required();
    sc->add_option("--input,-i", inputs.specs, "name=file.npy (repeatable); missing inputs get random data");
    sc->add_option("--device", run_device, "cpu or cuda (for .onnx files)")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
    sc->add_option("--precision", run_precision, "fp32, tf32, fp16, bf16 or best (for .onnx files on cuda)")->check(precisions);
    sc->add_option("--seed", inputs.seed, "seed for random inputs");
    sc->add_option("--timeout", run_timeout, "stop any run that takes longer than this many seconds (an error)")
        ->check(CLI::NonNegativeNumber);
    sc->add_flag("--no-cuda-graphs", no_cuda_graphs, "launch every GPU step on its own instead of replaying CUDA graphs");
    sc->add_option("--threads", run_threads,
                   "CPU threads per run (ONNX Runtime's intra_op_num_threads; 0: all cores or OMP_NUM_THREADS)")
        ->check(CLI::Range(0, 1024));
  }
  run->add_option("--output-dir", out_dir, "write each output as <name>.npy here");
  bench->add_option("-n,--iterations", iterations, "timed runs")->check(CLI::PositiveNumber);
  bench->add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  bool device_io = false;
  int streams = 1;
  double duration = 0;
  std::string bench_json;
  bench->add_option("--streams", streams, "run N contexts concurrently, one thread each (throughput)")->check(CLI::Range(1, 64));
  bench->add_option("--duration", duration, "time runs for this many seconds instead of -n runs")->check(CLI::PositiveNumber);
  bench->add_option("--json", bench_json, "also write the figures to this JSON file");
  bench->add_flag("--device-io", device_io,
                  "CUDA engines: inputs and outputs stay in GPU memory (uploaded once; no host copies timed)");

  // inspect
  std::string inspect_path;
  int inspect_level = 2;
  bool inspect_verbose = false;
  auto* inspect = app.add_subcommand("inspect", "Show what the optimizer does to a model: rewrites per pass, node counts, near misses");
  inspect->add_option("model", inspect_path, "model.onnx, or an engine file (its plan and chosen tactics)")->required();
  inspect->add_option("--opt-level", inspect_level, "0 none, 1 folding/cleanup, 2 + fusions, 3 + aggressive")->check(CLI::Range(0, 3));
  inspect->add_flag("-v,--verbose", inspect_verbose, "list every rewrite and every near miss (partial match) with its reason");

  // compare
  std::string cmp_a, cmp_b, cmp_device_a = "cpu", cmp_device_b = "cuda";
  Inputs cmp_inputs;
  double cmp_rtol = 1e-4;
  int cmp_runs = 1;
  auto* compare = app.add_subcommand("compare", "Run a model two ways (devices or engine files) on the same inputs and compare outputs");
  compare->add_option("model", cmp_a, "model.onnx or model.kiln (side A)")->required();
  compare->add_option("other", cmp_b, "a second model/engine (side B; default: the same model on --device-b)");
  compare->add_option("--device-a", cmp_device_a, "device for side A when it is an .onnx")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  auto* device_b_opt =
      compare->add_option("--device-b", cmp_device_b,
                          "device for side B when it is an .onnx (default: cuda for one model, side A's device for two)")
          ->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  compare->add_option("--precision-a", cmp_precision_a, "precision of side A when it is an .onnx")->check(precisions);
  compare->add_option("--precision-b", cmp_precision_b, "precision of side B when it is an .onnx")->check(precisions);
  compare->add_option("--input,-i", cmp_inputs.specs, "name=file.npy (repeatable); missing inputs get random data");
  compare->add_option("--seed", cmp_inputs.seed, "seed for random inputs");
  std::string cmp_against;
  double cmp_atol = -1, cmp_rtol_given = -1;
  compare->add_option("--against", cmp_against,
                      "compare side A with another runtime instead: onnxruntime (its CPU provider, run by $KILN_PYTHON or "
                      "python3; elementwise check)")
      ->check(CLI::IsMember({"onnxruntime"}));
  compare->add_option("--rtol", cmp_rtol_given,
                      "relative tolerance: of an output's relative L2 error (default 1e-4), or per element with --atol or "
                      "--against (default 1e-4)");
  compare->add_option("--atol", cmp_atol,
                      "check every element: |a - b| <= atol + rtol * |b|, b the reference (default with --against: 1e-5)");
  compare->add_option("--runs", cmp_runs, "run each side this many times and compare the last outputs")
      ->check(CLI::PositiveNumber);

  // conform
  ConformOptions conform_opts;
  std::string conform_device = "cpu", conform_precision = "fp32";
  auto* conform = app.add_subcommand(
      "conform", "Run onnx-style test folders (model.onnx + test_data_set_N/*.pb, as onnx's node tests) and compare outputs");
  conform->add_option("tests", conform_opts.paths, "test folders, or folders of them (e.g. onnx's backend/test/data/node)")
      ->required();
  conform->add_option("--device", conform_device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  conform->add_option("--precision", conform_precision, "fp32, tf32, fp16, bf16 or best (cuda)")->check(precisions);
  conform->add_option("--opt-level", conform_opts.build.opt_level, "0-3")->check(CLI::Range(0, 3));
  conform->add_option("--rtol", conform_opts.rtol, "relative tolerance for float outputs (default 1e-3)");
  conform->add_option("--atol", conform_opts.atol, "absolute tolerance for float outputs (default 1e-7)");
  conform->add_option("--filter", conform_opts.filter, "regex: run only tests whose name matches");
  conform->add_option("--json", conform_opts.json, "write one JSON line per test here");
  conform->add_flag("-v,--verbose", conform_opts.verbose, "print every test, not only failures");
  conform->add_flag("--placement-only", conform_opts.placement_only,
                    "plan placement only (no GPU needed): a test is 'placed' when every node would run on the device, "
                    "'placed-fallback' when some would run on the CPU; the CPU nodes are counted per op");

  size_t max_tensor_bytes = 0, max_memory = 0;
  for (auto* sc : {build, run, bench, compare}) {
    sc->add_option("--max-tensor-bytes", max_tensor_bytes,
                   "refuse any tensor larger than this many bytes (default: physical memory; also KILN_MAX_TENSOR_BYTES)")
        ->check(CLI::PositiveNumber);
    sc->add_option("--max-memory", max_memory,
                   "stop with an error when kiln would hold more host memory than this many bytes at once (default: "
                   "physical memory; also KILN_MAX_MEMORY_BYTES)")
        ->check(CLI::PositiveNumber);
  }

  CLI11_PARSE(app, argc, argv);
  // Options that only apply when an .onnx is built are ignored for an engine file: say so.
  for (auto* sc : {run, bench, profile})
    if (*sc && is_engine_file(run_path))
      for (const char* opt : {"--device", "--precision"})
        if (sc->count(opt))
          std::fprintf(stderr, "kiln: warning: %s is ignored for an engine file (%s was built for its device and precision)\n",
                       opt, run_path.c_str());
  if (max_tensor_bytes) kiln::set_max_tensor_bytes(max_tensor_bytes);
  if (max_memory) kiln::set_max_memory_bytes(max_memory);

  if (*inspect) return run_inspect(inspect_path, inspect_level, inspect_verbose);

  if (*cache_merge) {
    if (kiln::Status st = kiln::merge_timing_caches(merge_inputs, merge_out); !st.ok()) return fail(st);
    auto d = kiln::describe_timing_cache(merge_out);
    if (!d.ok()) return fail(d.status());
    std::printf("merged %zu caches -> %s\n%s", merge_inputs.size(), merge_out.c_str(), d->c_str());
    return 0;
  }
  if (*cache_info) {
    auto d = kiln::describe_timing_cache(cache_info_path);
    if (!d.ok()) return fail(d.status());
    std::printf("%s", d->c_str());
    return 0;
  }

  if (*conform) {
    conform_opts.build.device = parse_device(conform_device);
    conform_opts.build.precision = parse_precision(conform_precision);
    return run_conform(conform_opts);
  }

  if (*compare) {
    if (cmp_rtol_given >= 0) cmp_rtol = cmp_rtol_given;
    Tolerance tol{cmp_rtol, std::max(cmp_atol, 0.0), cmp_atol >= 0};
    const bool against = !cmp_against.empty();
    if (against) {
      if (!cmp_b.empty()) return fail(kiln::invalid_argument("give either a second model or --against, not both"));
      if (is_engine_file(cmp_a)) return fail(kiln::invalid_argument("--against onnxruntime needs an .onnx model, not an engine file"));
      tol.elementwise = true;
      if (cmp_atol < 0) tol.atol = 1e-5;
    }
    kiln::BuildOptions oa;
    oa.device = parse_device(cmp_device_a);
    oa.precision = parse_precision(cmp_precision_a);
    auto a = kiln::Engine::open(cmp_a, oa);
    if (!a.ok()) return fail(a.status());
    auto feed = load_inputs(**a, cmp_inputs);
    if (!feed.ok()) return fail(feed.status());
    // With --runs N each side runs N times on one context and the last outputs are compared: the
    // steady state (replayed CUDA graphs from the third run of a GPU engine), not only the first run.
    auto run_side = [&](const kiln::Engine& e) -> kiln::Expected<std::vector<kiln::Value>> {
      KILN_ASSIGN_OR_RETURN(auto ctx, e.create_context());
      auto r = ctx->run(*feed);
      for (int k = 1; k < cmp_runs && r.ok(); ++k) r = ctx->run(*feed);
      return r;
    };
    auto ra = run_side(**a);
    if (!ra.ok()) return fail(ra.status());
    if (against) {
      std::vector<std::string> ref_names;
      std::vector<kiln::Value> ref;
      std::string ort_version;
      if (kiln::Status st = onnxruntime_reference(cmp_a, *feed, ref_names, ref, ort_version); !st.ok()) return fail(st);
      std::printf("A: %s (kiln, %s)\nB: onnxruntime %s (CPUExecutionProvider)\n", cmp_a.c_str(),
                  (*a)->metadata()["device"].c_str(), ort_version.c_str());
      const bool ok = print_comparison(output_names(**a), *ra, ref_names, ref, tol);
      std::printf("%s\n", ok ? "PASSED" : "FAILED");
      return ok ? 0 : 2;
    }
    // Two models are compared on one device unless told otherwise; one model, across devices.
    if (!cmp_b.empty() && device_b_opt->count() == 0) cmp_device_b = cmp_device_a;
    kiln::BuildOptions ob;
    ob.device = parse_device(cmp_device_b);
    ob.precision = parse_precision(cmp_precision_b);
    auto b = kiln::Engine::open(cmp_b.empty() ? cmp_a : cmp_b, ob);
    if (!b.ok()) return fail(b.status());
    auto rb = run_side(**b);
    if (!rb.ok()) return fail(rb.status());
    if (ra->size() != rb->size())
      std::printf("note: A has %zu outputs, B %zu; each of A's is compared with B's of the same name\n", ra->size(), rb->size());
    std::printf("A: %s (%s)\nB: %s (%s)\n", cmp_a.c_str(), (*a)->metadata()["device"].c_str(),
                (cmp_b.empty() ? cmp_a : cmp_b).c_str(), (*b)->metadata()["device"].c_str());
    const bool ok = print_comparison(output_names(**a), *ra, output_names(**b), *rb, tol);
    return ok ? 0 : 2;
  }

  if (*info) {
    if (is_engine_file(info_path)) return inspect_engine(info_path);
    auto s = kiln::summarize_model(info_path);
    if (!s.ok()) return fail(s.status());
    std::printf("model: %s\nproducer: %s\nir_version: %lld\nopsets:", s->path.c_str(), s->producer.c_str(),
                static_cast<long long>(s->ir_version));
    for (const auto& [d, v] : s->opsets) std::printf(" %s=%d", d.empty() ? "ai.onnx" : d.c_str(), v);
    std::printf("\ninputs:\n");
    for (const auto& t : s->inputs) std::printf("  %s: %s %s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str());
    std::printf("outputs:\n");
    for (const auto& t : s->outputs) std::printf("  %s: %s %s\n", t.name.c_str(), t.type_string().c_str(), dims_string(t).c_str());
    std::printf("parameters: %lld (%.2f MB)\nnodes: %d\nops:\n", static_cast<long long>(s->num_parameters),
                s->parameter_bytes / 1e6, s->num_nodes);
    std::vector<std::pair<int, std::string>> hist;
    for (const auto& [op, n] : s->op_histogram) hist.push_back({-n, op});
    std::sort(hist.begin(), hist.end());
    for (const auto& [n, op] : hist) std::printf("  %-28s %d\n", op.c_str(), -n);
    if (s->unsupported.empty()) {
      std::printf("unsupported: none (every node has a CPU kernel)\n");
    } else {
      std::printf("unsupported (%zu):\n", s->unsupported.size());
      for (const auto& u : s->unsupported) std::printf("  %s\n", u.c_str());
    }
    return 0;
  }

  if (*build) {
    kiln::BuildOptions o;
    o.device = parse_device(build_device);
    o.precision = parse_precision(build_precision);
    o.opt_level = opt_level;
    o.verbose = verbose;
    o.tune = build_no_tune ? 0 : build_tune ? 1 : -1;
    o.timing_cache = timing_cache;
    o.tune_layer_seconds = tune_layer_seconds;
    o.timeout_s = build_timeout;
    o.int8 = build_int8;
    o.calibration_dir = calib_dir;
    o.calibration_method = calib_method;
    o.calibration_percentile = calib_percentile;
    o.calibration_cache = calib_cache;
    o.accuracy_budget = accuracy_budget;
    o.accuracy_metric = accuracy_metric;
    o.disabled_passes = build_disabled;
    const bool eight_bit = build_int8 || o.precision == kiln::Precision::kFP8;
    if (!eight_bit && accuracy_budget > 0) return fail(kiln::invalid_argument("--accuracy-budget is for --int8 and --precision fp8 builds"));
    if (!eight_bit && (!calib_dir.empty() || !calib_cache.empty()))
      return fail(kiln::invalid_argument("--calibration and --calibration-cache are for --int8 and --precision fp8 builds"));
    if (!build_quiet) o.progress = progress_printer();
    std::string why;
    if (!shapes_spec.empty()) {
      if (!min_shapes.empty() || !opt_shapes.empty() || !max_shapes.empty())
        return fail(kiln::invalid_argument("give either --shapes or --min/--opt/--max-shapes"));
      kiln::ShapeProfile p;
      if (!parse_shapes(shapes_spec, p.opt, why)) return fail(kiln::invalid_argument("--shapes: " + why));
      p.min = p.max = p.opt;
      o.profiles.push_back(p);
    }
    if (min_shapes.size() != opt_shapes.size() || max_shapes.size() != opt_shapes.size())
      return fail(kiln::invalid_argument("each profile needs --min-shapes, --opt-shapes and --max-shapes (got " +
                                         std::to_string(min_shapes.size()) + ", " + std::to_string(opt_shapes.size()) + ", " +
                                         std::to_string(max_shapes.size()) + ")"));
    for (size_t k = 0; k < opt_shapes.size(); ++k) {
      kiln::ShapeProfile p;
      if (!parse_shapes(min_shapes[k], p.min, why) || !parse_shapes(opt_shapes[k], p.opt, why) ||
          !parse_shapes(max_shapes[k], p.max, why))
        return fail(kiln::invalid_argument("profile " + std::to_string(k) + ": " + why));
      for (const auto* m : {&p.min, &p.max})
        for (const auto& [name, dims] : *m)
          if (!p.opt.count(name))
            return fail(kiln::invalid_argument("profile " + std::to_string(k) + ": '" + name + "' has min/max shapes but no opt shape"));
      for (const auto& [name, dims] : p.opt)
        if (!p.min.count(name) || !p.max.count(name))
          return fail(kiln::invalid_argument("profile " + std::to_string(k) + ": '" + name + "' needs min, opt and max shapes"));
      o.profiles.push_back(p);
    }
    if (build_placement_only) {
      auto placed = kiln::Engine::plan_placement(build_path, o);
      if (!placed.ok()) return fail(placed.status());
      std::printf("%s", format_placement(*placed).c_str());
      return 0;
    }
    if (build_out.empty()) build_out = std::filesystem::path(build_path).replace_extension(".kiln").string();
    // Refused before the build rather than after it: writing into a FIFO would wait for a reader.
    if (kiln::Status st = kiln::check_writable_file(build_out, "engine file"); !st.ok()) return fail(st);
    const auto t0 = std::chrono::steady_clock::now();
    auto e = kiln::Engine::build(build_path, o);
    if (!e.ok()) return fail(e.status());
    const double build_ms = ms_since(t0);
    std::printf("placement:\n%s", (*e)->placement_report().c_str());
    kiln::Status st = (*e)->save(build_out);
    if (!st.ok()) return fail(st);
    if (eight_bit) {
      const auto meta = (*e)->metadata();
      const std::string tag = o.int8 ? "int8" : "fp8";
      const char* t = tag.c_str();
      auto get = [&meta, &tag](const std::string& k) {
        auto it = meta.find(tag + "." + k);
        return it == meta.end() ? std::string("?") : it->second;
      };
      std::printf("%s: %s products in 8 bits; activation ranges from %s\n", t, get("products").c_str(), get("calibration").c_str());
      if (meta.count(tag + ".layers")) {
        std::printf("%s: per product (precision, the metric with only it in 8 bits):\n", t);
        std::istringstream lines(meta.at(tag + ".layers"));
        std::string name, op, prec, sens;
        while (lines >> name >> op >> prec >> sens) std::printf("  %-40s %-8s %-5s %s\n", name.c_str(), op.c_str(), prec.c_str(), sens.c_str());
        std::printf("%s: measured on the calibration data: %s\n", t, get("error").c_str());
      }
      const std::string rel = tag + ".rel_l2.";
      for (const auto& [k, v] : meta)
        if (k.rfind(rel, 0) == 0)
          std::printf("%s: output '%s' relative L2 against the float32 engine %s (first calibration set)\n", t, k.substr(rel.size()).c_str(),
                      v.c_str());
    }
    // A reduced-precision engine is checked against a float32 engine of the same model on random
    // inputs (dynamic dims 1), steady-state runs (third, a replayed CUDA graph), output by output.
    if (o.precision != kiln::Precision::kFloat32 && !build_no_check) {
      kiln::BuildOptions o32 = o;
      o32.precision = kiln::Precision::kFloat32;
      o32.verbose = false;
      o32.tune = 0;
      o32.timing_cache.clear();
      o32.progress = nullptr;
      auto check = [&]() -> kiln::Status {
        KILN_ASSIGN_OR_RETURN(auto ref, kiln::Engine::build(build_path, o32));
        KILN_ASSIGN_OR_RETURN(auto feed, load_inputs(*ref, Inputs{}));
        KILN_ASSIGN_OR_RETURN(auto c32, ref->create_context());
        KILN_ASSIGN_OR_RETURN(auto c16, (*e)->create_context());
        std::vector<kiln::Value> r32, r16;
        for (int r = 0; r < 3; ++r) {
          KILN_ASSIGN_OR_RETURN(r32, c32->run(feed));
          KILN_ASSIGN_OR_RETURN(r16, c16->run(feed));
        }
        std::printf("accuracy against a float32 engine (random inputs, dynamic dims 1; relative L2 > %.0e is flagged):\n",
                    build_check_rtol);
        print_comparison(output_names(*ref), r32, output_names(**e), r16, Tolerance{build_check_rtol, 0, false});
        return kiln::Status::Ok();
      };
      if (kiln::Status cs = check(); !cs.ok())
        std::printf("accuracy check against a float32 engine: not run (%s)\n", cs.to_string().c_str());
    }
    std::printf("built %s for %s in %.1f ms -> %s (%ju bytes)\n", build_path.c_str(), build_device.c_str(), build_ms,
                build_out.c_str(), static_cast<uintmax_t>(std::filesystem::file_size(build_out)));
    return 0;
  }

  // run / bench
  kiln::BuildOptions o;
  o.device = parse_device(run_device);
  o.precision = parse_precision(run_precision);
  o.threads = run_threads;  // an .onnx is built on the threads it will run on
  const auto t0 = std::chrono::steady_clock::now();
  auto e = kiln::Engine::open(run_path, o);
  if (!e.ok()) return fail(e.status());
  const double load_ms = ms_since(t0);
  // A context as the options ask (bench --streams makes more of them).
  auto new_context = [&]() -> kiln::Expected<std::unique_ptr<kiln::ExecutionContext>> {
    KILN_ASSIGN_OR_RETURN(auto c, (*e)->create_context());
    c->set_run_timeout(run_timeout);
    if (run_threads > 0) c->set_num_threads(run_threads);
    if (no_cuda_graphs) c->set_cuda_graphs(false);
    return c;
  };
  auto ctx = new_context();
  if (!ctx.ok()) return fail(ctx.status());
  auto feed = load_inputs(**e, inputs);
  if (!feed.ok()) return fail(feed.status());
  std::printf("engine: %s (device %s, loaded/built in %.1f ms)\n", run_path.c_str(),
              (*e)->metadata()["device"].c_str(), load_ms);
  if (*profile) return run_profile(run_path, **e, **ctx, *feed, profile_args, run_precision);

  if (*run) {
    if (!out_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(out_dir, ec);
      if (ec || !std::filesystem::is_directory(out_dir))
        return fail(kiln::invalid_argument("--output-dir '" + out_dir + "': cannot create the folder" +
                                           (ec ? " (" + ec.message() + ")" : std::string(" (a file of that name exists)"))));
    }
    std::set<std::string> taken;
    const auto t1 = std::chrono::steady_clock::now();
    auto outs = (*ctx)->run(*feed);
    if (!outs.ok()) return fail(outs.status());
    const double first_ms = ms_since(t1);
    const auto t2 = std::chrono::steady_clock::now();
    auto again = (*ctx)->run(*feed);
    if (!again.ok()) return fail(again.status());
    const double warm_ms = ms_since(t2);
    std::printf("outputs:\n");
    for (size_t i = 0; i < outs->size(); ++i) {
      const auto& name = (*e)->outputs()[i].name;
      const kiln::Value& v = (*outs)[i];
      if (v.kind == kiln::Value::Kind::kTensor) {
        print_tensor_summary(name, v.tensor);
        if (!out_dir.empty() && v.tensor.dtype() == kiln::DataType::kString) {
          std::printf("    (not written: .npy holds strings only as pickled objects)\n");
        } else if (!out_dir.empty()) {
          const std::string stem = output_file_stem(name, taken);
          kiln::Status st = kiln::write_npy((std::filesystem::path(out_dir) / (stem + ".npy")).string(), v.tensor);
          if (!st.ok()) return fail(st);
          if (stem != name) std::printf("    (written as %s.npy)\n", stem.c_str());
        }
      } else if (v.kind == kiln::Value::Kind::kSequence) {
        std::printf("  %s: sequence of %zu tensors\n", name.c_str(), v.sequence.size());
      } else {
        std::printf("  %s: none\n", name.c_str());
      }
    }
    std::printf("time: first run %.3f ms, second run %.3f ms\n", first_ms, warm_ms);
    if (!out_dir.empty()) std::printf("outputs written to %s\n", out_dir.c_str());
    return 0;
  }

  // bench: the allocation-free form (inputs in engine order, outputs reused from run to run); with
  // --streams N, N contexts on N threads, each with its own outputs.
  std::vector<kiln::Value> in_order;
  for (const kiln::TensorInfo& ti : (*e)->inputs()) {
    auto it = feed->find(ti.name);
    in_order.push_back(it == feed->end() ? kiln::Value() : it->second);
  }
  const kiln::Device gpu{kiln::DeviceType::kCUDA};
  if (device_io) {
    if ((*e)->device() != kiln::DeviceType::kCUDA) return fail(kiln::invalid_argument("--device-io needs a CUDA engine"));
    // Inputs uploaded once (shared, read only); each stream's outputs in device buffers of the shapes a
    // first run gives.
    if (kiln::Status st = to_device(in_order, gpu, /*copy=*/true); !st.ok()) return fail(st);
    std::printf("inputs and outputs in GPU memory (--device-io)\n");
  }
  std::vector<std::unique_ptr<kiln::ExecutionContext>> ctxs;
  ctxs.push_back(std::move(*ctx));
  for (int k = 1; k < streams; ++k) {
    auto c = new_context();
    if (!c.ok()) return fail(c.status());
    ctxs.push_back(std::move(*c));
  }
  std::vector<std::vector<kiln::Value>> outs(ctxs.size());
  std::vector<std::vector<double>> lat(ctxs.size()), gpu_lat(ctxs.size());
  std::vector<kiln::Status> status(ctxs.size());
  // CUDA engines are also timed on the GPU: each context runs on a stream of the tool's own, with a
  // CUDA event recorded before and after every timed run (what trtexec calls GPU compute time).
  std::vector<std::unique_ptr<kiln_tools::GpuTimer>> timers(ctxs.size());
  if ((*e)->device() == kiln::DeviceType::kCUDA)
    for (size_t k = 0; k < ctxs.size(); ++k) {
      timers[k] = kiln_tools::GpuTimer::create();
      if (!timers[k]) break;
      if (kiln::Status st = ctxs[k]->set_cuda_stream(timers[k]->stream()); !st.ok()) return fail(st);
    }
  auto loop = [&](size_t k) {
    auto& c = *ctxs[k];
    kiln_tools::GpuTimer* timer = timers[k].get();
    kiln::Status st = c.run_into(in_order, outs[k]);
    if (st.ok() && device_io) st = to_device(outs[k], gpu, /*copy=*/false);
    for (int i = 0; st.ok() && i < warmup; ++i) st = c.run_into(in_order, outs[k]);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; st.ok(); ++i) {
      if (duration > 0 ? (i > 0 && ms_since(start) >= duration * 1e3) : i >= iterations) break;
      const auto t = std::chrono::steady_clock::now();
      if (timer) timer->start();
      st = c.run_into(in_order, outs[k]);
      const double host_ms = ms_since(t);
      if (timer) gpu_lat[k].push_back(timer->stop_ms());
      lat[k].push_back(host_ms);
    }
    status[k] = st;
  };
  const auto wall0 = std::chrono::steady_clock::now();
  if (ctxs.size() == 1) {
    loop(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t k = 0; k < ctxs.size(); ++k) threads.emplace_back(loop, k);
    for (auto& t : threads) t.join();
  }
  const double wall_ms = ms_since(wall0);
  for (const kiln::Status& st : status)
    if (!st.ok()) return fail(st);
  std::vector<double> ms;
  for (const auto& l : lat) ms.insert(ms.end(), l.begin(), l.end());
  std::sort(ms.begin(), ms.end());
  double mean = 0;
  for (double m : ms) mean += m / static_cast<double>(ms.size());
  // The q-quantile of sorted, non-empty samples.
  const auto quantile = [](const std::vector<double>& v, double q) {
    return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
  };
  const auto pct = [&](double q) { return quantile(ms, q); };
  // Throughput over the timed window (warm-up excluded per stream; streams overlap).
  const double runs_per_s = static_cast<double>(ms.size()) / (wall_ms / 1e3);
  int64_t batch = 0;
  for (const kiln::Value& v : in_order)
    if (v.kind == kiln::Value::Kind::kTensor && v.tensor.rank() > 0) {
      batch = v.tensor.shape()[0];
      break;
    }
  if (device_io) {
    size_t on_device = 0;
    for (const kiln::Value& v : outs[0]) on_device += v.kind == kiln::Value::Kind::kTensor && !v.tensor.device().is_cpu();
    std::printf("outputs left on the GPU: %zu of %zu\n", on_device, outs[0].size());
  }
  std::printf("arena: cpu %zu bytes, cuda %zu bytes\n", ctxs[0]->arena_bytes(kiln::DeviceType::kCPU),
              ctxs[0]->arena_bytes(kiln::DeviceType::kCUDA));
  if ((*e)->device() == kiln::DeviceType::kCUDA) std::printf("cuda graphs: %zu\n", ctxs[0]->cuda_graphs());
  std::printf("runs: %zu on %zu stream(s) (after %d warm-up each)\nmedian %.3f ms  min %.3f ms  p90 %.3f ms  max %.3f ms\n",
              ms.size(), ctxs.size(), warmup, pct(0.5), ms.front(), pct(0.9), ms.back());
  std::printf("mean %.3f ms  p99 %.3f ms  throughput %.1f runs/s", mean, pct(0.99), runs_per_s);
  if (batch > 0) std::printf(" (%.1f items/s at batch %lld)", runs_per_s * static_cast<double>(batch), static_cast<long long>(batch));
  std::printf("\n");
  // GPU time by CUDA events (first to last event of each run on the context's stream).
  std::vector<double> gms;
  for (const auto& l : gpu_lat)
    for (double m : l)
      if (m >= 0) gms.push_back(m);
  std::sort(gms.begin(), gms.end());
  const auto gpct = [&](double q) { return quantile(gms, q); };
  if (!gms.empty())
    std::printf("gpu median %.3f ms  min %.3f ms  p90 %.3f ms  max %.3f ms (CUDA events, %zu runs)\n", gpct(0.5), gms.front(),
                gpct(0.9), gms.back(), gms.size());
  if (!bench_json.empty()) {
    std::FILE* f = std::fopen(bench_json.c_str(), "w");
    if (!f) return fail(kiln::io_error("cannot write '" + bench_json + "'"));
    const auto gfmt = [&](double q) { return gms.empty() ? std::string("null") : std::to_string(gpct(q)); };
    std::string model;
    for (char ch : run_path) {
      if (ch == '"' || ch == '\\') model += '\\';
      model += ch;
    }
    std::fprintf(f,
                 "{\"model\": \"%s\", \"device\": \"%s\", \"streams\": %zu, \"warmup\": %d, \"runs\": %zu, "
                 "\"device_io\": %s, \"cuda_graphs\": %zu, \"batch\": %lld, \"median_ms\": %.6f, \"mean_ms\": %.6f, "
                 "\"min_ms\": %.6f, \"p90_ms\": %.6f, \"p99_ms\": %.6f, \"max_ms\": %.6f, \"wall_s\": %.6f, "
                 "\"throughput_runs_per_s\": %.3f, \"throughput_items_per_s\": %.3f, \"gpu_median_ms\": %s, "
                 "\"gpu_min_ms\": %s, \"gpu_p90_ms\": %s}\n",
                 model.c_str(), (*e)->metadata()["device"].c_str(), ctxs.size(), warmup, ms.size(), device_io ? "true" : "false",
                 (*e)->device() == kiln::DeviceType::kCUDA ? ctxs[0]->cuda_graphs() : size_t{0}, static_cast<long long>(batch),
                 pct(0.5), mean, ms.front(), pct(0.9), pct(0.99), ms.back(), wall_ms / 1e3, runs_per_s,
                 runs_per_s * static_cast<double>(std::max<int64_t>(batch, 1)), gfmt(0.5).c_str(),
                 gms.empty() ? "null" : std::to_string(gms.front()).c_str(), gfmt(0.9).c_str());
    std::fclose(f);
  }
  return 0;
}

// Nothing escapes as an abort: out-of-memory and any other exception become an error and exit 1.
int main(int argc, char** argv) {
  try {
    return kiln_main(argc, argv);
  } catch (const std::bad_alloc&) {
    std::cerr << "kiln: error: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
  }
  return 1;
}
