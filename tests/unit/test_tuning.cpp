// Tuning: tactics chosen by timing on the device, the timing cache, shape profiles, build progress.
// Runs on the CPU (its convolution offers tactics: how (image, group) GEMMs are scheduled, and
// depthwise through its own kernel or im2col); tests/gpu/ runs the CUDA side on the H100.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/packed_gemm.h"
#include "engine/engine_generated.h"
#include "ir/float_types.h"
#include "kiln/kiln.h"
#include "plan/plan.h"
#include "runtime/engine_impl.h"
#include "runtime/executor.h"
#include "tune/tuner.h"
#include "tune/timing_cache.h"
#include "source_dir.h"

using namespace kiln;

namespace {

const std::string kExample = testing_support::source_dir() + "/examples/tiny_cnn.onnx";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kiln_tuning_" + std::to_string(::getpid()) + "_" + name)).string();
}

Tensor images(int64_t batch, uint32_t seed = 3) {
  Tensor t = Tensor::empty(DataType::kFloat32, {batch, 3, 32, 32});
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

std::vector<float> run(const Engine& e, const Tensor& x, int* profile = nullptr) {
  auto ctx = e.create_context();
  EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
  auto out = (*ctx)->run({{"image", Value::of(x)}});
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out.ok()) return {};
  if (profile) *profile = (*ctx)->active_profile();
  const Tensor& y = (*out)[0].tensor;
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

ShapeProfile batch_profile(int64_t lo, int64_t opt, int64_t hi) {
  ShapeProfile p;
  p.min["image"] = {lo, 3, 32, 32};
  p.opt["image"] = {opt, 3, 32, 32};
  p.max["image"] = {hi, 3, 32, 32};
  return p;
}

// Tuned builds with a fresh timing cache at `path`.
BuildOptions tuned_with_cache(const std::string& path, ShapeProfile p) {
  std::remove(path.c_str());
  BuildOptions o;
  o.opt_level = 1;  // the model as written: plain Conv nodes with their channels-first tactics
  o.profiles = {std::move(p)};
  o.tune = 1;
  o.timing_cache = path;
  // No candidate skipped for time: these tests count the cache's entries, and on a loaded 2-core CI
  // machine a layer's default 2 s could run out before its last candidate (one entry short: 14 of 15).
  o.tune_layer_seconds = 120;
  o.tune_budget_seconds = 600;
  return o;
}

// Steps of a built engine that the tuner gave a tactic (with its time: measured, or from the timing
// cache), by node name.
std::map<std::string, std::vector<std::string>> tactics_of(const Engine& e) {
  std::map<std::string, std::vector<std::string>> r;
  for (const Step& s : e.impl().plan->steps)
    if (std::any_of(s.tactic_ms.begin(), s.tactic_ms.end(), [](double ms) { return ms > 0; }))
      r[e.impl().plan->node(s).name] = s.tactics;
  return r;
}

// Steps whose tactic the build recorded as the kernel's own choice (no time), by node name.
std::map<std::string, std::vector<std::string>> own_choices_of(const Engine& e) {
  std::map<std::string, std::vector<std::string>> r;
  for (const Step& s : e.impl().plan->steps)
    if (!s.tactics.empty() && std::all_of(s.tactic_ms.begin(), s.tactic_ms.end(), [](double ms) { return ms == 0; }))
      r[e.impl().plan->node(s).name] = s.tactics;
  return r;
}

}  // namespace

TEST(Tuning, CpuConvolutionsGetTimedTacticsThatComputeTheSameResult) {
  BuildOptions o;
  o.opt_level = 1;  // plain Conv nodes (level 2 fuses them channels-last: ChannelsLastConvolutionTactics below)
  o.profiles = {batch_profile(1, 4, 8)};
  o.tune = 1;
  auto tuned = Engine::build(kExample, o);
  ASSERT_TRUE(tuned.ok()) << tuned.status().to_string();
  const auto chosen = tactics_of(**tuned);
  ASSERT_EQ(chosen.size(), 4u) << "every convolution of tiny_cnn has two schedules at batch 4, its Gemm two kernels";
  for (const Step& s : (*tuned)->impl().plan->steps) {
    if (s.tactics.empty()) continue;
    ASSERT_EQ(s.tactics.size(), 1u);
    EXPECT_TRUE(s.tactics[0] == "jobs-parallel" || s.tactics[0] == "jobs-serial" || s.tactics[0] == "onednn" ||
                s.tactics[0] == "onednn-winograd" || s.tactics[0] == "sgemm" || s.tactics[0] == "packed")
        << s.tactics[0];
    ASSERT_EQ(s.tactic_ms.size(), 1u);
    EXPECT_GT(s.tactic_ms[0], 0.0);
  }
  o.tune = 0;
  auto plain = Engine::build(kExample, o);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(tactics_of(**plain).empty());
  // Untuned, the same steps carry their kernels' own choices, decided at build (UntunedBuild* below).
  std::set<std::string> tuned_steps, untuned_steps;
  for (const auto& [node, t] : chosen) tuned_steps.insert(node);
  for (const auto& [node, t] : own_choices_of(**plain)) untuned_steps.insert(node);
  EXPECT_EQ(untuned_steps, tuned_steps);
  const Tensor x = images(4);
  const auto a = run(**tuned, x), b = run(**plain, x);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5);
  // The choice survives the engine file and shows in the plan report.
  auto bytes = (*tuned)->serialize();
  ASSERT_TRUE(bytes.ok());
  auto loaded = Engine::load_from_bytes(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(tactics_of(**loaded), chosen);
  EXPECT_EQ(run(**loaded, x), a);
  EXPECT_NE((*loaded)->placement_report().find("{tactic "), std::string::npos) << (*loaded)->placement_report();
}

