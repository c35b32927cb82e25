// serve/http_server.cpp — the KServe v2 REST routes, Triton's extensions and /metrics (http_server.h).
#include "serve/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "serve/http_gate.h"
#include "serve/protocol.h"

namespace kiln::serve {

using nlohmann::json;

namespace {

// The HTTP status of an error: unknown models 404, refusals (queue full, timeout, stopping) 503,
// failures of a run 500, everything the request got wrong 400.
int http_status(const Status& st) {
  switch (st.code()) {
    case StatusCode::kNotFound: return 404;
    case StatusCode::kCancelled: return 503;
    case StatusCode::kRuntimeError:
    case StatusCode::kInternal: return 500;
    default: return 400;
  }
}

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");  // invalid UTF-8 from a request: replaced, never a throw
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

void send_error(httplib::Response& res, const Status& st) { send_error(res, http_status(st), st.message()); }

// The optional "/versions/{v}" group of a route.
std::string version_of(const httplib::Request& req, size_t group) {
  return req.matches.size() > group && req.matches[group].matched ? req.matches[group].str() : "";
}

json tensor_metadata(const TensorSpec& t, int64_t max_batch_size) {
  std::vector<int64_t> shape = t.dims;
  if (max_batch_size > 0) shape.insert(shape.begin(), -1);
  return {{"name", t.name}, {"datatype", protocol_type_name(t.dtype)}, {"shape", shape}};
}

json duration_json(const Duration& d) { return {{"count", d.count}, {"ns", d.ns}}; }

json model_stats_json(const ModelVersion& mv) {
  const StatsSnapshot s = mv.stats->snapshot();
  json batches = json::array();
  for (const auto& [size, c] : s.batches)
    batches.push_back({{"batch_size", size},
                       {"compute_input", duration_json(c.input)},
                       {"compute_infer", duration_json(c.infer)},
                       {"compute_output", duration_json(c.output)}});
  return {{"name", mv.name},
          {"version", std::to_string(mv.version)},
          {"last_inference", s.last_inference_ms},
          {"inference_count", s.inference_count},
          {"execution_count", s.execution_count},
          {"inference_stats",
           {{"success", duration_json(s.success)},
            {"fail", duration_json(s.fail)},
            {"queue", duration_json(s.queue)},
            {"compute_input", duration_json(s.compute.input)},
            {"compute_infer", duration_json(s.compute.infer)},
            {"compute_output", duration_json(s.compute.output)},
            {"cache_hit", duration_json({})},
            {"cache_miss", duration_json({})}}},
          {"batch_stats", batches}};
}

// "/v2/models/{m}" and "/v2/models/{m}/versions/{v}", then `tail`: group 1 the model, group 2 the version.
std::string model_route(const std::string& tail) {
  return R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)" + tail;
}

}  // namespace

struct HttpServer::Impl {
  Repository& repository;
  HttpOptions options;
  GatedServer api, metrics;
  int api_port = -1, metrics_port = -1;
  std::thread metrics_thread;
  std::atomic<bool> stopping{false};
  // run()'s progress: 0 not entered, 1 serving (or about to), 2 returned. stop() waits for 2 once run()
  // has been entered: httplib's stop() does nothing before listening has begun, so it is repeated.
  std::atomic<int> run_state{0};

  Impl(Repository& r, HttpOptions o)
      : repository(r), options(std::move(o)), api(limits(options, options.threads)), metrics(limits(options, 2)) {}

  static GateLimits limits(const HttpOptions& o, int threads) {
    GateLimits g;
    g.head_timeout = std::chrono::milliseconds(std::max(1, o.head_timeout_ms));
    g.threads = static_cast<size_t>(std::max(1, threads));
    g.min_bytes_per_second = o.min_bytes_per_second;
    return g;
  }

  // Runs `handler` with the model version the route names, or answers why there is none.
  template <class F>
  void with_model(const httplib::Request& req, httplib::Response& res, F&& handler) {
    auto mv = repository.find(req.matches[1].str(), version_of(req, 2));
    if (!mv.ok()) return send_error(res, mv.status());
    handler(**mv);
  }

  void infer(const httplib::Request& req, httplib::Response& res, ModelVersion& mv) {
    const auto arrived = std::chrono::steady_clock::now();
    std::optional<size_t> header_length;
    if (req.has_header("Inference-Header-Content-Length")) {
      const std::string v = req.get_header_value("Inference-Header-Content-Length");
      size_t n = 0, used = 0;
      try {
        n = std::stoull(v, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (v.empty() || used != v.size() || v[0] == '-')
        return send_error(res, 400, "Inference-Header-Content-Length '" + v.substr(0, 40) + "' is not a byte count");
      header_length = n;
    }
    auto request = decode_infer_request(req.body, header_length, mv.spec);
    if (!request.ok()) {
      mv.stats->record_failure(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - arrived).count()));
      return send_error(res, request.status());
    }
    auto outputs = mv.batcher->infer({request->inputs, request->timeout});
    if (!outputs.ok()) return send_error(res, outputs.status());
    EncodedResponse out = encode_infer_response(mv.spec, std::to_string(mv.version), *request, *outputs);
    if (out.header_length > 0) {
      res.set_header("Inference-Header-Content-Length", std::to_string(out.header_length));
      res.set_content(std::move(out.body), "application/octet-stream");
    } else {
      res.set_content(std::move(out.body), "application/json");
    }
  }

