// Runtime: engine build/run, engine files (round trip, corruption, mismatches), memory plan, threads.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <sstream>
#include <thread>
#include <atomic>
#include <memory>
#include <mutex>

#include "backends/backend.h"
#include "backends/cuda/cuda_backend.h"
#include "engine/engine_generated.h"
#include "kiln/kiln.h"
#include "onnx/onnx.pb.h"
#include "plan/memory.h"
#include "passes/passes.h"
#include "plan/plan.h"
#include "runtime/engine_impl.h"
#include "runtime/executor.h"
#include "util/checksum.h"
#include "source_dir.h"

using namespace kiln;

namespace {

const std::string kExample = testing_support::source_dir() + "/examples/tiny_cnn.onnx";
const std::string kExampleInput = testing_support::source_dir() + "/examples/tiny_cnn_input.npy";

std::vector<float> run_example(Engine& e, const Tensor& x) {
  auto ctx = e.create_context();
  EXPECT_TRUE(ctx.ok()) << ctx.status().to_string();
  auto out = (*ctx)->run({{"image", Value::of(x)}});
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out.ok()) return {};
  const Tensor& y = (*out)[0].tensor;
  return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
}

// Random example inputs of the given batch sizes and each one's output on a fresh context.
struct ExampleBatches {
  std::vector<Tensor> xs;
  std::vector<std::vector<float>> expected;
  bool same(size_t k, const Tensor& y) const {
    return y.numel() == static_cast<int64_t>(expected[k].size()) &&
           std::memcmp(y.data<float>(), expected[k].data(), expected[k].size() * sizeof(float)) == 0;
  }
};
ExampleBatches example_batches(Engine& e, const std::vector<int64_t>& batches, unsigned seed) {
  ExampleBatches r;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (int64_t b : batches) {
    Tensor x = Tensor::empty(DataType::kFloat32, {b, 3, 32, 32});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    r.expected.push_back(run_example(e, x));
    EXPECT_EQ(r.expected.back().size(), static_cast<size_t>(10 * b));
    r.xs.push_back(std::move(x));
  }
  return r;
}

}  // namespace

TEST(Runtime, ExampleRunsAndRoundTripsThroughEngineFile) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  const auto direct = run_example(**engine, *x);
  ASSERT_EQ(direct.size(), 10u);
  float sum = 0;
  for (float p : direct) sum += p;
  EXPECT_NEAR(sum, 1.0f, 1e-5);  // softmax output

  auto bytes = (*engine)->serialize();
  ASSERT_TRUE(bytes.ok());
  auto loaded = Engine::load_from_bytes(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ((*loaded)->metadata()["model_hash"], (*engine)->metadata()["model_hash"]);
  EXPECT_EQ((*loaded)->metadata()["model_hash"].size(), 64u);
  const auto again = run_example(**loaded, *x);
  ASSERT_EQ(again, direct);  // same kernels, same inputs: bit-identical
}

// The engine's FlatBuffer with its checksum trailer recomputed: how a mutation gets past the
// checksum to exercise the parser's own checks.
std::string reseal(std::string bytes) {
  if (bytes.size() < 24) return bytes;
  std::string body = bytes.substr(0, bytes.size() - 24);
  const uint64_t sum = checksum64(body.data(), body.size()), len = body.size();
  body.append("KILNSUM1");
  body.append(reinterpret_cast<const char*>(&sum), 8);
  body.append(reinterpret_cast<const char*>(&len), 8);
  return body;
}

// A bool constant of an engine file whose bytes are not 0/1 (a damaged or hostile file) reads as
// true, not as undefined behaviour: bool tensors are copied and normalized on load. Found by
// fuzz_engine (a Loop condition byte of 2 loaded as a C++ bool).
TEST(Runtime, EngineBoolConstantBytesAreNormalized) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("where");
  for (const char* name : {"x", "y"}) {
    auto* in = g->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(::onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  auto* c = g->add_initializer();
  c->set_name("c");
  c->set_data_type(::onnx::TensorProto::BOOL);
  c->add_dims(4);
  c->set_raw_data(std::string("\x01\x00\x01\x00", 4));
  auto* n = g->add_node();
  n->set_op_type("Where");
  n->add_input("c");
  n->add_input("x");
  n->add_input("y");
  n->add_output("z");
  auto* out = g->add_output();
  out->set_name("z");
  out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  auto engine = Engine::build_from_bytes(m.SerializeAsString());
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  std::string b = *(*engine)->serialize();
  // Every bool constant's bytes become {2, 0, 255, 0}: nonzero is true.
  int patched = 0;
  auto* values = fb::GetMutableEngineFile(b.data())->mutable_graph()->mutable_values();
  for (flatbuffers::uoffset_t v = 0; v < values->size(); ++v) {
    auto* k = values->GetMutableObject(v)->mutable_constant();
    if (!k || k->dtype() != static_cast<int>(DataType::kBool) || !k->data() || k->data()->size() != 4) continue;
    auto* d = k->mutable_data();
    d->Mutate(0, 2);
    d->Mutate(2, 255);
    ++patched;
  }
  ASSERT_EQ(patched, 1);
  auto loaded = Engine::load_from_bytes(reseal(b));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  auto ctx = (*loaded)->create_context();
  ASSERT_TRUE(ctx.ok());
  Tensor x = Tensor::empty(DataType::kFloat32, {4}), y = Tensor::empty(DataType::kFloat32, {4});
  for (int i = 0; i < 4; ++i) x.data<float>()[i] = 10.0f + i, y.data<float>()[i] = -1.0f - i;
  auto r = (*ctx)->run({{"x", Value::of(x)}, {"y", Value::of(y)}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const float* z = (*r)[0].tensor.data<float>();
  EXPECT_EQ(z[0], 10.0f);
  EXPECT_EQ(z[1], -2.0f);
  EXPECT_EQ(z[2], 12.0f);
  EXPECT_EQ(z[3], -4.0f);
}

TEST(Runtime, CorruptEngineBytesGiveErrorsNotCrashes) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  const std::string good = *(*engine)->serialize();
  ASSERT_TRUE(Engine::load_from_bytes(reseal(good)).ok());
  std::mt19937 rng(7);
  int rejected = 0;
  for (int trial = 0; trial < 600; ++trial) {
    std::string bad = good;
    switch (trial % 3) {
      case 0: bad.resize(rng() % good.size()); break;                       // truncated
      case 1: for (int k = 0; k < 8; ++k) bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255); break;
      case 2: bad.replace(rng() % (bad.size() - 64), 64, std::string(64, static_cast<char>(rng()))); break;
    }
    // Half as damaged files (the checksum refuses every one), half resealed past the checksum.
    const bool sealed = trial % 2 == 1 && trial % 3 != 0;
    if (sealed) bad = reseal(bad);
    auto e = Engine::load_from_bytes(bad);
    if (!e.ok()) {
      ++rejected;
      EXPECT_FALSE(e.status().message().empty());
    } else {
      EXPECT_TRUE(sealed) << "trial " << trial << ": a damaged file loaded";
      // A corruption inside weight bytes can load fine; it must still run without crashing.
      auto x = read_npy(kExampleInput);
      auto ctx = (*e)->create_context();
      if (ctx.ok()) (void)(*ctx)->run({{"image", Value::of(*x)}});
    }
  }
  EXPECT_GT(rejected, 400);
  EXPECT_FALSE(Engine::load_from_bytes("").ok());
  EXPECT_FALSE(Engine::load_from_bytes("garbage that is not an engine").ok());
}

// One flipped byte anywhere (a weight, the plan, the metadata) is caught by the checksum, and a file
// without its trailer is refused.
TEST(Runtime, EngineChecksumCatchesOneFlippedByte) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  const std::string good = *(*engine)->serialize();
  for (size_t at : {good.size() / 2, good.size() / 3, size_t{40}, good.size() - 30}) {
    std::string bad = good;
    bad[at] ^= 0x01;
    auto e = Engine::load_from_bytes(bad);
    ASSERT_FALSE(e.ok()) << "byte " << at;
    EXPECT_NE(e.status().message().find("checksum mismatch"), std::string::npos) << e.status().message();
  }
  auto e = Engine::load_from_bytes(good.substr(0, good.size() - 24));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("checksum trailer is missing"), std::string::npos) << e.status().message();
  e = Engine::load_from_bytes(good + "x");
  ASSERT_FALSE(e.ok());
}

