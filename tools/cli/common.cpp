// tools/cli/common.cpp — the helpers several `kiln` commands share (common.h).
#include "common.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>

#include "ir/float_types.h"  // header only: the library's float16/bfloat16 conversions
#include "util/file.h"
#include "util/utf8.h"

namespace kiln_cli {

namespace {

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

// One array of a .npz archive (np.savez: a zip of .npy files): its name (the member's, less ".npy")
// and its .npy bytes inside the mapped archive.
struct NpzMember {
  std::string name;
  std::string_view npy;
};

// The members of the zip archive `z` (the file `path`), read from its central directory (zip64 too,
// which NumPy writes); stored members only: a compressed one (np.savez_compressed) is refused by name.
kiln::Expected<std::vector<NpzMember>> npz_members(std::string_view z, const std::string& path) {
  auto bad = [&](const std::string& why) { return kiln::invalid_argument("'" + path + "' is not a readable .npz file: " + why); };
  auto byte = [&](size_t at) { return static_cast<uint64_t>(static_cast<uint8_t>(z[at])); };
  auto u16 = [&](size_t at) { return byte(at) | byte(at + 1) << 8; };
  auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  auto u64 = [&](size_t at) { return u32(at) | u32(at + 4) << 32; };
  auto sig = [&](size_t at, const char* s) { return at <= z.size() && z.size() - at >= 4 && z.compare(at, 4, s, 4) == 0; };
  // The end-of-central-directory record: 22 bytes, then a comment of up to 64 KiB.
  if (z.size() < 22) return bad("too short for a zip archive");
  size_t eocd = std::string_view::npos;
  for (size_t i = z.size() - 22 + 1; i-- > 0 && z.size() - i <= 22 + 65535;)
    if (sig(i, "PK\x05\x06")) { eocd = i; break; }
  if (eocd == std::string_view::npos) return bad("no zip end-of-central-directory record (np.savez writes zip archives)");
  uint64_t count = u16(eocd + 10), cd_size = u32(eocd + 12), cd_off = u32(eocd + 16);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {  // zip64: its locator is just before
    if (eocd < 20 || !sig(eocd - 20, "PK\x06\x07")) return bad("a zip64 archive without its locator");
    const uint64_t rec = u64(eocd - 20 + 8);
    if (rec > z.size() || z.size() - rec < 56 || !sig(rec, "PK\x06\x06")) return bad("a damaged zip64 end record");
    count = u64(rec + 32), cd_size = u64(rec + 40), cd_off = u64(rec + 48);
  }
  if (cd_off > z.size() || cd_size > z.size() - cd_off) return bad("its central directory lies outside the file");
  std::vector<NpzMember> out;
  size_t at = cd_off;
  const size_t cd_end = cd_off + cd_size;
  for (uint64_t k = 0; k < count; ++k) {
    if (cd_end - at < 46 || !sig(at, "PK\x01\x02")) return bad("a damaged central directory");
    const uint64_t flags = u16(at + 8), method = u16(at + 10), name_len = u16(at + 28), extra_len = u16(at + 30),
                   comment_len = u16(at + 32);
    uint64_t csize = u32(at + 20), usize = u32(at + 24), local = u32(at + 42);
    if (cd_end - at - 46 < name_len + extra_len + comment_len) return bad("a damaged central directory entry");
    std::string name(z.substr(at + 46, name_len));
    for (size_t e = at + 46 + name_len, e_end = e + extra_len; e_end - e >= 4;) {  // the zip64 sizes and offset
      const uint64_t id = u16(e), len = u16(e + 2);
      if (e_end - e - 4 < len) break;
      size_t f = e + 4;
      const size_t f_end = f + len;
      if (id == 1) {
        for (uint64_t* v : {&usize, &csize, &local})
          if (*v == 0xFFFFFFFF && f_end - f >= 8) *v = u64(f), f += 8;
      }
      e = f_end;
    }
    at += 46 + name_len + extra_len + comment_len;
    if (flags & 1) return bad("member '" + name + "' is encrypted");
    if (method != 0)
      return kiln::unsupported("'" + path + "': member '" + name +
                               "' is compressed (np.savez_compressed); kiln reads .npz files whose members are stored "
                               "(np.savez): save the arrays with np.savez, or give one .npy file per input");
    if (csize != usize) return bad("member '" + name + "' has different stored and full sizes");
    if (local > z.size() || z.size() - local < 30 || !sig(local, "PK\x03\x04")) return bad("a damaged local header");
    const uint64_t data = local + 30 + u16(local + 26) + u16(local + 28);
    if (data > z.size() || usize > z.size() - data) return bad("member '" + name + "' runs past the end of the file");
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    out.push_back({std::move(name), z.substr(data, usize)});
  }
  return out;
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

// The arrays of the .npz file `path`: each member goes through read_npy (written to a private
// temporary folder), so .npz arrays are parsed and checked exactly as .npy files are.
kiln::Status read_npz(const std::string& path, std::vector<std::pair<std::string, kiln::Tensor>>& arrays) {
  KILN_ASSIGN_OR_RETURN(kiln::MappedFile file, kiln::MappedFile::map(path, ".npz file"));
  KILN_ASSIGN_OR_RETURN(std::vector<NpzMember> members, npz_members(file.bytes(), path));
  const TempDir dir("kiln-npz");
  if (dir.path().empty()) return kiln::io_error("cannot make a temporary folder to read '" + path + "'");
  for (const NpzMember& m : members) {
    const std::string npy = (std::filesystem::path(dir.path()) / "member.npy").string();
    std::FILE* f = std::fopen(npy.c_str(), "wb");
    if (!f) return kiln::io_error("cannot write a temporary file to read '" + path + "'");
    const bool ok = std::fwrite(m.npy.data(), 1, m.npy.size(), f) == m.npy.size();
    if (std::fclose(f) != 0 || !ok) return kiln::io_error("cannot write a temporary file to read '" + path + "'");
    auto t = kiln::read_npy(npy);
    if (!t.ok()) return kiln::Status(t.status().code(), "'" + path + "', array '" + m.name + "': " + t.status().message());
    arrays.emplace_back(m.name, std::move(*t));
  }
  return kiln::Status::Ok();
}

}  // namespace

void PluginArgs::add_to(CLI::App& app) {
  app.add_option("--plugin", libraries,
                 "a kiln plugin library to load first (repeatable): a path, or a file name found in KILN_PLUGIN_PATH")
      ->allow_extra_args(false);
  app.add_flag("--plugin-override", allow_override, "let --plugin libraries replace ops built into kiln");
}

kiln::Status PluginArgs::load() const {
  for (const std::string& lib : libraries) KILN_RETURN_IF_ERROR(kiln::load_plugin(lib, allow_override).status());
  return kiln::Status::Ok();
}

std::string default_timing_cache_dir() {
  std::filesystem::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/') base = xdg;
  else if (const char* home = std::getenv("HOME"); home && *home == '/') base = std::filesystem::path(home) / ".cache";
  else return "";
  const std::filesystem::path dir = base / "kiln" / "timing";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return !ec && std::filesystem::is_directory(dir, ec) ? dir.string() : std::string();
}

void CacheArgs::add_to(CLI::App& app) {
  app.add_flag("--no-cache", off,
               "an .onnx built for CUDA is tuned from scratch, without reading or adding to the user's timing cache "
               "(~/.cache/kiln/timing)");
  app.add_option("--on-mismatch", on_mismatch,
                 "an engine file built for another GPU, driver or library version: error (default), rebuild (from the "
                 "graph it holds, here), or rebuild-and-save (also keeps the rebuilt engine beside it, model.<hash>.kiln)")
      ->check(CLI::IsMember({"error", "rebuild", "rebuild-and-save"}));
}

kiln::EngineLoadOptions CacheArgs::load_options() const {
  kiln::EngineLoadOptions lo;
  auto policy = kiln::parse_on_mismatch(on_mismatch);
  if (policy.ok()) lo.on_mismatch = *policy;  // CLI11 checked the name
  if (!off && lo.on_mismatch != kiln::OnMismatch::kError) lo.timing_cache = default_timing_cache_dir();
  return lo;
}

void CacheArgs::apply(kiln::BuildOptions& o, const std::string& model) const {
  if (off || !o.tunes() || is_engine_file(model) || !o.timing_cache.empty()) return;
  o.timing_cache = default_timing_cache_dir();
  if (!o.timing_cache.empty())
    std::fprintf(stderr, "kiln: timing cache %s (layers measured before are not timed again; --no-cache to skip)\n",
                 o.timing_cache.c_str());
}

int fail(const kiln::Status& st) {
  std::cerr << "kiln: error: " << kiln::escape_invalid_utf8(st.to_string()) << "\n";  // names are bytes
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

kiln::Precision parse_precision(const std::string& p) {
  auto v = kiln::parse_precision(p);
  return v.ok() ? *v : kiln::Precision::kFloat32;
}

bool print_comparison(const std::vector<std::string>& a_names, const std::vector<kiln::Value>& ra,
                      const std::vector<std::string>& b_names, const std::vector<kiln::Value>& rb, const Tolerance& tol,
                      const char* indent) {
  bool ok = true;
  for (size_t i = 0; i < ra.size(); ++i) {
    size_t j = 0;
    while (j < b_names.size() && b_names[j] != a_names[i]) ++j;
    const std::string name = kiln::escape_invalid_utf8(a_names[i]);  // as printed
    if (j == b_names.size()) {
      j = i;
      if (j >= rb.size()) {
        std::printf("%s%s: MISSING in B\n", indent, name.c_str());
        ok = false;
        continue;
      }
      std::printf("%s%s: B has no output of this name; compared with B's output %zu ('%s')\n", indent, name.c_str(), j,
                  kiln::escape_invalid_utf8(b_names[j]).c_str());
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
    if (eq == std::string::npos && ends_with(spec, ".npz")) {  // every array of the archive, by its name
      std::vector<std::pair<std::string, kiln::Tensor>> arrays;
      KILN_RETURN_IF_ERROR(read_npz(spec, arrays));
      for (auto& [name, t] : arrays) feed[name] = kiln::Value::of(std::move(t));
      continue;
    }
    if (eq == std::string::npos)
      return kiln::invalid_argument("--input expects name=file.npy, name=file.npz or file.npz, got '" + spec + "'");
    const std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
    if (ends_with(file, ".npz")) {  // the archive's array of that name, or its only array
      std::vector<std::pair<std::string, kiln::Tensor>> arrays;
      KILN_RETURN_IF_ERROR(read_npz(file, arrays));
      const kiln::Tensor* chosen = arrays.size() == 1 ? &arrays[0].second : nullptr;
      std::string names;
      for (const auto& [n, t] : arrays) {
        if (n == name) chosen = &t;
        names += (names.empty() ? "'" : ", '") + n + "'";
      }
      if (!chosen)
        return kiln::invalid_argument("--input " + spec + ": '" + file + "' has no array named '" + name + "' (it holds " +
                                      (names.empty() ? std::string("none") : names) + ")");
      feed[name] = kiln::Value::of(*chosen);
      continue;
    }
    KILN_ASSIGN_OR_RETURN(kiln::Tensor t, kiln::read_npy(file));
    feed[name] = kiln::Value::of(t);
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

TempDir::TempDir(const std::string& prefix) {
  std::error_code ec;
  std::string tmpl = (std::filesystem::temp_directory_path(ec) / (prefix + "-XXXXXX")).string();
  if (!ec && mkdtemp(tmpl.data())) path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

kiln::Status write_text(const std::string& path, const std::string& text) {
  KILN_RETURN_IF_ERROR(kiln::check_writable_file(path, "output"));  // a FIFO would block fopen
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return kiln::io_error("cannot write '" + path + "'");
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (std::fclose(f) != 0 || !ok) return kiln::io_error("cannot write '" + path + "'");
  return kiln::Status::Ok();
}

}  // namespace kiln_cli
