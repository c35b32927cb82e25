// Runs with a seen input-shape signature allocate nothing: this test binary replaces malloc and
// friends (symbol interposition reaches libkiln, libstdc++, OpenMP and oneDNN too) and counts the
// calls made while a run is in flight. KILN_ALLOC_TRACE=1 prints a backtrace of each one.
//
// Allocations made inside vendor libraries are counted apart and reported, not failed: oneDNN's
// sgemm (behind the CPU Conv/Gemm/MatMul kernels) allocates its packing buffers in every call, and
// cuDNN 9's legacy convolution API builds execution plans in every call; no API lets a caller hand
// that memory in. The CPU-speed and GPU-speed work replace them with prepared oneDNN primitives and
// cuDNN graphs whose scratch comes from the plan's workspace.
//
// The example's kernels all follow the kernel contract on both devices (shapes, descriptors and
// geometry made in reshape()), so both the CPU and the CUDA tests require zero. On CUDA the counted
// runs replay CUDA graphs (captured on the second run of a signature).
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "backends/backend.h"
#include "kiln/kiln.h"
#include "../unit/source_dir.h"

extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0}, g_dnnl_allocs{0};
thread_local bool t_in_hook = false;

// Whether one of the callers is inside a vendor library (oneDNN, cuDNN, cuBLAS(Lt), the CUDA runtime).
bool called_from_library(void* const* frames, int n) {
  for (int i = 1; i < n; ++i) {
    Dl_info info;
    if (!dladdr(frames[i], &info) || !info.dli_fname) continue;
    for (const char* lib : {"libdnnl", "libcudnn", "libcublas", "libcudart", "libcuda."})
      if (std::strstr(info.dli_fname, lib)) return true;
  }
  return false;
}

void note_alloc() {
  if (!g_counting.load(std::memory_order_relaxed) || t_in_hook) return;
  t_in_hook = true;
  void* frames[32];
  const int n = backtrace(frames, 32);
  if (called_from_library(frames, n)) {
    g_dnnl_allocs.fetch_add(1);
    t_in_hook = false;
    return;
  }
  g_allocs.fetch_add(1);
  static const bool trace = std::getenv("KILN_ALLOC_TRACE") != nullptr;
  if (trace) {
    static const char kHead[] = "---- allocation during a run:\n";
    (void)!write(2, kHead, sizeof(kHead) - 1);
    backtrace_symbols_fd(frames, n, 2);
  }
  t_in_hook = false;
}

// backtrace() loads libgcc on first use (allocating): do that before anything is counted.
const bool g_warm = [] {
  void* f[4];
  return backtrace(f, 4) > 0;
}();
}  // namespace

extern "C" {
void* malloc(size_t n) {
  note_alloc();
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  note_alloc();
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  note_alloc();
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t al, size_t n) {
  note_alloc();
  return __libc_memalign(al, n);
}
void* memalign(size_t al, size_t n) {
  note_alloc();
  return __libc_memalign(al, n);
}
int posix_memalign(void** out, size_t al, size_t n) {
  note_alloc();
  *out = __libc_memalign(al, n);
  return *out ? 0 : 12;
}
}

