// Files and numbers kiln cannot trust (issue 50): engines replaced whole under a running session,
// caches never written through a planted symlink, calibration folders that input names cannot
// leave, and NaN/±inf kept as the ONNX reference keeps them by the CPU activations.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/fused_common.h"
#include "kiln/kiln.h"
#include "onnx/onnx.pb.h"
#include "tune/timing_cache.h"
#include "util/atomic_file.h"
#include "test_elementwise_util.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system's temporary folder, removed with the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "kiln_untrusted_XXXXXX").string();
    path = ::mkdtemp(tmpl.data()) ? fs::path(tmpl) : fs::path();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// y = x + w, x and w float32 [4], w the constant `add`.
std::string add_model(float add) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("add");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(4);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(4);
  for (int i = 0; i < 4; ++i) w->add_float_data(add);
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  auto* out = g->add_output();
  out->set_name("y");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  return m.SerializeAsString();
}

std::vector<float> run_add(const Engine& e) {
  Tensor x = Tensor::empty(DataType::kFloat32, {4});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = static_cast<float>(i);
  auto ctx = e.create_context();
  EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
  if (!ctx.ok()) return {};
  auto out = (*ctx)->run({{"x", Value::of(x)}});
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out.ok()) return {};
  const Tensor& y = (*out)[0].tensor;
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

// Files in `dir` other than `keep`: a failed or finished write leaves no temporary file behind.
std::vector<std::string> strays(const fs::path& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), name) == keep.end()) out.push_back(name);
  }
  return out;
}

}  // namespace

// ---- 1. Engines are replaced whole: a session that loaded (mapped) the old file keeps its results.

TEST(UntrustedFiles, EngineSavedOverALoadedEngineLeavesItUnchanged) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string path = (dir.path / "model.kiln").string();
  auto one = Engine::build_from_bytes(add_model(1.0f));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_TRUE((*one)->save(path).ok());
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0);
  auto loaded = Engine::load(path);  // its weights are views of the mapped file
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(run_add(**loaded), (std::vector<float>{1, 2, 3, 4}));

  auto two = Engine::build_from_bytes(add_model(2.0f));
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  ASSERT_TRUE((*two)->save(path).ok());
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "the engine file was rewritten in place";
  // The running session still computes with the engine it loaded; a new load gets the new one.
  EXPECT_EQ(run_add(**loaded), (std::vector<float>{1, 2, 3, 4}));
  auto reloaded = Engine::load(path);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().to_string();
  EXPECT_EQ(run_add(**reloaded), (std::vector<float>{2, 3, 4, 5}));
  EXPECT_TRUE(strays(dir.path, {"model.kiln"}).empty());
}

TEST(UntrustedFiles, EngineSaveReplacesASymlinkInsteadOfWritingThroughIt) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path victim = dir.path / "victim.txt";
  write_text(victim, "keep me");
  const fs::path link = dir.path / "model.kiln";
  fs::create_symlink(victim, link);
  auto e = Engine::build_from_bytes(add_model(1.0f));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  ASSERT_TRUE((*e)->save(link.string()).ok());
  EXPECT_EQ(read_text(victim), "keep me");
  EXPECT_FALSE(fs::is_symlink(link));
  auto loaded = Engine::load(link.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(run_add(**loaded), (std::vector<float>{1, 2, 3, 4}));
}

TEST(UntrustedFiles, EngineSaveToAFolderOrFifoIsAClearErrorAndDevNullTakesIt) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  auto e = Engine::build_from_bytes(add_model(1.0f));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  fs::create_directory(dir.path / "sub");
  ASSERT_EQ(::mkfifo((dir.path / "fifo").c_str(), 0600), 0);
  for (const fs::path& target : {dir.path / "sub", dir.path / "fifo", fs::path("/dev/zero")}) {
    const Status s = (*e)->save(target.string());
    EXPECT_FALSE(s.ok()) << target;
    EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.to_string();
  }
  EXPECT_TRUE(fs::is_directory(dir.path / "sub"));
  EXPECT_TRUE(fs::is_fifo(dir.path / "fifo"));
  EXPECT_TRUE(strays(dir.path, {"sub", "fifo"}).empty());
  // The null device is written into, not replaced (#50 item 10): `kiln build -o /dev/null`.
  const Status null = (*e)->save("/dev/null");
  EXPECT_TRUE(null.ok()) << null.to_string();
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  const Status missing = (*e)->save((dir.path / "no" / "such" / "m.kiln").string());
  EXPECT_FALSE(missing.ok());
}

// ---- 6. Caches are written through an exclusive temporary file: a planted symlink is never followed.

TEST(UntrustedFiles, TimingCacheIgnoresAPlantedTemporarySymlink) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path victim = dir.path / "victim.txt";
  write_text(victim, "keep me");
  const fs::path cache = dir.path / "timing.cache";
  fs::create_symlink(victim, dir.path / "timing.cache.tmp");  // the name the old writer used
  TimingCache c;
  c.device = "cpu test";
  c.record("layer", "tactic", 1.5);
  ASSERT_TRUE(c.write(cache.string()).ok());
  EXPECT_EQ(read_text(victim), "keep me");
  auto back = TimingCache::read(cache.string());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->entries(), 1u);
  EXPECT_TRUE(strays(dir.path, {"victim.txt", "timing.cache", "timing.cache.tmp"}).empty());
}