TEST(Tuning, EachProfileIsTunedAndChosenByInputShape) {
  BuildOptions o;
  o.opt_level = 1;
  o.profiles = {batch_profile(1, 1, 2), batch_profile(3, 6, 16)};
  o.tune = 1;
  auto e = Engine::build(kExample, o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  // Batch 1 has one GEMM per convolution (im2col or oneDNN); batch 6 has six (scheduled two ways, or oneDNN).
  for (const Step& s : (*e)->impl().plan->steps) {
    if (s.tactics.empty()) continue;
    ASSERT_EQ(s.tactics.size(), 2u);
    EXPECT_TRUE(s.tactics[0] == "im2col" || s.tactics[0] == "onednn" || s.tactics[0] == "onednn-winograd" ||
                s.tactics[0] == "sgemm" || s.tactics[0] == "packed" || s.tactics[0] == "gemv")
        << s.tactics[0];
    EXPECT_TRUE(s.tactics[1] == "jobs-parallel" || s.tactics[1] == "jobs-serial" || s.tactics[1] == "onednn" ||
                s.tactics[1] == "onednn-winograd" || s.tactics[1] == "sgemm" || s.tactics[1] == "packed")
        << s.tactics[1];
  }
  EXPECT_EQ(tactics_of(**e).size(), 4u);  // three convolutions and the Gemm
  int profile = -1;
  EXPECT_EQ(run(**e, images(2), &profile).size(), 20u);
  EXPECT_EQ(profile, 0);
  EXPECT_EQ(run(**e, images(5), &profile).size(), 50u);
  EXPECT_EQ(profile, 1);
  // Outside every profile: an error naming the input, its shape and the ranges.
  auto ctx = (*e)->create_context();
  ASSERT_TRUE(ctx.ok());
  auto out = (*ctx)->run({{"image", Value::of(images(17))}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  const std::string msg = out.status().message();
  EXPECT_NE(msg.find("'image'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[17,3,32,32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3,3,32,32]..[16,3,32,32]"), std::string::npos) << msg;
  // Profiles are kept in the engine file, and enforced after loading.
  auto loaded = Engine::load_from_bytes(*(*e)->serialize());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  ASSERT_EQ((*loaded)->profiles().size(), 2u);
  EXPECT_EQ((*loaded)->profiles()[1].opt.at("image"), (std::vector<int64_t>{6, 3, 32, 32}));
  auto lctx = (*loaded)->create_context();
  ASSERT_TRUE(lctx.ok());
  EXPECT_FALSE((*lctx)->run({{"image", Value::of(images(17))}}).ok());
}

TEST(Tuning, BadProfilesAreRefusedAtBuild) {
  auto refuse = [](ShapeProfile p, const std::string& want) {
    BuildOptions o;
    o.profiles = {std::move(p)};
    auto e = Engine::build(kExample, o);
    ASSERT_FALSE(e.ok());
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(e.status().message().find(want), std::string::npos) << e.status().message();
  };
  refuse(batch_profile(4, 2, 8), "min <= opt <= max");
  ShapeProfile unknown = batch_profile(1, 1, 1);
  unknown.min["nope"] = unknown.opt["nope"] = unknown.max["nope"] = {1};
  refuse(unknown, "'nope', which is not an input");
  ShapeProfile fixed = batch_profile(1, 1, 1);
  fixed.max["image"] = {1, 3, 64, 32};
  refuse(fixed, "fixed at 32 by the model");
  ShapeProfile rank = batch_profile(1, 1, 1);
  rank.min["image"] = rank.opt["image"] = rank.max["image"] = {1, 3, 32};
  refuse(rank, "rank 4");
}

TEST(Tuning, FixedShapesBecomeStaticInputs) {
  BuildOptions o;
  ShapeProfile p = batch_profile(2, 2, 2);
  o.profiles = {p};
  auto e = Engine::build(kExample, o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ((*e)->inputs()[0].shape, (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_EQ(run(**e, images(2)).size(), 20u);
}

TEST(Tuning, TimingCacheIsReusedAndDecidesTheChoice) {
  const std::string path = temp_path("cache.txt");
  BuildOptions o = tuned_with_cache(path, batch_profile(1, 4, 8));
  auto first = Engine::build(kExample, o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto cache = TimingCache::read(path);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  EXPECT_EQ(cache->layers.size(), 4u);
  // Convolutions: jobs-parallel, jobs-serial, onednn, and onednn-winograd where oneDNN has it; the
  // Gemm: onednn, sgemm, and packed where AVX2/FMA runs.
  EXPECT_EQ(cache->entries(), (kiln::cpu::packed_gemm_available() ? 12u : 11u) +
                                  (kiln::cpu::onednn_winograd_available() ? 3u : 0u));
  EXPECT_NE(cache->device.find(version()), std::string::npos);
  // Rewrite the cache so that "jobs-serial" looks fastest everywhere: the next build must follow the
  // cache (no timing), which shows that it reads it.
  TimingCache edited = *cache;
  for (auto& [layer, tactics] : edited.layers) {
    if (!tactics.count("jobs-serial")) {  // the Gemm: sgemm looks fastest
      tactics["sgemm"] = 1e-6;
      continue;
    }
    tactics["jobs-serial"] = 1e-6;
    tactics["jobs-parallel"] = std::numeric_limits<double>::infinity();  // "not usable": never chosen
  }
  ASSERT_TRUE(edited.write(path).ok());
  auto reread = TimingCache::read(path);
  ASSERT_TRUE(reread.ok()) << reread.status().to_string();
  EXPECT_TRUE(std::isinf(reread->layers.begin()->second.at("jobs-parallel")));
  // Every layer is in the cache: the build takes them from the plan's shapes without a tuning run.
  std::vector<std::string> details;
  o.progress = [&](const BuildProgress& p) {
    if (p.stage == "tune" && p.total) details.push_back(p.detail);
  };
  auto second = Engine::build(kExample, o);
  EXPECT_EQ(details, std::vector<std::string>{"from the timing cache"});
  ASSERT_TRUE(second.ok());
  for (const auto& [node, t] : tactics_of(**second)) EXPECT_EQ(t[0], node == "fc" ? "sgemm" : "jobs-serial") << node;
  for (const Step& s : (*second)->impl().plan->steps)
    if (!s.tactics.empty()) EXPECT_DOUBLE_EQ(s.tactic_ms[0], 1e-6);
  std::remove(path.c_str());
}

// Candidates the layer's time limit left untried are not recorded as unusable: the next build with
// the cache measures them, taking the ones measured before from the cache — repeated builds finish
// the search instead of freezing "untried" as "never".
TEST(Tuning, UntriedCandidatesAreLeftForTheNextBuild) {
  const std::string path = temp_path("partial.txt");
  BuildOptions o = tuned_with_cache(path, batch_profile(1, 4, 8));
  o.tune_layer_seconds = -1;  // a limit already over when the first candidate comes
  auto first = Engine::build(kExample, o);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_TRUE(tactics_of(**first).empty());  // nothing timed: the kernels' own choices
  auto none = TimingCache::read(path);
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(none->entries(), 0u);
  // A full search, then a cache that keeps one candidate per layer with a tiny time: a build whose
  // limit is over again measures nothing and still takes that candidate from the cache.
  o.tune_layer_seconds = 2.0;
  ASSERT_TRUE(Engine::build(kExample, o).ok());
  auto full = TimingCache::read(path);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  ASSERT_EQ(full->layers.size(), 4u);
  TimingCache partial = *full;
  std::map<std::string, std::string> kept;  // layer key → the candidate kept
  for (auto& [layer, tactics] : partial.layers) {
    const std::string last = tactics.rbegin()->first;
    tactics = {{last, 1e-6}};
    kept[layer] = last;
  }
  ASSERT_TRUE(partial.write(path).ok());
  o.tune_layer_seconds = -1;
  auto third = Engine::build(kExample, o);
  ASSERT_TRUE(third.ok()) << third.status().to_string();
  std::set<std::string> chosen;
  for (const auto& [node, t] : tactics_of(**third)) chosen.insert(t[0]);
  std::set<std::string> want;
  for (const auto& [layer, t] : kept) want.insert(t);
  EXPECT_EQ(chosen, want);
  for (const Step& s : (*third)->impl().plan->steps)
    if (!s.tactics.empty()) EXPECT_DOUBLE_EQ(s.tactic_ms[0], 1e-6);
  // The cache keeps what it knew and gained nothing untried.
  auto after = TimingCache::read(path);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->entries(), kept.size());
  std::remove(path.c_str());
}

TEST(Tuning, DamagedOrForeignCachesAreNotTrusted) {
  const std::string path = temp_path("bad.txt");
  BuildOptions o;
  o.profiles = {batch_profile(1, 4, 8)};
  o.tune = 1;
  o.timing_cache = path;
  ASSERT_TRUE(Engine::build(kExample, o).ok());
  std::string text;
  {
    std::ifstream f(path);
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  // One changed digit: the checksum refuses it; the build warns, tunes, and writes a good cache.
  const size_t digit = text.find_first_of("0123456789", text.find('\t'));
  ASSERT_NE(digit, std::string::npos);
  std::string damaged = text;
  damaged[digit] = damaged[digit] == '9' ? '8' : '9';
  {
    std::ofstream f(path, std::ios::trunc);
    f << damaged;
  }
  EXPECT_FALSE(TimingCache::read(path).ok());
  ASSERT_TRUE(Engine::build(kExample, o).ok());
  EXPECT_TRUE(TimingCache::read(path).ok());
  // Another device's cache: ignored, and left as it was.
  TimingCache foreign;
  foreign.device = "kiln 0.0 | some other machine";
  foreign.record("cpu.Conv.any.im2col_sgemm x #0", "jobs-serial", 1.0);
  ASSERT_TRUE(foreign.write(path).ok());
  auto e = Engine::build(kExample, o);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(tactics_of(**e).size(), 4u);
  auto after = TimingCache::read(path);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->device, foreign.device);
  EXPECT_EQ(after->entries(), 1u);
  // Garbage of any kind is an error, never a crash.
  for (const std::string& junk : {std::string(), std::string("kiln-timing-cache 1\n"), std::string("\0\0\0", 3),
                                  std::string("kiln-timing-cache 1\ndevice x\na\tb\tnan\nend 0\n")}) {
    {
      std::ofstream f(path, std::ios::trunc | std::ios::binary);
      f << junk;
    }
    EXPECT_FALSE(TimingCache::read(path).ok());
  }
  std::remove(path.c_str());
}

TEST(Tuning, CachesMergeKeepingTheFastestAndRefuseOtherDevices) {
  const std::string a = temp_path("a.txt"), b = temp_path("b.txt"), c = temp_path("c.txt");
  TimingCache x, y;
  x.device = y.device = "dev";
  x.record("L1", "t0", 2.0);
  x.record("L1", "t1", 3.0);
  y.record("L1", "t0", 1.5);
  y.record("L2", "t0", 4.0);
  ASSERT_TRUE(x.write(a).ok());
  ASSERT_TRUE(y.write(b).ok());
  ASSERT_TRUE(merge_timing_caches({a, b}, c).ok());
  auto m = TimingCache::read(c);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->entries(), 3u);
  EXPECT_DOUBLE_EQ(m->layers["L1"]["t0"], 1.5);
  EXPECT_DOUBLE_EQ(m->layers["L1"]["t1"], 3.0);
  y.device = "other";
  ASSERT_TRUE(y.write(b).ok());
  Status st = merge_timing_caches({a, b}, c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("different devices"), std::string::npos);
  for (const auto& p : {a, b, c}) std::remove(p.c_str());
}

TEST(Tuning, BuildReportsProgressByStage) {
  BuildOptions o;
  o.profiles = {batch_profile(1, 4, 8)};
  o.tune = 1;
  std::vector<std::string> stages;
  int tuned = 0, total = 0;
  o.progress = [&](const BuildProgress& p) {
    if (stages.empty() || stages.back() != p.stage) stages.push_back(p.stage);
    if (p.stage == "tune" && p.total) {
      tuned = p.done;
      total = p.total;
    }
  };
  ASSERT_TRUE(Engine::build(kExample, o).ok());
  EXPECT_EQ(stages, (std::vector<std::string>{"import", "optimize", "lower", "tune", "done"}));
  EXPECT_EQ(tuned, 4);
  EXPECT_EQ(total, 4);
}

// Device tensors on a machine without that device, or of the wrong size: errors, never a crash.
TEST(DeviceIo, ClearErrorsWithoutTheDevice) {
  Tensor host = Tensor::empty(DataType::kFloat32, {2, 3});
  Tensor other = Tensor::empty(DataType::kFloat32, {3, 3});
  Status st = transfer(host, other);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dtype and size must match"), std::string::npos) << st.message();
  auto cpu = allocate_tensor(DataType::kFloat32, {2, 3}, Device{});
  ASSERT_TRUE(cpu.ok());
  EXPECT_TRUE(cpu->device().is_cpu());
  EXPECT_FALSE(allocate_tensor(DataType::kFloat32, {-1}, Device{}).ok());
  // A CPU engine refuses a tensor that claims to live on a GPU, whether or not one is here.
  float fake[3 * 32 * 32];
  Tensor dev = Tensor::borrow(DataType::kFloat32, {1, 3, 32, 32}, fake, Device{DeviceType::kCUDA});
  auto e = Engine::build(kExample);
  ASSERT_TRUE(e.ok());
  auto ctx = (*e)->create_context();
  auto r = (*ctx)->run({{"image", Value::of(dev)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CUDA tensor cannot be given here (this is a CPU engine)"), std::string::npos)
      << r.status().message();
}

// The "onednn" tactic (oneDNN's convolution primitive, weights reordered once per shape) forced on
// every convolution through the cache computes what im2col does, also after the engine file.
// (Depthwise convolutions through it: tests/python/test_tuning_cli.py.)
TEST(Tuning, OneDnnConvolutionTacticMatchesIm2col) {
  const std::string path = temp_path("onednn.txt");
  BuildOptions o = tuned_with_cache(path, batch_profile(2, 2, 2));
  ASSERT_TRUE(Engine::build(kExample, o).ok());
  auto cache = TimingCache::read(path);
  ASSERT_TRUE(cache.ok());
  TimingCache forced = *cache;
  for (auto& [layer, tactics] : forced.layers) {
    ASSERT_TRUE(tactics.count("onednn")) << layer;
    for (auto& [name, ms] : tactics) ms = name == "onednn" ? 1e-6 : 1.0;
  }
  ASSERT_TRUE(forced.write(path).ok());
  auto e = Engine::build(kExample, o);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  const auto chosen = tactics_of(**e);
  ASSERT_EQ(chosen.size(), 4u);  // the Gemm offers "onednn" too
  for (const auto& [node, t] : chosen) EXPECT_EQ(t[0], "onednn") << node;
  o.tune = 0;
  o.timing_cache.clear();
  auto plain = Engine::build(kExample, o);
  ASSERT_TRUE(plain.ok());
  const Tensor x = images(2, 11);
  const auto a = run(**e, x), b = run(**plain, x);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5) << i;
  auto loaded = Engine::load_from_bytes(*(*e)->serialize());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(run(**loaded, x), a);
  std::remove(path.c_str());
}

// At opt level 2 the example's convolutions run fused and channels-last: the tuner times oneDNN's
// primitive on the NHWC tensors ("onednn-direct") against its blocked layout ("onednn-blocked"), its
// Winograd algorithm on AVX-512 ("onednn-winograd") and kiln's packed kernel, and each choice,
// forced through the timing cache, computes the untuned engine's result.
TEST(Tuning, ChannelsLastConvolutionTactics) {
  const std::string path = temp_path("nhwc.txt");
  BuildOptions o = tuned_with_cache(path, batch_profile(2, 2, 2));
  o.opt_level = 2;
  ASSERT_TRUE(Engine::build(kExample, o).ok());
  auto cache = TimingCache::read(path);
  ASSERT_TRUE(cache.ok());
  int convs = 0, packed = 0;
  for (const auto& [layer, tactics] : cache->layers)
    if (tactics.count("onednn-direct")) {
      EXPECT_TRUE(tactics.count("onednn-blocked")) << layer;
      ++convs;
      packed += static_cast<int>(tactics.count("packed-direct"));
    }
  EXPECT_EQ(convs, 3);
  // kiln's own packed kernel is a candidate for all three where the CPU has AVX2/FMA: the second and
  // third (8 or more input channels) tap by tap, the first (3 channels, 3x3) by patches.
  EXPECT_EQ(packed, kiln::cpu::packed_gemm_available() ? 3 : 0);
  BuildOptions plain_o = o;
  plain_o.tune = 0;
  plain_o.timing_cache.clear();
  auto plain = Engine::build(kExample, plain_o);
  ASSERT_TRUE(plain.ok());
  const Tensor x = images(2, 5);
  const auto want = run(**plain, x);
  // oneDNN's Winograd kernels (AVX-512) take all three too, the first (3 channels) included.
  const int winograd = kiln::cpu::onednn_winograd_available() ? 3 : 0;
  for (const std::string forced : {"onednn-direct", "onednn-blocked", "packed-direct", "onednn-winograd"}) {
    const int expected = forced == "packed-direct" ? packed : forced == "onednn-winograd" ? winograd : 3;
    if (expected == 0) continue;
    TimingCache edited = *cache;
    for (auto& [layer, tactics] : edited.layers)
      for (auto& [name, ms] : tactics) ms = name == forced ? 1e-6 : 1.0;
    ASSERT_TRUE(edited.write(path).ok());
    auto e = Engine::build(kExample, o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    int chosen = 0;
    for (const auto& [node, t] : tactics_of(**e))
      if (t[0] == forced) ++chosen;
    EXPECT_EQ(chosen, expected) << forced;
    const auto got = run(**e, x);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << forced << " " << i;
  }
  std::remove(path.c_str());
}

// A candidate tactic's outputs against the kernel's own choice: E4M3 outputs compared as values (one
// step near rounding boundaries passes; wrong values do not), int8 within one step in at most 1% of
// the elements, floats by relative L2.
TEST(Tuning, CandidateOutputsAreComparedByTheirType) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-300.f, 300.f);
  Tensor want = Tensor::empty(DataType::kFloat8E4M3FN, {4096});
  for (int64_t i = 0; i < want.numel(); ++i) static_cast<uint8_t*>(want.raw())[i] = f32_to_mini(u(rng), MiniFloat::kE4M3FN, true);
  // One E4M3 step up in 3% of the elements (the code of the next magnitude: same sign, finite).
  Tensor near = want.clone();
  for (int64_t i = 0; i < near.numel(); i += 33) {
    uint8_t& b = static_cast<uint8_t*>(near.raw())[i];
    if ((b & 0x7f) < 0x7e) ++b;
  }
  EXPECT_EQ(tactic_outputs_mismatch({want}, {want}, 1e-3), "");
  EXPECT_EQ(tactic_outputs_mismatch({want}, {near}, 1e-3), "");
  Tensor wrong = want.clone();
  for (int64_t i = 0; i < wrong.numel(); ++i) static_cast<uint8_t*>(wrong.raw())[i] ^= 0x80;  // every sign flipped
  EXPECT_NE(tactic_outputs_mismatch({want}, {wrong}, 1e-3).find("relative L2"), std::string::npos);
  Tensor i8 = Tensor::empty(DataType::kInt8, {1000});
  for (int64_t i = 0; i < i8.numel(); ++i) i8.data<int8_t>()[i] = static_cast<int8_t>(i % 200 - 100);
  Tensor i8_near = i8.clone(), i8_far = i8.clone();
  i8_near.data<int8_t>()[7] += 1;
  i8_far.data<int8_t>()[7] += 2;
  EXPECT_EQ(tactic_outputs_mismatch({i8}, {i8_near}, 1e-3), "");
  EXPECT_NE(tactic_outputs_mismatch({i8}, {i8_far}, 1e-3).find("more than one step"), std::string::npos);
  Tensor f = Tensor::empty(DataType::kFloat32, {3});
  Tensor g = Tensor::empty(DataType::kFloat32, {3});
  for (int i = 0; i < 3; ++i) f.data<float>()[i] = g.data<float>()[i] = 1.f + i;
  g.data<float>()[2] = 3.1f;
  EXPECT_NE(tactic_outputs_mismatch({f}, {g}, 1e-3), "");
  EXPECT_EQ(tactic_outputs_mismatch({f}, {g}, 5e-2), "");
}

// An untuned build decides each kernel's own choice at build and stores it (#39): the engine file
// carries the name per step and profile (without a time), `kiln inspect`'s plan report shows it, it is
// the tactic the kernel plans untuned on this machine, and a loaded engine plans that name instead of
// deciding again. A recorded name the loading machine's kernel does not offer is its own choice there.
TEST(Tuning, UntunedBuildRecordsTheKernelsOwnChoices) {
  for (int level : {1, 2}) {  // channels-first Conv tactics; at level 2 channels-last FusedConv's
    SCOPED_TRACE("opt level " + std::to_string(level));
    BuildOptions o;
    o.opt_level = level;
    o.profiles = {batch_profile(1, 4, 8)};
    o.tune = 0;
    auto e = Engine::build(kExample, o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    EXPECT_TRUE(tactics_of(**e).empty());
    const auto own = own_choices_of(**e);
    ASSERT_FALSE(own.empty()) << (*e)->placement_report();
    // What each kernel plans untuned at the profile's opt shape, asked directly.
    const CompiledGraph& g = *(*e)->impl().plan;
    ContextResources res;
    Slot x = Slot::of(images(4));
    Slot* in = &x;
    auto sp = make_shape_plan(g, &in, res, 0);
    size_t offered = 0;
    for (size_t si = 0; si < g.steps.size(); ++si) {
      const Step& s = g.steps[si];
      if (s.kind != Step::Kind::kKernel || !g.kernel(si).has_reshape()) continue;
      ReshapeContext rc{g.node(s), {}, {}, nullptr, 0, nullptr, {}, {}, -1};
      ASSERT_TRUE(fill_reshape_context(g, *sp, static_cast<int>(si), nullptr, res, rc).ok());
      const std::vector<std::string> cands = g.kernel(si).tactics(rc);
      if (cands.size() < 2) {
        EXPECT_TRUE(s.tactics.empty()) << g.node(s).name;
        continue;
      }
      ++offered;
      ASSERT_EQ(s.tactics.size(), 1u) << g.node(s).name;
      EXPECT_NE(std::find(cands.begin(), cands.end(), s.tactics[0]), cands.end()) << s.tactics[0];
      // The shape plan keeps what its reshape planned (the recorded name, asked of it).
      EXPECT_EQ(sp->planned_tactic[si], s.tactics[0]) << g.node(s).name;
      rc.tactic.clear();
      ASSERT_TRUE(g.kernel(si).reshape(rc).ok());
      EXPECT_EQ(rc.planned_tactic, s.tactics[0]) << g.node(s).name;
    }
    EXPECT_EQ(offered, own.size());
    // The engine file carries them (read from the FlatBuffer itself), the report shows them.
    auto bytes = (*e)->serialize();
    ASSERT_TRUE(bytes.ok());
    const fb::PlanDesc* plan = fb::GetEngineFile(bytes->data())->plan();
    std::map<std::string, std::vector<std::string>> stored;
    for (const fb::PlanStep* ps : *plan->steps()) {
      if (!ps->tactics() || ps->kind() != 0) continue;
      std::vector<std::string>& t = stored[g.nodes[static_cast<size_t>(ps->node())]->name];
      for (const flatbuffers::String* name : *ps->tactics()) t.push_back(name->str());
      for (size_t k = 0; ps->tactic_ms() && k < ps->tactic_ms()->size(); ++k) EXPECT_EQ(ps->tactic_ms()->Get(k), 0.0);
    }
    EXPECT_EQ(stored, own);
    const std::string report = (*e)->placement_report();
    size_t marks = 0;
    for (size_t at = report.find("(untuned)"); at != std::string::npos; at = report.find("(untuned)", at + 1)) ++marks;
    EXPECT_EQ(marks, own.size()) << report;
    // Loaded: the same names, the same outputs.
    auto loaded = Engine::load_from_bytes(*bytes);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    EXPECT_EQ(own_choices_of(**loaded), own);
    const Tensor batch = images(4);
    const auto want = run(**e, batch);
    EXPECT_EQ(run(**loaded, batch), want);
    // A name no kernel here offers (another machine's kernel) is the kernel's own choice: same outputs.
    for (Step& s : (*e)->impl().plan->steps)
      if (!s.tactics.empty()) s.tactics[0] = "another-machines-kernel";
    auto foreign_bytes = (*e)->serialize();
    for (Step& s : (*e)->impl().plan->steps)
      if (!s.tactics.empty()) s.tactics[0] = own.at((*e)->impl().plan->node(s).name)[0];
    ASSERT_TRUE(foreign_bytes.ok());
    auto foreign = Engine::load_from_bytes(*foreign_bytes);
    ASSERT_TRUE(foreign.ok()) << foreign.status().to_string();
    EXPECT_EQ(run(**foreign, batch), want);
  }
}

// The tuner's synthetic inputs: an integer or bool input that is only element data (an attention mask
// turned into an additive one) is made of alternating ones and zeros; one that reaches an index, a
// shape or an op outside the element-data list (a CumSum feeding position ids, a count cast back to an
// index) keeps zeros, which every index accepts.
TEST(Tuning, MaskInputsAreElementDataIndexInputsAreNot) {
  ir::Graph g;
  g.opsets[""] = 17;
  auto value = [&](const std::string& name, DataType dt, std::vector<int64_t> dims) {
    return g.add_value(name, ir::Type::tensor(dt, ir::SymShape::of(dims)));
  };
  auto input = [&](const std::string& name, DataType dt, std::vector<int64_t> dims) {
    ir::Value* v = value(name, dt, dims);
    v->is_input = true;
    g.inputs.push_back(v);
    return v;
  };
  ir::Value* mask = input("attention_mask", DataType::kInt64, {2, 8});
  ir::Value* ids = input("input_ids", DataType::kInt64, {2, 8});
  ir::Value* pos_mask = input("padding", DataType::kInt64, {2, 8});
  ir::Value* shape_in = input("target_shape", DataType::kInt64, {2});
  ir::Value* keep = input("keep", DataType::kBool, {2, 8});
  ir::Value* table = value("table", DataType::kFloat32, {16, 4});
  table->constant = Tensor::empty(DataType::kFloat32, {16, 4});
  ir::Value* one = value("one", DataType::kFloat32, {});
  one->constant = Tensor::empty(DataType::kFloat32, {});
  // mask → Cast → Sub(1, ·) → Mul → kiln.Attention's mask input
  ir::Value* mf = value("mf", DataType::kFloat32, {2, 8});
  ir::Value* inv = value("inv", DataType::kFloat32, {2, 8});
  ir::Value* add = value("add", DataType::kFloat32, {2, 8});
  g.add_node("Cast", "", {mask}, {mf}, "cast");
  g.add_node("Sub", "", {one, mf}, {inv}, "sub");
  g.add_node("Mul", "", {inv, one}, {add}, "mul");
  ir::Value* x = value("x", DataType::kFloat32, {2, 8, 4});
  ir::Value* y = value("y", DataType::kFloat32, {2, 8, 4});
  g.add_node("Attention", "kiln", {x, x, x, add}, {y}, "attention");
  // ids → Gather's indices; padding → CumSum → Gather's indices; target_shape → Reshape's shape
  ir::Value* emb = value("emb", DataType::kFloat32, {2, 8, 4});
  g.add_node("Gather", "", {table, ids}, {emb}, "embed");
  ir::Value* axis = value("axis", DataType::kInt64, {});
  axis->constant = Tensor::empty(DataType::kInt64, {});
  ir::Value* cum = value("cum", DataType::kInt64, {2, 8});
  ir::Value* pemb = value("pemb", DataType::kFloat32, {2, 8, 4});
  g.add_node("CumSum", "", {pos_mask, axis}, {cum}, "positions");
  g.add_node("Gather", "", {table, cum}, {pemb}, "position_embed");
  ir::Value* r = value("r", DataType::kFloat32, {8, 8});
  g.add_node("Reshape", "", {emb, shape_in}, {r}, "reshape");
  // keep → Where's condition (element data) and → Not → And (still element data)
  ir::Value* kn = value("kn", DataType::kBool, {2, 8});
  ir::Value* ka = value("ka", DataType::kBool, {2, 8});
  ir::Value* w = value("w", DataType::kFloat32, {2, 8});
  g.add_node("Not", "", {keep}, {kn}, "not");
  g.add_node("And", "", {kn, keep}, {ka}, "and");
  g.add_node("Where", "", {ka, mf, inv}, {w}, "where");
  // A float made from an input and cast back to integers is followed again: a count used as an index.
  ir::Value* counted = input("counted", DataType::kInt64, {2, 8});
  ir::Value* cf = value("cf", DataType::kFloat32, {2, 8});
  ir::Value* total = value("total", DataType::kFloat32, {2});
  ir::Value* ti = value("ti", DataType::kInt64, {2});
  ir::Value* picked = value("picked", DataType::kFloat32, {2, 4});
  g.add_node("Cast", "", {counted}, {cf}, "count_cast");
  g.add_node("ReduceSum", "", {cf}, {total}, "count");
  g.add_node("Cast", "", {total}, {ti}, "count_index");
  g.add_node("Gather", "", {table, ti}, {picked}, "pick");
  EXPECT_FALSE(tuning_input_is_element_data(g, counted));
  EXPECT_TRUE(tuning_input_is_element_data(g, mask));
  EXPECT_TRUE(tuning_input_is_element_data(g, keep));
  EXPECT_FALSE(tuning_input_is_element_data(g, ids));
  EXPECT_FALSE(tuning_input_is_element_data(g, pos_mask));
  EXPECT_FALSE(tuning_input_is_element_data(g, shape_in));
  // The same mask also used as a Gather's indices is not element data only.
  ir::Value* e2 = value("e2", DataType::kFloat32, {2, 8, 4});
  g.add_node("Gather", "", {table, mask}, {e2}, "mask_as_index");
  EXPECT_FALSE(tuning_input_is_element_data(g, mask));
}