namespace kiln {
namespace {

Tensor random_images(int64_t batch, uint32_t seed) {
  Tensor t = Tensor::empty(DataType::kFloat32, {batch, 3, 32, 32});
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = nd(rng);
  return t;
}

std::shared_ptr<Engine> build_example(DeviceType device, int opt_level) {
  BuildOptions o;
  o.device = device;
  o.opt_level = opt_level;
  auto e = Engine::build(testing_support::source_dir() + "/examples/tiny_cnn.onnx", o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? *e : nullptr;
}

struct Counted {
  long host = 0;        // heap allocations outside oneDNN
  long dnnl = 0;        // inside vendor libraries (reported, see the top of this file)
  uint64_t device = 0;  // backend allocations (arena, device memory)
};

// One run_into with allocation counting on.
Counted counted_run(ExecutionContext& ctx, const std::vector<Value>& in, std::vector<Value>& out, DeviceType device) {
  auto be = backend_for(device);
  const uint64_t dev0 = be.ok() ? (*be)->allocation_count() + cpu_backend().allocation_count() : 0;
  g_allocs = 0;
  g_dnnl_allocs = 0;
  g_counting = true;
  Status st = ctx.run_into(in, out);
  g_counting = false;
  EXPECT_TRUE(st.ok()) << st.to_string();
  Counted c;
  c.host = g_allocs.load();
  c.dnnl = g_dnnl_allocs.load();
  c.device = be.ok() ? (*be)->allocation_count() + cpu_backend().allocation_count() - dev0 : 0;
  return c;
}

void expect_no_alloc_on_seen_signature(DeviceType device, int opt_level) {
  auto engine = build_example(device, opt_level);
  ASSERT_TRUE(engine);
  auto ctx = engine->create_context();
  ASSERT_TRUE(ctx.ok());
  std::vector<Value> in{Value::of(random_images(1, 1))};
  std::vector<Value> out;
  ASSERT_TRUE((*ctx)->run_into(in, out).ok());  // plans the signature (and may learn sizes)
  ASSERT_TRUE((*ctx)->run_into(in, out).ok());  // CUDA: captures the graphs
  ASSERT_TRUE((*ctx)->run_into(in, out).ok());
  const std::vector<float> first(out[0].tensor.data<float>(), out[0].tensor.data<float>() + out[0].tensor.numel());
  const Counted c = counted_run(**ctx, in, out, device);
  EXPECT_EQ(c.host, 0) << "host heap allocations in a run with a seen signature (KILN_ALLOC_TRACE=1 shows where)";
  EXPECT_EQ(c.device, 0u) << "backend allocations in a run with a seen signature";
  std::printf("[ info ] allocations in a run with a seen signature: kiln %ld, inside vendor libraries %ld, backend %llu\n",
              c.host, c.dnnl, static_cast<unsigned long long>(c.device));
  ASSERT_EQ(out[0].tensor.numel(), static_cast<int64_t>(first.size()));
  for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(out[0].tensor.data<float>()[i], first[i]);
  EXPECT_GT((*ctx)->arena_bytes(device), 0u);
}

TEST(NoAlloc, CpuSeenSignatureAllocatesNothing) { expect_no_alloc_on_seen_signature(DeviceType::kCPU, 1); }
TEST(NoAlloc, CpuFusedSeenSignatureAllocatesNothing) { expect_no_alloc_on_seen_signature(DeviceType::kCPU, 2); }

TEST(NoAlloc, CudaSeenSignatureAllocatesNothing) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  expect_no_alloc_on_seen_signature(DeviceType::kCUDA, 1);
}

// Batch 1 → 8 → 1 → 8: each signature is planned once and reused, outputs equal a fresh context's,
// and returning to a seen signature allocates nothing.
void alternate(DeviceType device) {
  auto engine = build_example(device, 1);
  ASSERT_TRUE(engine);
  auto ctx = engine->create_context();
  ASSERT_TRUE(ctx.ok());
  const Tensor x1 = random_images(1, 7), x8 = random_images(8, 8);
  auto reference = [&](const Tensor& x) {
    auto fresh = engine->create_context();
    auto r = (*fresh)->run({{"image", Value::of(x)}});
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return (*r)[0].tensor;
  };
  const Tensor ref1 = reference(x1), ref8 = reference(x8);
  std::vector<Value> out1, out8;
  const std::vector<Value> in1{Value::of(x1)}, in8{Value::of(x8)};
  // The first round plans; on CUDA the second captures each signature's graphs (the reference runs
  // above never replay one, so the equality below checks the replays against step-by-step runs).
  const int quiet_from = device == DeviceType::kCUDA ? 2 : 1;
  for (int round = 0; round < 4; ++round) {
    Counted c1 = counted_run(**ctx, in1, out1, device);
    Counted c8 = counted_run(**ctx, in8, out8, device);
    if (round >= quiet_from) {
      EXPECT_EQ(c1.host, 0) << "round " << round;
      EXPECT_EQ(c8.host, 0) << "round " << round;
      EXPECT_EQ(c1.device + c8.device, 0u) << "round " << round;
    }
    ASSERT_EQ(out1[0].tensor.shape(), ref1.shape());
    ASSERT_EQ(out8[0].tensor.shape(), ref8.shape());
    for (int64_t i = 0; i < ref1.numel(); ++i) ASSERT_EQ(out1[0].tensor.data<float>()[i], ref1.data<float>()[i]);
    for (int64_t i = 0; i < ref8.numel(); ++i) ASSERT_EQ(out8[0].tensor.data<float>()[i], ref8.data<float>()[i]);
  }
  EXPECT_EQ((*ctx)->planned_signatures(), 2u);
  if (device == DeviceType::kCUDA) EXPECT_GE((*ctx)->cuda_graphs(), 2u) << "a graph per signature at least";
}

TEST(NoAlloc, CpuAlternatingBatchReusesPlans) { alternate(DeviceType::kCPU); }
TEST(NoAlloc, CudaAlternatingBatchReusesPlans) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  alternate(DeviceType::kCUDA);
}

// With graphs turned off a CUDA context launches step by step, captures nothing, and computes the
// same outputs as one that replays graphs.
TEST(NoAlloc, CudaGraphsOffMatchesGraphsOn) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  auto engine = build_example(DeviceType::kCUDA, 1);
  ASSERT_TRUE(engine);
  auto on = engine->create_context();
  auto off = engine->create_context();
  ASSERT_TRUE(on.ok() && off.ok());
  (*off)->set_cuda_graphs(false);
  const std::vector<Value> in{Value::of(random_images(4, 11))};
  std::vector<Value> out_on, out_off;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE((*on)->run_into(in, out_on).ok());
    ASSERT_TRUE((*off)->run_into(in, out_off).ok());
  }
  EXPECT_GE((*on)->cuda_graphs(), 1u);
  EXPECT_EQ((*off)->cuda_graphs(), 0u);
  const Tensor& a = out_on[0].tensor;
  const Tensor& b = out_off[0].tensor;
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

// ---- real exporters' models: every zoo model present, and the bundled tiny transformers