TEST(Runtime, OtherFormatVersionIsRefusedClearly) {
  flatbuffers::FlatBufferBuilder b;
  auto root = fb::CreateEngineFile(b, 999);
  b.Finish(root, fb::EngineFileIdentifier());
  auto e = Engine::load_from_bytes(std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kEngineMismatch);
  EXPECT_NE(e.status().message().find("format version 999"), std::string::npos) << e.status().message();
}

TEST(Runtime, EngineForAnotherDeviceIsRefusedClearly) {
  // Built on an H100 by tests/gpu/device_check.sh.
  auto e = Engine::load(testing_support::source_dir() + "/tests/data/tiny_cnn_h100.kiln");
  if (e.ok()) GTEST_SKIP() << "this machine has the GPU the engine was built for";
  EXPECT_EQ(e.status().code(), StatusCode::kEngineMismatch) << e.status().to_string();
  EXPECT_NE(e.status().message().find("H100"), std::string::npos) << e.status().message();
}

TEST(Runtime, WrongInputsGiveClearErrors) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  auto ctx = (*engine)->create_context();
  ASSERT_TRUE(ctx.ok());
  auto r = (*ctx)->run({{"imag", Value::of(Tensor::empty(DataType::kFloat32, {1, 3, 32, 32}))}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown input 'imag'"), std::string::npos);
  r = (*ctx)->run({{"image", Value::of(Tensor::empty(DataType::kFloat64, {1, 3, 32, 32}))}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dtype float32"), std::string::npos) << r.status().message();
  r = (*ctx)->run({{"image", Value::of(Tensor::empty(DataType::kFloat32, {1, 4, 32, 32}))}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("dimension 1"), std::string::npos) << r.status().message();
  r = (*ctx)->run({});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing input 'image'"), std::string::npos);
}

TEST(Runtime, MissingAndCorruptModelFiles) {
  auto e = Engine::build("/nonexistent/model.onnx");
  ASSERT_FALSE(e.ok());
  std::ifstream f(kExample, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string bytes = ss.str();
  for (size_t cut : {size_t{0}, size_t{10}, bytes.size() / 2, bytes.size() - 7}) {
    auto t = Engine::build_from_bytes(bytes.substr(0, cut));
    EXPECT_FALSE(t.ok()) << "cut at " << cut;
  }
}

TEST(Runtime, ContextsRunConcurrently) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  auto x = read_npy(kExampleInput);
  const auto expected = run_example(**engine, *x);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      auto ctx = (*engine)->create_context();
      for (int i = 0; i < 10; ++i) {
        auto out = (*ctx)->run({{"image", Value::of(*x)}});
        if (!out.ok()) { ++mismatches; continue; }
        const Tensor& y = (*out)[0].tensor;
        if (std::vector<float>(y.data<float>(), y.data<float>() + y.numel()) != expected) ++mismatches;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// The soak: 16 threads, each with contexts of its own (a new one every few runs), alternate batch
// sizes 1, 3 and 8 for 30 runs; every output is bit-identical to the single-threaded result for its
// batch. Threads share the engine (weights, kernels, reordered-weight caches) and nothing else.
TEST(Runtime, SixteenThreadSoakIsBitExact) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const ExampleBatches in = example_batches(**engine, {1, 3, 8}, 5);
  const std::vector<Tensor>& xs = in.xs;
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      std::unique_ptr<ExecutionContext> ctx;
      for (int i = 0; i < 30; ++i) {
        if (i % 7 == 0) {
          auto c = (*engine)->create_context();
          if (!c.ok()) { ++errors; return; }
          ctx = std::move(*c);
        }
        const size_t k = static_cast<size_t>(t + i) % xs.size();
        auto out = ctx->run({{"image", Value::of(xs[k])}});
        if (!out.ok()) { ++errors; continue; }
        if (!in.same(k, (*out)[0].tensor)) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

// max_memory_bytes bounds the host memory kiln holds at once: tensors are counted while alive and
// given back when freed; a build or run past the limit fails with an error naming it.
// The shape plans' cache is an LRU of at most max_shape_plans() signatures: under churn over 6
// batch sizes with a limit of 3 the context never holds more than 3, revisiting evicted ones
// re-plans them and every output equals a fresh context's (bit-exact); dropping the largest
// signature gives its arena memory back (the arena shrinks to what the kept plans need).
TEST(Runtime, ShapePlanCacheIsABoundedLru) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const ExampleBatches in = example_batches(**engine, {1, 2, 3, 4, 5, 8}, 11);
  const std::vector<Tensor>& xs = in.xs;
  auto ctx = (*engine)->create_context();
  ASSERT_TRUE(ctx.ok());
  EXPECT_EQ((*ctx)->max_shape_plans(), ExecutionContext::kDefaultMaxShapePlans);
  (*ctx)->set_max_shape_plans(3);
  EXPECT_EQ((*ctx)->max_shape_plans(), 3u);
  size_t limit = 3;
  auto check = [&](size_t k, const char* when) {
    auto out = (*ctx)->run({{"image", Value::of(xs[k])}});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_TRUE(in.same(k, (*out)[0].tensor)) << when << " input " << k;
    EXPECT_LE((*ctx)->planned_signatures(), limit) << when << " input " << k;
  };
  // Twice through the six (every run past the third evicts), then an order that mixes kept and
  // evicted signatures.
  for (int round = 0; round < 2; ++round)
    for (size_t k = 0; k < xs.size(); ++k) check(k, round ? "second pass" : "first pass");
  for (size_t k : {5u, 0u, 5u, 2u, 0u, 4u, 1u, 4u}) check(k, "mixed");
  EXPECT_EQ((*ctx)->planned_signatures(), 3u);
  // The largest batch's arena goes back once its plan is dropped: three small signatures after it.
  check(5, "largest");
  const size_t big = (*ctx)->arena_bytes(DeviceType::kCPU);
  for (size_t k : {0u, 1u, 2u}) check(k, "small");
  const size_t small = (*ctx)->arena_bytes(DeviceType::kCPU);
  EXPECT_LT(small, big) << "the evicted batch-8 plan's arena was not given back";
  for (size_t k : {0u, 1u, 2u}) check(k, "small, again");
  EXPECT_EQ((*ctx)->arena_bytes(DeviceType::kCPU), small) << "a kept signature reallocated the arena";
  // A smaller limit takes effect at once; 0 restores the default.
  (*ctx)->set_max_shape_plans(1);
  limit = 1;
  EXPECT_EQ((*ctx)->planned_signatures(), 1u);
  check(3, "limit 1");
  check(4, "limit 1");
  (*ctx)->set_max_shape_plans(0);
  limit = ExecutionContext::kDefaultMaxShapePlans;
  EXPECT_EQ((*ctx)->max_shape_plans(), ExecutionContext::kDefaultMaxShapePlans);
  for (size_t k = 0; k < xs.size(); ++k) check(k, "default limit");
  EXPECT_EQ((*ctx)->planned_signatures(), xs.size());
}

// The Python session's pattern under 16 threads: a pool of 4 contexts handed from thread to thread
// (a mutex between users), each keeping at most 2 shape plans, so plans are evicted and arenas
// shrink and regrow while other contexts run; mixed batch sizes, half the runs into the caller's
// own output tensors (run_into, IOBinding's path). Every output is bit-exact. scripts/tsan.sh runs it.
TEST(Runtime, SixteenThreadsOverPooledContextsWithEvictionsAreBitExact) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const ExampleBatches in = example_batches(**engine, {1, 2, 3, 5}, 9);
  const std::vector<Tensor>& xs = in.xs;
  std::mutex mu;
  std::vector<std::unique_ptr<ExecutionContext>> pool;
  for (int i = 0; i < 4; ++i) {
    auto c = (*engine)->create_context();
    ASSERT_TRUE(c.ok());
    (*c)->set_max_shape_plans(2);
    pool.push_back(std::move(*c));
  }
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      std::vector<Value> own(1);  // this thread's output buffer, reused when its shape fits
      for (int i = 0; i < 12; ++i) {
        std::unique_ptr<ExecutionContext> ctx;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (pool.empty()) {
            auto c = (*engine)->create_context();
            if (!c.ok()) { ++errors; return; }
            ctx = std::move(*c);
            ctx->set_max_shape_plans(2);
          } else {
            ctx = std::move(pool.back());
            pool.pop_back();
          }
        }
        const size_t k = static_cast<size_t>(t * 7 + i) % xs.size();
        const Tensor* y = nullptr;
        std::vector<Value> fresh;
        if ((t + i) % 2) {
          if (!ctx->run_into({Value::of(xs[k])}, own).ok()) ++errors;
          else y = &own[0].tensor;
        } else {
          auto out = ctx->run({{"image", Value::of(xs[k])}});
          if (!out.ok()) ++errors;
          else y = &(fresh = std::move(*out))[0].tensor;
        }
        if (y && !in.same(k, *y)) ++mismatches;
        if (ctx->planned_signatures() > 2) ++errors;
        std::lock_guard<std::mutex> lock(mu);
        pool.push_back(std::move(ctx));
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Runtime, HostMemoryLimitIsAClearError) {
  const size_t base = host_memory_in_use();
  {
    Tensor t = Tensor::empty(DataType::kFloat32, {1 << 16});
    EXPECT_GE(host_memory_in_use(), base + (size_t{1} << 18));
  }
  EXPECT_EQ(host_memory_in_use(), base);
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  Tensor x = Tensor::empty(DataType::kFloat32, {64, 3, 32, 32});
  set_max_memory_bytes(host_memory_in_use() + 4096);
  EXPECT_THROW(Tensor::empty(DataType::kFloat32, {1 << 20}), std::length_error);
  auto ctx = (*engine)->create_context();
  Status st = ctx.ok() ? (*ctx)->run({{"image", Value::of(x)}}).status() : ctx.status();
  auto again = Engine::build(kExample);
  set_max_memory_bytes(0);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("max_memory_bytes"), std::string::npos) << st.to_string();
  EXPECT_FALSE(again.ok()) << "a build holding the weights must not fit in 4 KiB more";
  EXPECT_NE(again.status().message().find("max_memory_bytes"), std::string::npos) << again.status().to_string();
  // With the default limit back, the same context runs.
  if (ctx.ok()) EXPECT_TRUE((*ctx)->run({{"image", Value::of(x)}}).ok());
}

// A chain of static-shaped elementwise ops: the arena holds fewer bytes than the intermediates
// together (lifetimes let values share memory), and outputs stay right.
TEST(Runtime, ArenaReusesMemoryAcrossLifetimes) {
  auto g = std::make_shared<ir::Graph>();
  g->opsets[""] = 17;
  const Shape shape{256, 64};
  auto type = ir::Type::tensor(DataType::kFloat32, ir::SymShape::of(shape));
  ir::Value* x = g->add_value("x", type);
  x->is_input = true;
  g->inputs.push_back(x);
  ir::Value* cur = x;
  const int n = 6;
  for (int i = 0; i < n; ++i) {
    ir::Value* y = g->add_value("y" + std::to_string(i), type);
    g->add_node(i % 2 ? "Neg" : "Abs", "", {cur}, {y}, "op" + std::to_string(i));
    cur = y;
  }
  cur->is_output = true;
  g->outputs.push_back(cur);
  auto plan = lower(g, {});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const size_t one = static_cast<size_t>(shape_numel(shape)) * 4;
  EXPECT_GT((*plan)->arena_bytes[0], 0u);
  EXPECT_LE((*plan)->arena_bytes[0], 2 * one);  // n-1 intermediates, at most two live at once
  ContextResources res;
  res.arena[0] = std::make_shared<Storage>();
  res.arena[0]->data = std::aligned_alloc(64, (*plan)->arena_bytes[0]);
  res.arena[0]->bytes = (*plan)->arena_bytes[0];
  res.arena[0]->release = [](void* p) { std::free(p); };
  Frame f(**plan, res, nullptr);
  Tensor in = Tensor::empty(DataType::kFloat32, shape);
  for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] = static_cast<float>(i % 17) - 8.f;
  f.slots[(*plan)->inputs[0]] = Value::of(in);
  ASSERT_TRUE(f.execute().ok());
  const Tensor& out = f.slots[(*plan)->outputs[0]].tensor;
  for (int64_t i = 0; i < in.numel(); ++i) ASSERT_EQ(out.data<float>()[i], -std::abs(in.data<float>()[i]));
}

// Loading an engine instantiates the stored plan: lowering never runs, and the loaded engine gives
// the built engine's outputs.
TEST(Runtime, EngineFileLoadsWithoutLowering) {
  BuildOptions o;
  o.opt_level = 2;
  auto engine = Engine::build(kExample, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto bytes = (*engine)->serialize();
  ASSERT_TRUE(bytes.ok());
  const uint64_t before = lowering_count(), passes_before = passes::optimize_count();
  auto loaded = Engine::load_from_bytes(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(lowering_count(), before) << "loading an engine ran the lowering";
  EXPECT_EQ(passes::optimize_count(), passes_before) << "loading an engine ran the optimizer's passes";
  EXPECT_EQ((*loaded)->placement_report(), (*engine)->placement_report());
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(run_example(**loaded, *x), run_example(**engine, *x));
}

// A build's product is its engine file, and the engine a build returns is that file loaded through
// the runtime's one EngineFile → Engine path (#39): built in this process, or saved and loaded, it is
// the same engine — the same file byte for byte, the same description (what `kiln inspect` prints:
// metadata, inputs and outputs, profiles, the plan with kernels and tactics) and bit-identical outputs.
// The build lowers once; reading its file back lowers nothing.
TEST(Runtime, BuiltEngineIsItsEngineFileLoaded) {
  for (int level : {0, 2}) {
    SCOPED_TRACE("opt level " + std::to_string(level));
    BuildOptions o;
    o.opt_level = level;
    ShapeProfile p;
    p.min["image"] = {1, 3, 32, 32};
    p.opt["image"] = {2, 3, 32, 32};
    p.max["image"] = {4, 3, 32, 32};
    o.profiles = {p};
    const uint64_t lowered = lowering_count();
    auto built = Engine::build(kExample, o);
    ASSERT_TRUE(built.ok()) << built.status().to_string();
    EXPECT_EQ(lowering_count(), lowered + 1) << "a build lowers its graph once";
    auto bytes = (*built)->serialize();
    ASSERT_TRUE(bytes.ok());
    const std::string path = ::testing::TempDir() + "kiln_built_" + std::to_string(level) + ".kiln";
    ASSERT_TRUE((*built)->save(path).ok());
    auto loaded = Engine::load(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    std::remove(path.c_str());
    auto again = (*loaded)->serialize();
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(*again == *bytes) << "the loaded engine writes another file";
    EXPECT_EQ((*loaded)->metadata(), (*built)->metadata());
    EXPECT_EQ((*loaded)->placement_report(), (*built)->placement_report());
    ASSERT_EQ((*loaded)->inputs().size(), (*built)->inputs().size());
    for (size_t i = 0; i < (*built)->inputs().size(); ++i) {
      EXPECT_EQ((*loaded)->inputs()[i].name, (*built)->inputs()[i].name);
      EXPECT_EQ((*loaded)->inputs()[i].shape, (*built)->inputs()[i].shape);
    }
    ASSERT_EQ((*loaded)->profiles().size(), 1u);
    EXPECT_EQ((*loaded)->profiles()[0].opt, (*built)->profiles()[0].opt);
    auto x = read_npy(kExampleInput);
    ASSERT_TRUE(x.ok());
    const auto direct = run_example(**built, *x);
    ASSERT_EQ(direct.size(), 10u);
    EXPECT_EQ(run_example(**loaded, *x), direct);  // bit for bit
  }
}

// Saving a built engine writes the bytes it was read back from (the build's engine file), without
// serializing it a second time, and those are the bytes a fresh serialization of its graph and plan
// writes (so a save is what it was before). When the kept bytes no longer match their checksum (memory
// a kernel bug wrote through), the engine is serialized anew instead.
TEST(Runtime, SavedEngineIsTheBuiltFile) {
  BuildOptions o;
  ShapeProfile p;
  p.min["image"] = {1, 3, 32, 32};
  p.opt["image"] = {2, 3, 32, 32};
  p.max["image"] = {4, 3, 32, 32};
  o.profiles = {p};
  auto built = Engine::build(kExample, o);
  ASSERT_TRUE(built.ok()) << built.status().to_string();
  const Engine::Impl& impl = (*built)->impl();
  ASSERT_TRUE(impl.file) << "a built engine keeps the file it was read from";
  const std::string written(static_cast<const char*>(impl.file->data), impl.file->bytes);
  auto fresh = write_engine_file(engine_file_of(impl));
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  EXPECT_TRUE(*fresh == written) << "serializing the engine again writes another file";
  auto file_bytes = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  };
  const std::string path = ::testing::TempDir() + "kiln_saved_is_built.kiln";
  ASSERT_TRUE((*built)->save(path).ok());
  EXPECT_TRUE(file_bytes(path) == written) << "the saved file is not the built one";
  auto serialized = (*built)->serialize();
  ASSERT_TRUE(serialized.ok());
  EXPECT_TRUE(*serialized == written);
  // The kept bytes damaged (their stored checksum here, so the graph and plan are unchanged): saved
  // from the engine's graph and plan instead, which gives the file as built.
  auto* kept = static_cast<char*>(const_cast<void*>(impl.file->data));
  kept[impl.file->bytes - 16] ^= 1;
  EXPECT_FALSE(engine_file_intact(*impl.file));
  std::remove(path.c_str());
  ASSERT_TRUE((*built)->save(path).ok());
  EXPECT_TRUE(file_bytes(path) == written) << "the engine serialized anew differs from its file";
  kept[impl.file->bytes - 16] ^= 1;
  EXPECT_TRUE(engine_file_intact(*impl.file));
  std::remove(path.c_str());
}

// A stored plan that points a step at another node's values is refused, not run.
TEST(Runtime, TamperedPlanIsRefused) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  auto bytes = (*engine)->serialize();
  ASSERT_TRUE(bytes.ok());
  std::string b = *bytes;
  auto* ef = fb::GetMutableEngineFile(b.data());
  ASSERT_TRUE(ef->plan() && ef->plan()->steps() && ef->plan()->steps()->size() > 2);
  // Swap the first output of two kernel steps: each now writes a value its node does not make.
  auto* steps = ef->mutable_plan()->mutable_steps();
  auto* o0 = steps->GetMutableObject(0)->mutable_outputs();
  auto* o1 = steps->GetMutableObject(1)->mutable_outputs();
  const int a = o0->Get(0), c = o1->Get(0);
  o0->Mutate(0, c);
  o1->Mutate(0, a);
  auto loaded = Engine::load_from_bytes(reseal(b));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find("is not the node's"), std::string::npos) << loaded.status().message();
}

// A stored plan whose lifetimes or release lists differ from what its steps imply is refused: a value
// released early (or kept past its readers) would let a step read a freed buffer or two live values
// share arena memory.
TEST(Runtime, TamperedLifetimesAreRefused) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  const std::string good = *(*engine)->serialize();
  const auto* plan = fb::GetEngineFile(good.data())->plan();
  ASSERT_TRUE(plan && plan->first_def() && plan->last_use());
  // A value read after the step that makes it: end its life there.
  int shortened = 0;
  for (flatbuffers::uoffset_t v = 0; v < plan->last_use()->size() && !shortened; ++v) {
    const int def = plan->first_def()->Get(v), use = plan->last_use()->Get(v);
    if (def < 0 || use <= def) continue;
    std::string b = good;
    fb::GetMutableEngineFile(b.data())->mutable_plan()->mutable_last_use()->Mutate(v, def);
    auto loaded = Engine::load_from_bytes(reseal(b));
    ASSERT_FALSE(loaded.ok()) << "value " << v << " released early loaded";
    EXPECT_NE(loaded.status().message().find("lifetimes differ"), std::string::npos) << loaded.status().message();
    ++shortened;
  }
  EXPECT_EQ(shortened, 1);
  // A release list naming another value (one that lives on) than the step's own.
  int swapped = 0;
  for (flatbuffers::uoffset_t k = 0; k < plan->steps()->size() && !swapped; ++k) {
    const auto* rel = plan->steps()->Get(k)->release();
    if (!rel || rel->size() == 0) continue;
    std::string b = good;
    auto* mrel = fb::GetMutableEngineFile(b.data())->mutable_plan()->mutable_steps()->GetMutableObject(k)->mutable_release();
    mrel->Mutate(0, plan->outputs()->Get(0));  // a graph output: never released
    auto loaded = Engine::load_from_bytes(reseal(b));
    ASSERT_FALSE(loaded.ok()) << "step " << k << " releasing the output loaded";
    EXPECT_NE(loaded.status().message().find("release list differs"), std::string::npos) << loaded.status().message();
    ++swapped;
  }
  EXPECT_EQ(swapped, 1);
}

// A stored plan that binds a node to another op's kernel is refused, not run: each kernel step's name
// is swapped in place for every CPU kernel name of the same length that belongs to another op.
TEST(Runtime, EngineKernelOfAnotherOpIsRefused) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  const std::string good = *(*engine)->serialize();
  auto cpu = backend_for(DeviceType::kCPU);
  ASSERT_TRUE(cpu.ok());
  const auto* steps = fb::GetEngineFile(good.data())->plan()->steps();
  int tried = 0;
  for (flatbuffers::uoffset_t k = 0; k < steps->size(); ++k) {
    const auto* name = steps->Get(k)->kernel();
    if (!name || name->size() == 0) continue;
    const KernelDef* own = (*cpu)->kernels().by_name(name->str());
    ASSERT_NE(own, nullptr) << name->str();
    for (const KernelDef& d : (*cpu)->kernels().all()) {
      if (d.name.size() != name->size() || d.op == own->op) continue;
      std::string b = good;
      auto* mname = fb::GetMutableEngineFile(b.data())->mutable_plan()->mutable_steps()->GetMutableObject(k)->mutable_kernel();
      std::memcpy(const_cast<char*>(mname->c_str()), d.name.data(), d.name.size());
      auto loaded = Engine::load_from_bytes(reseal(b));
      ++tried;
      ASSERT_FALSE(loaded.ok()) << "step " << k << " bound to '" << d.name << "' (was '" << name->str() << "') loaded";
      EXPECT_NE(loaded.status().message().find("is for another op"), std::string::npos) << loaded.status().message();
    }
  }
  EXPECT_GT(tried, 0);
}

// The plan is data: its steps name node, kernel row and device, and the kernels are made from those
// alone. A copy of a built plan's data, without its kernels, instantiates to the same rows; a step
// naming a row this kiln lacks, or a node the graph lacks, is refused with the step named.
TEST(Runtime, PlanDataInstantiatesItsKernels) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const CompiledGraph& built = *(*engine)->impl().plan;
  auto data_copy = [&] {
    auto c = std::make_unique<CompiledGraph>();
    c->graph = built.graph;
    c->nodes = built.nodes;
    c->values = built.values;
    c->steps = built.steps;
    c->inputs = built.inputs;
    c->outputs = built.outputs;
    c->by_name = built.by_name;
    return c;
  };
  auto subgraphs = make_subgraph_compiler();
  auto copy = data_copy();
  ASSERT_TRUE(copy->kernels.empty());
  ASSERT_TRUE(instantiate_kernels(*copy, subgraphs.get()).ok());
  ASSERT_EQ(copy->kernels.size(), built.steps.size());
  int kernels = 0;
  for (size_t si = 0; si < built.steps.size(); ++si) {
    const Step& s = built.steps[si];
    EXPECT_EQ(copy->kernels[si] != nullptr, s.kind == Step::Kind::kKernel) << si;
    if (s.kind != Step::Kind::kKernel) continue;
    ++kernels;
    EXPECT_EQ(&copy->node(s), &built.node(s));
    EXPECT_EQ(copy->backend(s).device().type, s.device);
  }
  EXPECT_GT(kernels, 2);

  auto missing_row = data_copy();
  size_t k = 0;
  while (missing_row->steps[k].kind != Step::Kind::kKernel) ++k;
  missing_row->steps[k].kernel_name = "cpu.NoSuchOp.f32";
  Status st = instantiate_kernels(*missing_row, subgraphs.get());
  EXPECT_EQ(st.code(), StatusCode::kEngineMismatch) << st.to_string();
  EXPECT_NE(st.message().find(missing_row->node(missing_row->steps[k]).describe()), std::string::npos) << st.message();

  auto bad_node = data_copy();
  bad_node->steps[k].node = static_cast<int>(bad_node->nodes.size());
  st = instantiate_kernels(*bad_node, subgraphs.get());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("step " + std::to_string(k)), std::string::npos) << st.message();
}