  void add_routes() {
    api.set_payload_max_length(options.max_body_bytes);
    // Waiting and idle connections hold no thread (http_gate.h): a kept-alive connection may serve
    // this many requests before it is closed (httplib's default is 5), and is closed after
    // head_timeout_ms idle.
    api.set_keep_alive_max_count(1000);
    // Responses go out in more than one write: with Nagle's algorithm each small request waited for
    // the client's delayed ACK (about 40 ms per request, measured with bench/serve_bench.py --protocol http).
    api.set_tcp_nodelay(true);
    metrics.set_tcp_nodelay(true);
    api.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
    api.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      res.status = !stopping && repository.ready() ? 200 : 503;
    });
    api.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, {{"name", "kiln"},
                      {"version", kiln::version()},
                      {"extensions", {"binary_tensor_data", "model_configuration", "model_repository", "statistics"}}});
    });
    // Before the model routes: "stats" would match as a model name.
    api.Get("/v2/models/stats", [this](const httplib::Request&, httplib::Response& res) {
      json all = json::array();
      for (const auto& mv : repository.loaded()) all.push_back(model_stats_json(*mv));
      send_json(res, {{"model_stats", all}});
    });
    api.Get(model_route("/ready"), [this](const httplib::Request& req, httplib::Response& res) {
      with_model(req, res, [&](ModelVersion&) { res.status = stopping ? 503 : 200; });
    });
    api.Get(model_route(""), [this](const httplib::Request& req, httplib::Response& res) {
      with_model(req, res, [&](ModelVersion& mv) {
        json inputs = json::array(), outputs = json::array();
        for (const TensorSpec& t : mv.spec.inputs) inputs.push_back(tensor_metadata(t, mv.spec.max_batch_size));
        for (const TensorSpec& t : mv.spec.outputs) outputs.push_back(tensor_metadata(t, mv.spec.max_batch_size));
        json versions = json::array();
        for (const auto& v : repository.loaded())
          if (v->name == mv.name) versions.push_back(std::to_string(v->version));
        send_json(res, {{"name", mv.name},
                        {"versions", versions},
                        {"platform", mv.spec.platform.empty() ? mv.spec.backend : mv.spec.platform},
                        {"inputs", inputs},
                        {"outputs", outputs}});
      });
    });
    api.Get(model_route("/config"), [this](const httplib::Request& req, httplib::Response& res) {
      with_model(req, res, [&](ModelVersion& mv) { res.set_content(model_config_json(mv.spec), "application/json"); });
    });
    api.Get(model_route("/stats"), [this](const httplib::Request& req, httplib::Response& res) {
      const std::string name = req.matches[1].str(), version = version_of(req, 2);
      if (!version.empty()) return with_model(req, res, [&](ModelVersion& mv) {
        send_json(res, {{"model_stats", json::array({model_stats_json(mv)})}});
      });
      json all = json::array();
      for (const auto& mv : repository.loaded())
        if (mv->name == name) all.push_back(model_stats_json(*mv));
      if (all.empty()) return send_error(res, 404, "unknown model '" + name + "'");
      send_json(res, {{"model_stats", all}});
    });
    api.Post(model_route("/infer"), [this](const httplib::Request& req, httplib::Response& res) {
      with_model(req, res, [&](ModelVersion& mv) { infer(req, res, mv); });
    });
    api.Post("/v2/repository/index", [this](const httplib::Request&, httplib::Response& res) {
      json rows = json::array();
      for (const ModelState& s : repository.index()) {
        json row = {{"name", s.name}, {"state", s.state}};
        if (!s.version.empty()) row["version"] = s.version;
        if (!s.reason.empty()) row["reason"] = s.reason;
        rows.push_back(row);
      }
      send_json(res, rows);
    });
    api.Post(R"(/v2/repository/models/([^/]+)/(load|unload))", [this](const httplib::Request& req,
                                                                        httplib::Response& res) {
      const std::string name = req.matches[1].str();
      if (!req.body.empty()) {
        json body = json::parse(req.body, nullptr, false);
        if (body.is_discarded() || !body.is_object()) return send_error(res, 400, "the request body is not a JSON object");
        if (body.contains("parameters") && body["parameters"].is_object() && body["parameters"].contains("config"))
          return send_error(res, 400, "load with a \"config\" parameter is not supported: edit config.pbtxt instead");
      }
      Status st = req.matches[2].str() == "load" ? repository.load(name) : repository.unload(name);
      if (!st.ok()) return send_error(res, st);
      res.status = 200;
    });
    // Routes that exist in the protocol but not here, and everything unknown: a JSON error.
    // (httplib calls this outside its handlers' try/catch: nothing may escape it.)
    api.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      try {
        std::string why = res.status == 413 ? "the request body is larger than the server's limit (--max-body-bytes)"
                          : res.status == 404 ? "no route " + req.method + " " + req.path.substr(0, 200)
                                              : "HTTP error " + std::to_string(res.status);
        send_error(res, res.status, why);
      } catch (const std::exception&) {
        res.set_content("{\"error\":\"HTTP error " + std::to_string(res.status) + "\"}", "application/json");
      }
    });
    api.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::bad_alloc&) {
        what = "out of memory";
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, 500, "internal error: " + what);
    });

    metrics.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(prometheus_metrics(repository), "text/plain; version=0.0.4");
    });
  }
};