// Inputs for a model's declared inputs: dynamic dims take `dyn` (a batch of 1, short sequences),
// floats are N(0, 1), integer inputs are token ids below 64 (every bundled and zoo vocabulary is
// larger) except masks, which are ones.
std::vector<Value> model_inputs(const Engine& e, int64_t dyn, uint32_t seed) {
  std::vector<Value> in;
  std::mt19937 rng(seed);
  for (const TensorInfo& info : e.inputs()) {
    Shape shape = info.shape;
    for (int64_t& d : shape)
      if (d < 0) d = dyn;
    Tensor t = Tensor::empty(info.dtype, shape);
    const bool mask = info.name.find("mask") != std::string::npos;
    for (int64_t i = 0; i < t.numel(); ++i) {
      switch (info.dtype) {
        case DataType::kFloat32: t.data<float>()[i] = std::normal_distribution<float>()(rng); break;
        case DataType::kInt64: t.data<int64_t>()[i] = mask ? 1 : static_cast<int64_t>(rng() % 64); break;
        case DataType::kInt32: t.data<int32_t>()[i] = mask ? 1 : static_cast<int32_t>(rng() % 64); break;
        default: ADD_FAILURE() << info.name << ": no generator for " << dtype_name(info.dtype); return {};
      }
    }
    in.push_back(Value::of(std::move(t)));
  }
  return in;
}

// Builds `path` for the CPU at `opt_level`, runs a signature twice (plan, then a run as planned), then
// counts kiln's heap allocations over three more runs, which must be none; the outputs must not move.
void expect_model_allocates_nothing(const std::string& path, int opt_level, int64_t dyn) {
  SCOPED_TRACE(path + " at opt level " + std::to_string(opt_level));
  BuildOptions o;
  o.device = DeviceType::kCPU;
  o.opt_level = opt_level;
  auto engine = Engine::build(path, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto ctx = (*engine)->create_context();
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  const std::vector<Value> in = model_inputs(**engine, dyn, 5);
  ASSERT_FALSE(in.empty());
  std::vector<Value> out;
  ASSERT_TRUE((*ctx)->run_into(in, out).ok());
  Status st = (*ctx)->run_into(in, out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::vector<Tensor> first;
  for (const Value& v : out) first.push_back(v.tensor.clone());
  long host = 0, vendor = 0;
  uint64_t device = 0;
  for (int i = 0; i < 3; ++i) {
    const Counted c = counted_run(**ctx, in, out, DeviceType::kCPU);
    host += c.host;
    vendor += c.dnnl;
    device += c.device;
  }
  EXPECT_EQ(host, 0) << "kiln heap allocations in 3 runs with a seen signature (KILN_ALLOC_TRACE=1 shows where)";
  EXPECT_EQ(device, 0u) << "backend allocations in 3 runs with a seen signature";
  std::printf("[ info ] %s, opt level %d: allocations in 3 runs: kiln %ld, inside vendor libraries %ld\n",
              std::filesystem::path(path).filename().c_str(), opt_level, host, vendor);
  ASSERT_EQ(out.size(), first.size());
  for (size_t k = 0; k < out.size(); ++k) {
    ASSERT_EQ(out[k].tensor.shape(), first[k].shape());
    ASSERT_EQ(std::memcmp(out[k].tensor.raw(), first[k].raw(), first[k].nbytes()), 0) << "output " << k << " moved";
  }
}

std::vector<std::string> onnx_files_in(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".onnx") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The tiny transformers bundled with the tests (tests/models/attention: BERT, GPT-2, Llama with GQA,
// torchvision's and timm's ViT, Swin; exporters' own graphs), so this never passes vacuously.
TEST(NoAlloc, BundledTransformersAllocateNothing) {
  const std::vector<std::string> files = onnx_files_in(testing_support::source_dir() + "/tests/models/attention");
  ASSERT_FALSE(files.empty()) << "tests/models/attention holds no .onnx file";
  for (const std::string& f : files)
    for (int level : {1, 2}) expect_model_allocates_nothing(f, level, 2);
}

// Every zoo model exported into build/zoo/ (bench/zoo/export.py; CI exports the small subset).
TEST(NoAlloc, ZooModelsAllocateNothing) {
  const std::vector<std::string> files = onnx_files_in(testing_support::source_dir() + "/build/zoo");
  if (files.empty())
    GTEST_SKIP() << "no zoo model in build/zoo/ (export the small ones with: scripts/setup_zoo.sh && .venv-zoo/bin/python bench/zoo/export.py --small)";
  for (const std::string& f : files)
    for (int level : {1, 2}) expect_model_allocates_nothing(f, level, 1);
}

// A context keeps its engine alive (the engine object may go first).
TEST(NoAlloc, ContextOutlivesEngine) {
  auto engine = build_example(DeviceType::kCPU, 1);
  ASSERT_TRUE(engine);
  auto ctx = engine->create_context();
  ASSERT_TRUE(ctx.ok());
  engine.reset();
  auto r = (*ctx)->run({{"image", Value::of(random_images(2, 3))}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)[0].tensor.shape(), (Shape{2, 10}));
}

}  // namespace
}  // namespace kiln