// A context keeps its engine alive: the Engine object may go first (here in kiln_tests, so that the
// sanitizer job's ASan build sees any use after free).
TEST(Runtime, ContextOutlivesItsEngine) {
  auto built = Engine::build(kExample);
  ASSERT_TRUE(built.ok());
  std::shared_ptr<Engine> engine = std::move(*built);
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  const std::vector<float> want = run_example(*engine, *x);
  auto ctx = engine->create_context();
  ASSERT_TRUE(ctx.ok());
  engine.reset();
  EXPECT_EQ(engine.use_count(), 0);
  for (int k = 0; k < 2; ++k) {
    auto r = (*ctx)->run({{"image", Value::of(*x)}});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    const Tensor& y = (*r)[0].tensor;
    EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + y.numel()), want);
  }
}

// The test lowering and engine loading share: op and domain, opset range, then the kernel's check.
TEST(Runtime, KernelRejectsNamesTheReason) {
  auto cpu = backend_for(DeviceType::kCPU);
  ASSERT_TRUE(cpu.ok());
  ir::Graph g;
  ir::Value* x = g.add_value("x", ir::Type::tensor(DataType::kFloat32, ir::SymShape{{2, 3}}));
  ir::Node* n = g.add_node("Softmax", "", {x}, {g.add_value("y", ir::Type::tensor(DataType::kFloat32, ir::SymShape{{2, 3}}))}, "sm");
  n->opset = 13;
  const KernelDef* softmax = (*cpu)->kernels().find(*n);
  ASSERT_NE(softmax, nullptr);
  EXPECT_EQ(softmax->rejects(*n), "");
  const KernelDef* relu = nullptr;
  for (const KernelDef& d : (*cpu)->kernels().all())
    if (d.op == "Relu") relu = &d;
  ASSERT_NE(relu, nullptr);
  EXPECT_NE(relu->rejects(*n).find("it is for op Relu"), std::string::npos) << relu->rejects(*n);
  KernelDef old = *softmax;
  old.until = 10;
  EXPECT_NE(old.rejects(*n).find("opset 13 outside [1,10]"), std::string::npos) << old.rejects(*n);
  KernelDef other_domain = *softmax;
  other_domain.domain = "kiln";
  EXPECT_NE(other_domain.rejects(*n).find("it is for op kiln.Softmax"), std::string::npos) << other_domain.rejects(*n);
  KernelDef picky = *softmax;
  picky.check = [](const ir::Node&) { return std::string("input 0 has dtype float32 which it does not take"); };
  EXPECT_EQ(picky.rejects(*n), "input 0 has dtype float32 which it does not take");
}