TEST(UntrustedFiles, AtomicWriteNeverFollowsSymlinksAndLeavesNoTemporaryFile) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path victim = dir.path / "victim.txt";
  write_text(victim, "keep me");
  const fs::path target = dir.path / "out.txt";
  fs::create_symlink(victim, target);
  ASSERT_TRUE(write_file_atomically(target.string(), "new", "test file").ok());
  EXPECT_EQ(read_text(victim), "keep me");
  EXPECT_EQ(read_text(target), "new");
  EXPECT_FALSE(fs::is_symlink(target));
  ASSERT_EQ(::mkfifo((dir.path / "fifo").c_str(), 0600), 0);
  EXPECT_FALSE(write_file_atomically((dir.path / "fifo").string(), "x", "test file").ok());  // never blocks
  EXPECT_TRUE(strays(dir.path, {"victim.txt", "out.txt", "fifo"}).empty());
}

// ---- 5. Calibration input names map to files inside the calibration folder only.

TEST(UntrustedFiles, CalibrationInputNamesThatArePathsAreRefused) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const fs::path calib = dir.path / "calib";
  fs::create_directories(calib / "set0");
  Tensor t = Tensor::empty(DataType::kFloat32, {2});
  t.data<float>()[0] = t.data<float>()[1] = 1.0f;
  // What a hostile name would reach: files outside the folder.
  ASSERT_TRUE(write_npy((dir.path / "secret.npy").string(), t).ok());
  ASSERT_TRUE(write_npy((calib / "set0" / "ok.npy").string(), t).ok());
  const std::vector<std::string> hostile = {"../secret", "../../secret", (dir.path / "secret").string(), "a\\b", ".", "..",
                                            std::string("ok\0/../../secret", 16), "sub/ok"};
  for (const std::string& name : hostile) {
    auto sets = read_calibration_dir(calib.string(), {"ok", name});
    ASSERT_FALSE(sets.ok()) << name;
    EXPECT_EQ(sets.status().code(), StatusCode::kInvalidArgument) << sets.status().to_string();
    EXPECT_NE(sets.status().message().find("input '" + name + "'"), std::string::npos) << sets.status().to_string();
    EXPECT_NE(sets.status().message().find("inside the folder"), std::string::npos) << sets.status().to_string();
  }
  // Plain names still read.
  auto ok = read_calibration_dir(calib.string(), {"ok"});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->size(), 1u);
}

// ---- 4. NaN and ±inf through the CPU activations, against numpy's formulas (onnx.reference).

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
const std::vector<float> kSpecial = {kNaN, kInf, -kInf, 0.0f, -1.0f, 2.0f, 0.3f, -0.3f};

double np_clip(double x, double lo, double hi) { return std::isnan(x) ? x : std::min(std::max(x, lo), hi); }
double np_maximum(double a, double b) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b); }
double np_minimum(double a, double b) { return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b); }
double np_where(bool c, double a, double b) { return c ? a : b; }

struct NanCase {
  std::string op;
  std::map<std::string, ir::Attribute> attrs;
  std::function<double(double)> ref;  // onnx.reference's formula, in numpy's NaN semantics
};

