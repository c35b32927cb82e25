// Runs single-node cases dumped from onnx's backend test data (a text format written by a small
// Python script: op, opset, attributes, inputs, expected outputs) against the CPU kernels.
// Skipped unless KILN_NODE_DUMP names a directory of such files; the filter KILN_NODE_DUMP_FILTER
// (a substring) picks cases.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_reduce_helpers.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

std::string unhex(const std::string& h) {
  if (h == "-") return {};
  std::string s;
  for (size_t i = 0; i + 1 < h.size(); i += 2) s.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return s;
}

Tensor read_tensor(std::istringstream& ls) {
  std::string dt_s;
  ls >> dt_s;
  if (dt_s == "none") return {};
  const auto dt = static_cast<DataType>(std::stoi(dt_s));
  int rank;
  ls >> rank;
  Shape shape(rank);
  for (auto& d : shape) ls >> d;
  Tensor t = Tensor::empty(dt, shape);
  if (dt == DataType::kString) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      std::string h;
      ls >> h;
      t.data<std::string>()[i] = unhex(h);
    }
  } else {
    std::string h;
    ls >> h;
    const std::string bytes = unhex(h);
    if (bytes.size() == t.nbytes() && !bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
  }
  return t;
}

double elem(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DataType::kFloat32: return t.data<float>()[i];
    case DataType::kFloat64: return t.data<double>()[i];
    case DataType::kFloat16: return f16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kBFloat16: return bf16_to_f32(t.data<uint16_t>()[i]);
    case DataType::kInt8: return t.data<int8_t>()[i];
    case DataType::kUInt8: return t.data<uint8_t>()[i];
    case DataType::kInt16: return t.data<int16_t>()[i];
    case DataType::kUInt16: return t.data<uint16_t>()[i];
    case DataType::kInt32: return t.data<int32_t>()[i];
    case DataType::kUInt32: return t.data<uint32_t>()[i];
    case DataType::kInt64: return static_cast<double>(t.data<int64_t>()[i]);
    case DataType::kUInt64: return static_cast<double>(t.data<uint64_t>()[i]);
    case DataType::kBool: return t.data<bool>()[i];
    default: return NAN;
  }
}

// "" when equal within tolerance, else what differs.
std::string compare(const Tensor& want, const Tensor& got, bool shape_only) {
  if (!got.defined()) return "output missing";
  if (want.dtype() != got.dtype()) return std::string("dtype ") + dtype_name(got.dtype()) + " != " + dtype_name(want.dtype());
  if (want.shape() != got.shape()) return "shape " + shape_to_string(got.shape()) + " != " + shape_to_string(want.shape());
  if (shape_only) return "";
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (want.dtype() == DataType::kString) {
      if (want.data<std::string>()[i] != got.data<std::string>()[i])
        return "at " + std::to_string(i) + ": '" + got.data<std::string>()[i] + "' != '" + want.data<std::string>()[i] + "'";
      continue;
    }
    const double w = elem(want, i), g = elem(got, i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (w == g) continue;
    const double tol = want.dtype() == DataType::kFloat16 || want.dtype() == DataType::kBFloat16 ? 1e-2 : 1e-3;
    if (!(std::fabs(w - g) <= 1e-4 + tol * std::fabs(w)))
      return "at " + std::to_string(i) + ": " + std::to_string(g) + " != " + std::to_string(w);
  }
  return "";
}

}  // namespace

TEST(MiscConformance, DumpedOnnxNodeCases) {
  const char* dir = std::getenv("KILN_NODE_DUMP");
  if (!dir) GTEST_SKIP() << "set KILN_NODE_DUMP to a directory of dumped node cases";
  const char* filter = std::getenv("KILN_NODE_DUMP_FILTER");
  int passed = 0, failed = 0;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    const std::string name = path.stem().string();
    if (filter && name.find(filter) == std::string::npos) continue;
    std::ifstream f(path);
    std::string line, op;
    int opset = 0, nout = 1;
    std::vector<Tensor> ins, outs;
    std::vector<std::pair<std::string, ir::Attribute>> attrs;
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      std::string key;
      ls >> key;
      if (key == "op") ls >> op;
      else if (key == "opset") ls >> opset;
      else if (key == "nout") ls >> nout;
      else if (key == "in") ins.push_back(read_tensor(ls));
      else if (key == "out") outs.push_back(read_tensor(ls));
      else if (key == "attr") {
        std::string an, kind;
        ls >> an >> kind;
        ir::Attribute a;
        size_t n = 0;
        if (kind == "i") { a.kind = ir::Attribute::Kind::kInt; ls >> a.i; }
        else if (kind == "f") { a.kind = ir::Attribute::Kind::kFloat; ls >> a.f; }
        else if (kind == "s") { a.kind = ir::Attribute::Kind::kString; std::string h; ls >> h; a.s = unhex(h); }
        else if (kind == "ints") { a.kind = ir::Attribute::Kind::kInts; ls >> n; a.ints.resize(n); for (auto& v : a.ints) ls >> v; }
        else if (kind == "floats") { a.kind = ir::Attribute::Kind::kFloats; ls >> n; a.floats.resize(n); for (auto& v : a.floats) ls >> v; }
        else if (kind == "strings") {
          a.kind = ir::Attribute::Kind::kStrings; ls >> n;
          for (size_t k = 0; k < n; ++k) { std::string h; ls >> h; a.strings.push_back(unhex(h)); }
        }
        attrs.emplace_back(an, a);
      }
    }
    OneNode node(op, opset, ins, nout);
    for (auto& [k, a] : attrs) node.node->attrs[k] = a;
    const bool random = op.rfind("Random", 0) == 0 || op == "Bernoulli" || op == "Multinomial";
    auto r = node.run();
    std::string why;
    if (!r.ok()) why = r.status().to_string();
    for (size_t k = 0; why.empty() && k < outs.size(); ++k) {
      why = compare(outs[k], (*r)[k].tensor, random);
      if (!why.empty()) why = "output " + std::to_string(k) + ": " + why;
    }
    if (why.empty()) ++passed;
    else { ++failed; ADD_FAILURE() << name << ": " << why; }
  }
  std::printf("dumped node cases: %d passed, %d failed\n", passed, failed);
}