// `kiln build` reports a memory plan even when the batch axis is dynamic (planned at batch 1).
TEST(Runtime, PlacementReportHasAnArenaForDynamicBatch) {
  auto engine = Engine::build(kExample);
  ASSERT_TRUE(engine.ok());
  const std::string r = (*engine)->placement_report();
  EXPECT_EQ(r.find("arena: cpu 0 bytes"), std::string::npos) << r;
  EXPECT_NE(r.find("planned for image=[1,3,32,32]"), std::string::npos) << r;
}

// A CUDA engine (weights uploaded, copies between devices) round-trips through its file.
TEST(Runtime, CudaEngineFileRoundTrips) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  BuildOptions o;
  o.device = DeviceType::kCUDA;
  auto engine = Engine::build(kExample, o);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto bytes = (*engine)->serialize();
  ASSERT_TRUE(bytes.ok());
  auto loaded = Engine::load_from_bytes(*bytes);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(run_example(**loaded, *x), run_example(**engine, *x));
}

// The example model as a CUDA engine with fusions (opt level 2).
Expected<std::shared_ptr<Engine>> cuda_example_engine() {
  BuildOptions o;
  o.device = DeviceType::kCUDA;
  o.opt_level = 2;
  return Engine::build(kExample, o);
}

// A context's GPU work on the caller's stream: the same outputs as on its own stream, also on graph
// replays (third run on) and after switching back; a CPU engine refuses. Then four contexts of one
// engine run concurrently from four threads (each on its own stream), every run equal to the
// single-thread result.
TEST(Runtime, CudaCallersStreamAndConcurrentContexts) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  auto engine = cuda_example_engine();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  const auto want = run_example(**engine, *x);
  auto caller = (*cuda_backend())->create_state();  // a stream that no context owns
  ASSERT_TRUE(caller.ok());
  void* stream = static_cast<cuda::CudaState*>(caller->get())->stream;
  auto ctx = (*engine)->create_context();
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE((*ctx)->set_cuda_stream(stream).ok());
  auto values = [](const std::vector<Value>& out) {
    const Tensor& y = out[0].tensor;
    return std::vector<float>(y.data<float>(), y.data<float>() + y.numel());
  };
  for (int r = 0; r < 4; ++r) {
    auto out = (*ctx)->run({{"image", Value::of(*x)}});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    EXPECT_EQ(values(*out), want) << "run " << r << " on the caller's stream";
  }
  EXPECT_GE((*ctx)->cuda_graphs(), 1u);  // replays happened on the caller's stream
  ASSERT_TRUE((*ctx)->set_cuda_stream(nullptr).ok());
  auto back = (*ctx)->run({{"image", Value::of(*x)}});
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(values(*back), want);
  auto cpu_engine = Engine::build(kExample);
  ASSERT_TRUE(cpu_engine.ok());
  auto cpu_ctx = (*cpu_engine)->create_context();
  ASSERT_TRUE(cpu_ctx.ok());
  EXPECT_EQ((*cpu_ctx)->set_cuda_stream(stream).code(), StatusCode::kInvalidArgument);

  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      auto c = (*engine)->create_context();
      if (!c.ok()) {
        mismatches[t] = -1;
        return;
      }
      for (int r = 0; r < 20; ++r) {
        auto out = (*c)->run({{"image", Value::of(*x)}});
        if (!out.ok() || values(*out) != want) ++mismatches[t];
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// Loading a CUDA engine uploads its weights while other threads' contexts capture CUDA graphs (a
// served model's first runs of a new shape while another model loads): the uploads must not wait on
// every stream of the device (a capturing stream refuses it: the load failed with "operation not
// permitted when stream is capturing", and the capture with it). One thread loads the engine file
// again and again (and frees it), four run fresh contexts (each captures on its third run).
TEST(Runtime, CudaLoadsWhileOtherThreadsCaptureGraphs) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  auto engine = cuda_example_engine();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto bytes = (*engine)->serialize();
  ASSERT_TRUE(bytes.ok());
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  const auto want = run_example(**engine, *x);
  std::atomic<bool> stop{false};
  std::atomic<int> captured{0}, runs{0}, loads{0};
  std::mutex mu;
  std::vector<std::string> errors;
  auto fail = [&](const std::string& e) {
    std::lock_guard<std::mutex> lock(mu);
    if (errors.size() < 8) errors.push_back(e);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      while (!stop) {
        auto c = (*engine)->create_context();
        if (!c.ok()) return fail(c.status().to_string());
        (*c)->set_cuda_graphs(true);  // whatever KILN_CUDA_GRAPHS says: the test is about captures
        for (int r = 0; r < 4; ++r) {
          auto out = (*c)->run({{"image", Value::of(*x)}});
          if (!out.ok()) return fail("run: " + out.status().to_string());
          const Tensor& y = (*out)[0].tensor;
          if (std::vector<float>(y.data<float>(), y.data<float>() + y.numel()) != want) return fail("run: outputs differ");
          ++runs;
        }
        captured += static_cast<int>((*c)->cuda_graphs());
      }
    });
  for (int i = 0; i < 40; ++i) {
    auto loaded = Engine::load_from_bytes(*bytes);
    if (!loaded.ok()) {
      fail("load " + std::to_string(i) + ": " + loaded.status().to_string());
      break;
    }
    ++loads;
  }
  stop = true;
  for (auto& th : threads) th.join();
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ(loads.load(), 40);
  EXPECT_GT(captured.load(), 0) << "the contexts captured graphs while the engine loaded (" << runs << " runs)";
}