std::vector<NanCase> nan_cases() {
  using ewtest::attr_f;
  const double sa = 1.67326319217681884765625, sg = 1.05070102214813232421875;
  return {
      {"Relu", {}, [](double x) { return np_maximum(x, 0); }},
      {"Celu", {}, [](double x) { return np_maximum(0, x) + np_minimum(0, std::exp(x) - 1); }},
      {"HardSigmoid", {}, [](double x) { return np_clip(x * 0.2 + 0.5, 0, 1); }},
      {"HardSwish", {}, [](double x) { return x * np_maximum(0, np_minimum(1, x / 6 + 0.5)); }},
      {"LeakyRelu", {}, [](double x) { return np_where(x > 0, x, x * 0.01); }},
      {"Elu", {}, [](double x) { return np_where(x > 0, x, std::exp(x) - 1); }},
      {"Selu", {}, [=](double x) { return np_where(x > 0, x * sg, (std::exp(x) * sa - sa) * sg); }},
      {"ThresholdedRelu", {}, [](double x) { return np_where(x > 1, x, 0); }},
      {"Shrink", {{"lambd", attr_f(0.5f)}, {"bias", attr_f(0.1f)}},
       [](double x) { return np_where(x < -0.5, x + 0.1, np_where(x > 0.5, x - 0.1, 0)); }},
      {"Softplus", {}, [](double x) { return std::log1p(std::exp(x)); }},
      {"Mish", {}, [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }},
      {"Softsign", {}, [](double x) { return x / (1 + std::fabs(x)); }},
      {"Sigmoid", {}, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {"Tanh", {}, [](double x) { return std::tanh(x); }},
      {"Gelu", {}, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      // (Clip without bounds clamps to the dtype's lowest and max, the spec's defaults, as onnxruntime
      // does; onnx's Python reference returns the input unchanged. Its NaN: ClipAndPReluKeepNaN.)
  };
}

void expect_like_reference(const std::string& what, const std::vector<float>& in, const std::vector<float>& got,
                           const std::function<double(double)>& ref) {
  ASSERT_EQ(got.size(), in.size()) << what;
  for (size_t i = 0; i < in.size(); ++i) {
    const double want = ref(in[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "(" << in[i] << ") = " << got[i] << ", the reference gives NaN";
    } else if (std::isinf(want)) {
      EXPECT_EQ(static_cast<double>(got[i]), want) << what << "(" << in[i] << ")";
    } else {
      EXPECT_NEAR(got[i], want, 1e-5 + 1e-5 * std::fabs(want)) << what << "(" << in[i] << ")";
    }
  }
}

}  // namespace

TEST(UntrustedNumbers, CpuActivationsKeepNaNAndInfAsTheReference) {
  for (const NanCase& c : nan_cases()) {
    for (DataType dt : {DataType::kFloat32, DataType::kFloat64}) {
      Tensor x = Tensor::empty(dt, {static_cast<int64_t>(kSpecial.size())});
      for (size_t i = 0; i < kSpecial.size(); ++i) {
        if (dt == DataType::kFloat32) x.data<float>()[i] = kSpecial[i];
        else x.data<double>()[i] = kSpecial[i];
      }
      auto y = ewtest::run(c.op, {x}, c.attrs, 20);
      ASSERT_TRUE(y.ok()) << c.op << ": " << y.status().to_string();
      std::vector<float> got;
      for (int64_t i = 0; i < y->numel(); ++i)
        got.push_back(dt == DataType::kFloat32 ? y->data<float>()[i] : static_cast<float>(y->data<double>()[i]));
      expect_like_reference(c.op + std::string(dt == DataType::kFloat32 ? " f32" : " f64"), kSpecial, got, c.ref);
    }
  }
}

TEST(UntrustedNumbers, ClipAndPReluKeepNaN) {
  auto clip = ewtest::run("Clip", {ewtest::f32({8}, kSpecial), ewtest::f32({}, {-0.5f}), ewtest::f32({}, {0.5f})}, {}, 13);
  ASSERT_TRUE(clip.ok()) << clip.status().to_string();
  expect_like_reference("Clip", kSpecial, ewtest::values<float>(*clip), [](double x) { return np_clip(x, -0.5, 0.5); });
  auto prelu = ewtest::run("PRelu", {ewtest::f32({8}, kSpecial), ewtest::f32({1}, {0.25f})}, {}, 16);
  ASSERT_TRUE(prelu.ok()) << prelu.status().to_string();
  expect_like_reference("PRelu", kSpecial, ewtest::values<float>(*prelu), [](double x) { return np_where(x < 0, x * 0.25, x); });
}

// The epilogues kiln's fused kernels apply (FusedConv/FusedGemm/FusedMatMul, depthwise convolution),
// on every path the CPU takes (baseline, AVX2, AVX-512 where present).
TEST(UntrustedNumbers, FusedEpiloguesKeepNaNAsTheUnfusedOps) {
  struct Epi {
    Activation act;
    std::function<double(double)> ref;
  };
  const std::vector<Epi> cases = {
      {{ActKind::kRelu, 0, 0}, [](double x) { return np_maximum(x, 0); }},
      {{ActKind::kLeakyRelu, 0.1f, 0}, [](double x) { return np_where(x > 0, x, x * 0.1); }},
      {{ActKind::kClip, -0.5f, 0.5f}, [](double x) { return np_clip(x, -0.5, 0.5); }},
      {{ActKind::kHardSigmoid, 0.2f, 0.5f}, [](double x) { return np_clip(x * 0.2 + 0.5, 0, 1); }},
      {{ActKind::kHardSwish, 0, 0}, [](double x) { return x * np_maximum(0, np_minimum(1, x / 6 + 0.5)); }},
      {{ActKind::kSigmoid, 0, 0}, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {{ActKind::kTanh, 0, 0}, [](double x) { return std::tanh(x); }},
  };
  // 4 rows of 8 values: the specials repeated, long enough for the vector loops.
  std::vector<float> in;
  for (int r = 0; r < 4; ++r) in.insert(in.end(), kSpecial.begin(), kSpecial.end());
  for (const Epi& e : cases) {
    for (bool with_bias : {false, true}) {
      std::vector<float> y = in;
      const std::vector<float> bias(kSpecial.size(), 0.0f);
      cpu::fused::epilogue_rows_for(e.act.kind)(y.data(), 0, 4, static_cast<int64_t>(kSpecial.size()),
                                                with_bias ? bias.data() : nullptr, e.act);
      expect_like_reference(std::string(activation_name(e.act.kind)) + (with_bias ? " +bias" : ""), in, y, e.ref);
    }
  }
}
