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

TEST(UntrustedFiles, EngineSaveToAFolderOrDeviceIsAClearError) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  auto e = Engine::build_from_bytes(add_model(1.0f));
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  fs::create_directory(dir.path / "sub");
  for (const std::string& target : {(dir.path / "sub").string(), std::string("/dev/null")}) {
    const Status s = (*e)->save(target);
    EXPECT_FALSE(s.ok()) << target;
    EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.to_string();
  }
  EXPECT_TRUE(fs::is_directory(dir.path / "sub"));
  EXPECT_TRUE(strays(dir.path, {"sub"}).empty());
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