// Both memory planners give valid plans (buffers alive at the same time never overlap, every buffer
// inside the arena) on random lifetimes; the sweep (used past 4096 buffers) stays within 1.5x of the
// greedy plan here, and sizes near SIZE_MAX saturate instead of wrapping.
TEST(MemoryPlanner, SweepAndGreedyPlansAreValid) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    const int n = 1500, steps = 600;
    std::vector<BufferRequest> reqs(n);
    for (auto& r : reqs) {
      r.begin = static_cast<int>(rng() % steps);
      r.end = r.begin + static_cast<int>(rng() % (trial % 2 ? 8 : 80));
      r.bytes = (rng() % 4 == 0) ? 0 : 1 + rng() % (trial < 2 ? 4096 : (1 << 20));
    }
    size_t live_peak = 0;
    for (int t = 0; t < steps + 80; ++t) {
      size_t live = 0;
      for (const auto& r : reqs)
        if (r.begin <= t && t <= r.end) live += (r.bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
      live_peak = std::max(live_peak, live);
    }
    std::vector<size_t> og, os;
    const size_t greedy = plan_offsets_greedy(reqs, og), sweep = plan_offsets_sweep(reqs, os);
    for (const auto& [total, off] : {std::pair<size_t, const std::vector<size_t>*>{greedy, &og}, {sweep, &os}}) {
      EXPECT_GE(total, live_peak);
      for (int i = 0; i < n; ++i) {
        const size_t bi = (reqs[i].bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
        if (!bi) continue;
        ASSERT_LE((*off)[i] + bi, total);
        ASSERT_EQ((*off)[i] % kArenaAlign, 0u);
        for (int j = i + 1; j < n; ++j) {
          const size_t bj = (reqs[j].bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign;
          if (!bj || reqs[i].end < reqs[j].begin || reqs[j].end < reqs[i].begin) continue;
          ASSERT_TRUE((*off)[i] + bi <= (*off)[j] || (*off)[j] + bj <= (*off)[i]) << "buffers " << i << " and " << j;
        }
      }
    }
    EXPECT_LE(sweep, greedy + greedy / 2) << "trial " << trial;
  }
  std::vector<size_t> off;
  EXPECT_EQ(plan_offsets({{SIZE_MAX - 3, 0, 1}, {512, 0, 1}}, off), SIZE_MAX);
}

// Device-resident inputs and outputs (IOBinding): CUDA tensors in and out of run_into give the host
// run's outputs bit for bit, outputs written in place on the device (also on graph replays); an input
// whose values a step reads on the host is refused naming the step; CPU engines refuse CUDA tensors.
TEST(Runtime, CudaDeviceResidentInputsAndOutputs) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  auto engine = cuda_example_engine();
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  const auto want = run_example(**engine, *x);
  const Device gpu{DeviceType::kCUDA};
  auto dx = allocate_tensor(x->dtype(), x->shape(), gpu);
  ASSERT_TRUE(dx.ok()) << dx.status().to_string();
  ASSERT_TRUE(transfer(*x, *dx).ok());
  auto dy = allocate_tensor(DataType::kFloat32, {1, 10}, gpu);
  ASSERT_TRUE(dy.ok());
  auto ctx = (*engine)->create_context();
  ASSERT_TRUE(ctx.ok());
  std::vector<Value> in{Value::of(*dx)}, out{Value::of(*dy)};
  const void* where = dy->raw();
  for (int r = 0; r < 4; ++r) {  // the third run on replays a CUDA graph
    Tensor clear = Tensor::empty(DataType::kFloat32, {1, 10});
    std::memset(clear.raw(), 0, clear.nbytes());
    ASSERT_TRUE(transfer(clear, out[0].tensor).ok());
    ASSERT_TRUE((*ctx)->run_into(in, out).ok());
    ASSERT_EQ(out[0].tensor.raw(), where) << "the output was not written in place";
    Tensor host = Tensor::empty(DataType::kFloat32, {1, 10});
    ASSERT_TRUE(transfer(out[0].tensor, host).ok());
    EXPECT_EQ(std::vector<float>(host.data<float>(), host.data<float>() + 10), want) << "run " << r;
  }
  EXPECT_GE((*ctx)->cuda_graphs(), 1u);
  // A CPU engine refuses device tensors, naming the input.
  auto cpu = Engine::build(kExample);
  ASSERT_TRUE(cpu.ok());
  auto cctx = (*cpu)->create_context();
  auto r = (*cctx)->run({{"image", Value::of(*dx)}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'image'"), std::string::npos) << r.status().message();
}

// Large GPU outputs are written by their step straight into the caller's device buffer (the copy
// skipped; ShapePlan::direct_out): relu(σ(x)·w) (4 MiB, read only by its copy) may be, σ(x)·w itself
// (read by the Relu too) may not. Runs alternate host outputs and device outputs, so the CUDA graphs found
// on one kind of run serve the other; an output buffer that shares memory with the input is written
// by a copy at the end as before. Every result is bit-identical to the host run's.
TEST(Runtime, CudaLargeOutputsWrittenInPlace) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  constexpr int64_t M = 512, K = 256, N = 2048;  // relu(x·w): 4 MiB of float32
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto* vi = g->add_input();
  vi->set_name("x");
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  tt->mutable_shape()->add_dim()->set_dim_value(M);
  tt->mutable_shape()->add_dim()->set_dim_value(K);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(K);
  w->add_dims(N);
  for (int64_t i = 0; i < K * N; ++i) w->add_float_data(uni(rng));
  auto node = [&](const char* op, std::vector<std::string> ins, const char* out) {
    auto* n = g->add_node();
    n->set_op_type(op);
    for (auto& i : ins) n->add_input(i);
    n->add_output(out);
  };
  node("Sigmoid", {"x"}, "sx");  // with the product: a CUDA graph of two steps
  node("MatMul", {"sx", "w"}, "xw");
  node("Relu", {"xw"}, "y");
  g->add_output()->set_name("y");
  g->add_output()->set_name("xw");
  BuildOptions o;
  o.device = DeviceType::kCUDA;
  auto engine = Engine::build_from_bytes(m.SerializeAsString(), o, ".");
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Tensor x = Tensor::empty(DataType::kFloat32, {M, K});
  for (int64_t i = 0; i < M * K; ++i) x.data<float>()[i] = uni(rng);
  auto ctx = (*engine)->create_context();
  ASSERT_TRUE(ctx.ok());
  auto want = (*ctx)->run({{"x", Value::of(x)}});
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  auto host_values = [](const Tensor& t) {
    Tensor h = Tensor::empty(t.dtype(), t.shape());
    EXPECT_TRUE(transfer(t, h).ok());
    return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
  };
  const std::vector<float> want_y = host_values((*want)[0].tensor), want_xw = host_values((*want)[1].tensor);
  const Device gpu{DeviceType::kCUDA};
  auto dx = allocate_tensor(DataType::kFloat32, {M, K}, gpu);
  auto dy = allocate_tensor(DataType::kFloat32, {M, N}, gpu);
  auto dxw = allocate_tensor(DataType::kFloat32, {M, N}, gpu);
  ASSERT_TRUE(dx.ok() && dy.ok() && dxw.ok());
  ASSERT_TRUE(transfer(x, *dx).ok());
  Tensor zeros = Tensor::empty(DataType::kFloat32, {M, N});
  std::memset(zeros.raw(), 0, zeros.nbytes());
  for (int r = 0; r < 8; ++r) {  // graphs replay from the third run of the signature on
    if (r % 2) {
      auto got = (*ctx)->run({{"x", Value::of(x)}});
      ASSERT_TRUE(got.ok()) << got.status().to_string();
      EXPECT_EQ(host_values((*got)[0].tensor), want_y) << "host run " << r;
      EXPECT_EQ(host_values((*got)[1].tensor), want_xw) << "host run " << r;
      continue;
    }
    ASSERT_TRUE(transfer(zeros, *dy).ok() && transfer(zeros, *dxw).ok());
    std::vector<Value> in{Value::of(*dx)}, out{Value::of(*dy), Value::of(*dxw)};
    ASSERT_TRUE((*ctx)->run_into(in, out).ok());
    ASSERT_EQ(out[0].tensor.raw(), dy->raw());
    ASSERT_EQ(out[1].tensor.raw(), dxw->raw());
    EXPECT_EQ(host_values(out[0].tensor), want_y) << "device run " << r;
    EXPECT_EQ(host_values(out[1].tensor), want_xw) << "device run " << r;
  }
  EXPECT_GE((*ctx)->cuda_graphs(), 1u);
  // The input inside the output's buffer: the output must not be written before the product read x.
  auto shared = allocate_tensor(DataType::kFloat32, {M, N}, gpu);
  ASSERT_TRUE(shared.ok());
  Tensor x_in_y = Tensor::view(shared->storage(), 0, DataType::kFloat32, {M, K});
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(transfer(x, x_in_y).ok());
    std::vector<Value> in{Value::of(x_in_y)}, out{Value::of(*shared), Value::of(*dxw)};
    ASSERT_TRUE((*ctx)->run_into(in, out).ok());
    EXPECT_EQ(host_values(out[0].tensor), want_y) << "overlapping run " << r;
    EXPECT_EQ(host_values(out[1].tensor), want_xw) << "overlapping run " << r;
  }
}

