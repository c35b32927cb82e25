// tools/cli/cmd_bench.cpp — `kiln bench`: repeated runs timed (median, percentiles, throughput; on CUDA
// also by CUDA events), on one or several streams, optionally with inputs and outputs in GPU memory.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "gpu_timer.h"
#include "kiln/kiln.h"
#include "run_command.h"

namespace kiln_cli {

namespace {

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

}  // namespace

void RunCommand::add_bench_options() {
  bench->add_option("-n,--iterations", iterations, "timed runs")->check(CLI::PositiveNumber);
  bench->add_option("--warmup", warmup, "untimed runs first")->check(CLI::NonNegativeNumber);
  bench->add_option("--streams", streams, "run N contexts concurrently, one thread each (throughput)")->check(CLI::Range(1, 64));
  bench->add_option("--duration", duration, "time runs for this many seconds instead of -n runs")->check(CLI::PositiveNumber);
  bench->add_option("--json", bench_json, "also write the figures to this JSON file");
  bench->add_flag("--device-io", device_io,
                  "CUDA engines: inputs and outputs stay in GPU memory (uploaded once; no host copies timed)");
}

int RunCommand::bench_engine(const kiln::Engine& e, std::unique_ptr<kiln::ExecutionContext> ctx,
                             const std::map<std::string, kiln::Value>& feed, const NewContext& new_context) {
  // bench: the allocation-free form (inputs in engine order, outputs reused from run to run); with
  // --streams N, N contexts on N threads, each with its own outputs.
  std::vector<kiln::Value> in_order;
  for (const kiln::TensorInfo& ti : e.inputs()) {
    auto it = feed.find(ti.name);
    in_order.push_back(it == feed.end() ? kiln::Value() : it->second);
  }
  const kiln::Device gpu{kiln::DeviceType::kCUDA};
  if (device_io) {
    if (e.device() != kiln::DeviceType::kCUDA) return fail(kiln::invalid_argument("--device-io needs a CUDA engine"));
    // Inputs uploaded once (shared, read only); each stream's outputs in device buffers of the shapes a
    // first run gives.
    if (kiln::Status st = to_device(in_order, gpu, /*copy=*/true); !st.ok()) return fail(st);
    std::printf("inputs and outputs in GPU memory (--device-io)\n");
  }
  std::vector<std::unique_ptr<kiln::ExecutionContext>> ctxs;
  ctxs.push_back(std::move(ctx));
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
  if (e.device() == kiln::DeviceType::kCUDA)
    for (size_t k = 0; k < ctxs.size(); ++k) {
      timers[k] = kiln_tools::make_gpu_timer();
      if (!timers[k]) break;
      if (kiln::Status st = ctxs[k]->set_cuda_stream(timers[k]->stream()); !st.ok()) return fail(st);
    }
  auto loop = [&](size_t k) {
    auto& c = *ctxs[k];
    kiln_tools::GpuTimer* timer = timers[k].get();
    // Timed runs are run_into's (the context's own outputs, reused): no allocation in the loop when
    // the run count is known, the samples' room included.
    if (duration <= 0) {
      lat[k].reserve(static_cast<size_t>(iterations));
      if (timer) gpu_lat[k].reserve(static_cast<size_t>(iterations));
    }
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
  if (e.device() == kiln::DeviceType::kCUDA) std::printf("cuda graphs: %zu\n", ctxs[0]->cuda_graphs());
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
                 model.c_str(), e.metadata()["device"].c_str(), ctxs.size(), warmup, ms.size(), device_io ? "true" : "false",
                 e.device() == kiln::DeviceType::kCUDA ? ctxs[0]->cuda_graphs() : size_t{0}, static_cast<long long>(batch),
                 pct(0.5), mean, ms.front(), pct(0.9), pct(0.99), ms.back(), wall_ms / 1e3, runs_per_s,
                 runs_per_s * static_cast<double>(std::max<int64_t>(batch, 1)), gfmt(0.5).c_str(),
                 gms.empty() ? "null" : std::to_string(gms.front()).c_str(), gfmt(0.9).c_str());
    std::fclose(f);
  }
  return 0;
}

}  // namespace kiln_cli