HttpServer::HttpServer(Repository& repository, HttpOptions options)
    : impl_(std::make_unique<Impl>(repository, std::move(options))) {
  impl_->add_routes();
}

HttpServer::~HttpServer() {
  stop();
  if (impl_->metrics_thread.joinable()) impl_->metrics_thread.join();
}

Status HttpServer::bind() {
  auto bind_one = [&](GatedServer& s, int port, int& bound) -> Status {
    if (port == 0) {
      bound = s.bind_to_any_port(impl_->options.host);
    } else {
      bound = s.bind_to_port(impl_->options.host, port) ? port : -1;
    }
    if (bound <= 0)
      return io_error("cannot listen on " + impl_->options.host + ":" + std::to_string(port) +
                      " (in use, or not an address of this machine)");
    s.widen_backlog();
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(bind_one(impl_->api, impl_->options.port, impl_->api_port));
  if (impl_->options.metrics_port >= 0)
    KILN_RETURN_IF_ERROR(bind_one(impl_->metrics, impl_->options.metrics_port, impl_->metrics_port));
  return Status::Ok();
}

int HttpServer::http_port() const { return impl_->api_port; }
int HttpServer::metrics_port() const { return impl_->metrics_port; }

void HttpServer::run() {
  impl_->run_state = 1;
  if (!impl_->stopping) {  // a stop() before run() (a signal while models loaded): return at once
    if (impl_->metrics_port > 0) impl_->metrics_thread = std::thread([this] { impl_->metrics.listen_after_bind(); });
    impl_->api.listen_after_bind();  // returns once the handlers in flight have answered
  }
  impl_->run_state = 2;
}

void HttpServer::stop() {
  impl_->stopping = true;
  while (impl_->run_state == 1) {
    impl_->api.stop();
    impl_->metrics.stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  impl_->metrics.stop();
}

std::string prometheus_metrics(const Repository& repository) {
  struct Metric {
    const char* name;
    const char* help;
    uint64_t (*value)(const StatsSnapshot&);
  };
  static const Metric kMetrics[] = {
      {"nv_inference_request_success", "Number of successful inference requests, all batch sizes",
       [](const StatsSnapshot& s) { return s.success.count; }},
      {"nv_inference_request_failure", "Number of failed inference requests, all batch sizes",
       [](const StatsSnapshot& s) { return s.fail.count; }},
      {"nv_inference_count", "Number of inferences performed (a batch of n counts n)",
       [](const StatsSnapshot& s) { return s.inference_count; }},
      {"nv_inference_exec_count", "Number of model executions performed (a batch counts once)",
       [](const StatsSnapshot& s) { return s.execution_count; }},
      {"nv_inference_request_duration_us", "Cumulative inference request duration in microseconds",
       [](const StatsSnapshot& s) { return (s.success.ns + s.fail.ns) / 1000; }},
      {"nv_inference_queue_duration_us", "Cumulative inference queuing duration in microseconds",
       [](const StatsSnapshot& s) { return s.queue.ns / 1000; }},
      {"nv_inference_compute_input_duration_us", "Cumulative compute input duration in microseconds",
       [](const StatsSnapshot& s) { return s.compute.input.ns / 1000; }},
      {"nv_inference_compute_infer_duration_us", "Cumulative compute inference duration in microseconds",
       [](const StatsSnapshot& s) { return s.compute.infer.ns / 1000; }},
      {"nv_inference_compute_output_duration_us", "Cumulative inference compute output duration in microseconds",
       [](const StatsSnapshot& s) { return s.compute.output.ns / 1000; }},
  };
  const auto models = repository.loaded();
  std::vector<StatsSnapshot> snapshots;
  for (const auto& mv : models) snapshots.push_back(mv->stats->snapshot());
  std::ostringstream out;
  for (const Metric& m : kMetrics) {
    out << "# HELP " << m.name << " " << m.help << "\n# TYPE " << m.name << " counter\n";
    for (size_t i = 0; i < models.size(); ++i)
      out << m.name << "{model=\"" << models[i]->name << "\",version=\"" << models[i]->version << "\"} "
          << m.value(snapshots[i]) << "\n";
  }
  return out.str();
}

}  // namespace kiln::serve