TEST(Runtime, CudaInputReadOnTheHostMustBeACpuTensor) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto input = [&](const std::string& name, int elem, std::vector<int64_t> dims) {
    auto* vi = g->add_input();
    vi->set_name(name);
    auto* t = vi->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  input("x", 1, {2, 6});
  input("s", 7, {2});
  auto* n = g->add_node();
  n->set_op_type("Reshape");
  n->add_input("x");
  n->add_input("s");
  n->add_output("y");
  g->add_output()->set_name("y");
  BuildOptions o;
  o.device = DeviceType::kCUDA;
  auto engine = Engine::build_from_bytes(m.SerializeAsString(), o, ".");
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  Tensor x = Tensor::empty(DataType::kFloat32, {2, 6}), s = Tensor::empty(DataType::kInt64, {2});
  for (int i = 0; i < 12; ++i) x.data<float>()[i] = static_cast<float>(i);
  s.data<int64_t>()[0] = 3;
  s.data<int64_t>()[1] = 4;
  auto dx = allocate_tensor(DataType::kFloat32, {2, 6}, Device{DeviceType::kCUDA});
  auto ds = allocate_tensor(DataType::kInt64, {2}, Device{DeviceType::kCUDA});
  ASSERT_TRUE(dx.ok() && ds.ok());
  ASSERT_TRUE(transfer(x, *dx).ok() && transfer(s, *ds).ok());
  auto ctx = (*engine)->create_context();
  auto bad = (*ctx)->run({{"x", Value::of(*dx)}, {"s", Value::of(*ds)}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("reads it on the host"), std::string::npos) << bad.status().message();
  auto good = (*ctx)->run({{"x", Value::of(*dx)}, {"s", Value::of(s)}});
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  EXPECT_EQ((*good)[0].tensor.shape(), (Shape{3, 4}));
  EXPECT_EQ((*good)[0].tensor.data<float>()[11], 11.f);
}

// Profiling records one event per step per run (named after its node, with the kernel and the shapes
// the run saw) and one per run spanning its steps; off again, runs record nothing.
TEST(Runtime, ProfilingRecordsEveryStepOfEveryRun) {
  auto built = Engine::build(kExample);
  ASSERT_TRUE(built.ok());
  auto x = read_npy(kExampleInput);
  ASSERT_TRUE(x.ok());
  auto ctx = (*built)->create_context();
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE((*ctx)->run({{"image", Value::of(*x)}}).ok());
  EXPECT_TRUE((*ctx)->take_profile().empty());
  (*ctx)->set_profiling(true);
  for (int k = 0; k < 3; ++k) ASSERT_TRUE((*ctx)->run({{"image", Value::of(*x)}}).ok());
  const std::vector<ProfileEvent> ev = (*ctx)->take_profile();
  std::map<int64_t, int> steps_per_run;
  std::set<std::string> ops;
  int run_events = 0;
  for (const ProfileEvent& e : ev) {
    EXPECT_GE(e.dur_us, 0.0);
    if (e.step < 0) {
      ++run_events;
      continue;
    }
    ++steps_per_run[e.run];
    ops.insert(e.op);
    EXPECT_FALSE(e.name.empty());
    EXPECT_FALSE(e.kernel.empty());
    EXPECT_EQ(e.device, "cpu");
    ASSERT_FALSE(e.outputs.empty());
    EXPECT_EQ(e.outputs[0].rfind("float32[", 0), 0u) << e.outputs[0];
    EXPECT_GT(e.output_bytes, 0u);
  }
  EXPECT_EQ(run_events, 3);
  ASSERT_EQ(steps_per_run.size(), 3u);
  EXPECT_EQ(steps_per_run[0], steps_per_run[2]);
  EXPECT_GT(steps_per_run[0], 3);
  EXPECT_TRUE(ops.count("kiln.FusedConv"));  // opt level 2 (the default) fuses Conv + Relu
  const std::string trace = profile_to_chrome_trace(ev, "tiny <cnn>");
  EXPECT_NE(trace.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(trace.find("\"op_name\": \"kiln.FusedConv\""), std::string::npos);
  EXPECT_TRUE((*ctx)->take_profile().empty());
  (*ctx)->set_profiling(false);
  ASSERT_TRUE((*ctx)->run({{"image", Value::of(*x)}}).ok());
  EXPECT_TRUE((*ctx)->take_profile().empty());
}

// Kernel row names are engine-file keys (a step records its row by name, and loading looks it up):
// every row of the CPU and CUDA registries has its own name.
TEST(Runtime, KernelRowNamesAreUnique) {
  std::map<std::string, int> seen;
  for (const KernelDef& d : cpu_backend().kernels().all()) ++seen[d.name];
  if (const KernelRegistry* cuda = cuda_kernel_registry())
    for (const KernelDef& d : cuda->all()) ++seen[d.name];
  EXPECT_GT(seen.size(), 100u);
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << "kernel row name '" << name << "' is used " << n << " times";
}

// CUDA views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) take their input's memory where they are
// its last reader, and copy where it is read again: s feeds a Reshape and, later, the Add, so the
// Reshape must not write over it; the chain a → b → c reuses a's buffer. Outputs equal the CPU
// engine's on every run, graph replays (third run on) included, with new inputs each run. Split's
// one-launch kernel (launch_split) is checked by CudaOps.DataMovement; here it feeds the chain.
TEST(Runtime, CudaViewsShareTheirInputsMemory) {
  if (!cuda_backend().ok()) GTEST_SKIP() << "no CUDA GPU";
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(18);
  auto* g = m.mutable_graph();
  g->set_name("views");
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_value(4);
  tt->mutable_shape()->add_dim()->set_dim_value(6);
  auto shape_const = [&](const char* name, std::vector<int64_t> v) {
    auto* c = g->add_initializer();
    c->set_name(name);
    c->set_data_type(::onnx::TensorProto::INT64);
    c->add_dims(static_cast<int64_t>(v.size()));
    for (int64_t d : v) c->add_int64_data(d);
  };
  shape_const("s2x12", {2, 12});
  shape_const("s24", {24});
  shape_const("s4x6", {4, 6});
  auto node = [&](const char* op, std::vector<const char*> ins, std::vector<const char*> outs) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(std::string(op) + "_" + outs[0]);
    for (const char* i : ins) n->add_input(i);
    for (const char* o : outs) n->add_output(o);
    return n;
  };
  node("Relu", {"x"}, {"a"});
  node("Reshape", {"a", "s2x12"}, {"b"});  // a's last reader: b is a
  node("Reshape", {"b", "s24"}, {"c"});
  node("Split", {"c"}, {"c0", "c1", "c2"})->add_attribute()->CopyFrom([] {
    ::onnx::AttributeProto a;
    a.set_name("num_outputs");
    a.set_type(::onnx::AttributeProto::INT);
    a.set_i(3);
    return a;
  }());
  node("Neg", {"c1"}, {"d"});
  node("Sigmoid", {"x"}, {"s"});
  node("Reshape", {"s", "s24"}, {"t"});  // s is read again by the Add: t is a copy
  node("Neg", {"t"}, {"tn"});
  node("Reshape", {"tn", "s4x6"}, {"u0"});
  node("Add", {"u0", "s"}, {"u"});
  for (const char* name : {"d", "c0", "u"}) {
    auto* out = g->add_output();
    out->set_name(name);
    out->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  }
  const std::string bytes = m.SerializeAsString();
  BuildOptions o;
  o.opt_level = 0;  // keep every view
  auto cpu = Engine::build_from_bytes(bytes, o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  o.device = DeviceType::kCUDA;
  auto gpu = Engine::build_from_bytes(bytes, o);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto cc = (*cpu)->create_context();
  auto gc = (*gpu)->create_context();
  ASSERT_TRUE(cc.ok() && gc.ok());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.f, 3.f);
  for (int run = 0; run < 5; ++run) {
    Tensor x = Tensor::empty(DataType::kFloat32, {4, 6});
    for (int i = 0; i < 24; ++i) x.data<float>()[i] = u(rng);
    auto want = (*cc)->run({{"x", Value::of(x)}});
    auto got = (*gc)->run({{"x", Value::of(x)}});
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->size(), 3u);
    for (size_t k = 0; k < 3; ++k) {
      const Tensor& w = (*want)[k].tensor;
      const Tensor& h = (*got)[k].tensor;
      ASSERT_EQ(w.shape(), h.shape()) << "output " << k;
      for (int64_t i = 0; i < w.numel(); ++i)
        EXPECT_NEAR(h.data<float>()[i], w.data<float>()[i], 1e-6f) << "run " << run << " output " << k << " element " << i;
    }
  }
}
