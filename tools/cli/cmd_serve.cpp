// tools/cli/cmd_serve.cpp — `kiln serve`: a KServe v2 / Triton-compatible inference server (HTTP and
// gRPC) over a model repository (src/serve/), with dynamic batching and Prometheus metrics. SIGINT or
// SIGTERM stops it gracefully: no new connections, the requests in flight and queued are answered first.
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>

#include "commands.h"
#include "common.h"
#include "kiln/kiln.h"
#include "serve/grpc_server.h"
#include "serve/http_server.h"
#include "serve/repository.h"

namespace kiln_cli {

namespace {

struct ServeCommand {
  std::string repository, host = "127.0.0.1", device = "cpu";
  int http_port = 8000, grpc_port = 8001, metrics_port = 8002, http_threads = 256, grpc_threads = 512;
  int64_t default_max_batch_size = 8;
  size_t max_body_bytes = size_t{256} << 20;
  double http_head_timeout_s = 10;
  size_t http_min_rate = 4096;
  bool no_engine_cache = false, strict_readiness = true;

  CLI::App* add_to(CLI::App& app);
  int execute();
};

CLI::App* ServeCommand::add_to(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "serve", "Serve a model repository over HTTP and gRPC (KServe v2 / Triton protocol), with dynamic batching");
  sub->add_option("--model-repository", repository, "folder of <model>/config.pbtxt and <model>/<version>/model.onnx")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("--host", host, "address to listen on");
  sub->add_option("--http-port", http_port, "HTTP port (0: any free port; the ready line tells which)")
      ->check(CLI::Range(0, 65535));
  sub->add_option("--grpc-port", grpc_port, "gRPC port (KServe v2 GRPCInferenceService; 0: any free port; -1: none)")
      ->check(CLI::Range(-1, 65535));
  sub->add_option("--metrics-port", metrics_port, "Prometheus metrics port (/metrics; 0: any free port; -1: none)")
      ->check(CLI::Range(-1, 65535));
  sub->add_option("--device", device, "device of models whose instance_group kind is KIND_AUTO or absent")
      ->check(CLI::IsMember({"cpu", "cuda", "gpu"}));
  sub->add_option("--default-max-batch-size", default_max_batch_size,
                  "max_batch_size of models without config.pbtxt whose batch dim is dynamic (0: no batching)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-body-bytes", max_body_bytes, "largest request body accepted (larger: HTTP 413)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--http-threads", http_threads,
                  "HTTP requests served at once (connections waiting for a request, idle or slow, hold none)")
      ->check(CLI::Range(1, 65536));
  sub->add_option("--http-head-timeout", http_head_timeout_s,
                  "seconds a client has from the first byte of a request head to its end (else 408); a connection "
                  "that sends nothing is closed after it")
      ->check(CLI::Range(0.001, 3600.0));
  sub->add_option("--http-min-rate", http_min_rate,
                  "bytes per second below which a request body or response is cut, once it has waited on the "
                  "client --http-head-timeout in all (0: never)");
  sub->add_option("--grpc-threads", grpc_threads, "gRPC calls served at once (past it: RESOURCE_EXHAUSTED)")
      ->check(CLI::Range(2, 65536));
  sub->add_flag("--no-engine-cache", no_engine_cache,
                "build every engine on load, without reading or writing <version>/model.<key>.kiln");
  sub->add_option("--strict-readiness", strict_readiness,
                  "the server is ready (/v2/health/ready, gRPC ServerReady) only while every model loaded (true, as "
                  "Triton's default) or whenever it is up (false)");
  return sub;
}

int ServeCommand::execute() {
  // SIGINT/SIGTERM are taken by one thread (sigwait), so every thread started below inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A server holds a socket per client: take the whole open-file limit the system allows (the soft
  // limit is often 1024), as servers do; the HTTP gate waits for at most half of it.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }

  std::mutex log_mu;
  kiln::serve::RepositoryOptions ro;
  ro.path = repository;
  ro.device = parse_device(device);
  ro.default_max_batch_size = default_max_batch_size;
  ro.cache_engines = !no_engine_cache;
  ro.strict_readiness = strict_readiness;
  ro.log = [&log_mu](const std::string& line) {
    std::lock_guard<std::mutex> lock(log_mu);
    std::cerr << "kiln serve: " << line << std::endl;
  };
  kiln::serve::Repository models(ro);
  kiln::serve::HttpOptions ho;
  ho.host = host;
  ho.port = http_port;
  ho.metrics_port = metrics_port;
  ho.max_body_bytes = max_body_bytes;
  ho.threads = http_threads;
  ho.head_timeout_ms = static_cast<int>(http_head_timeout_s * 1000 + 0.5);
  ho.min_bytes_per_second = http_min_rate;
  kiln::serve::HttpServer server(models, ho);
  if (kiln::Status st = server.bind(); !st.ok()) return fail(st);
  kiln::serve::GrpcOptions go;
  go.host = host;
  go.port = grpc_port;
  go.max_message_bytes = max_body_bytes;
  go.max_threads = grpc_threads;
  kiln::serve::GrpcServer grpc(models, go);
  if (grpc_port >= 0)
    if (kiln::Status st = grpc.start(); !st.ok()) return fail(st);
  const int ready = models.load_all();
  const size_t listed = models.index().size();

  // A signal (also one that came while the models loaded, held pending until here) stops both fronts;
  // the models stay up until their requests in flight are answered, then shut down below.
  std::atomic<bool> ended_on_its_own{false};
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    if (!ended_on_its_own)
      ro.log(std::string("stopping (") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + "): finishing the requests in flight");
    grpc.mark_stopping();  // both fronts answer "not ready" from now on (HTTP: server.stop() below)
    models.drain();  // what is queued runs now, without waiting for the queue delay
    server.stop();   // no new connections; returns once run() has (the HTTP handlers in flight answered)
    grpc.stop();     // no new calls; the calls in flight answered
  });
  auto where = [&](int port) { return port > 0 ? host + ":" + std::to_string(port) : std::string("(none)"); };
  std::printf("kiln serve: ready: HTTP on %s, gRPC on %s, metrics on %s, %d of %zu model(s) loaded\n",
              where(server.http_port()).c_str(), where(grpc_port >= 0 ? grpc.port() : -1).c_str(),
              where(server.metrics_port()).c_str(), ready, listed);
  std::fflush(stdout);
  server.run();
  ended_on_its_own = true;
  ::kill(::getpid(), SIGTERM);  // ends the sigwait when run() ended on its own (blocked: not delivered elsewhere)
  stopper.join();
  models.shutdown();  // both fronts are closed and answered: the batchers and instances end
  ro.log("stopped");
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) { return make_command<ServeCommand>(app); }

}  // namespace kiln_cli
