// serve/http_server.h — `kiln serve`'s HTTP front: the KServe v2 REST routes with Triton's
// extensions (model config, statistics, repository index/load/unload), and Prometheus metrics on a
// port of their own. Every request that is malformed (bad JSON, wrong datatype or shape, truncated
// binary data, sizes larger than the body) is answered 4xx with {"error": "..."}; none stops the server.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/status.h"
#include "serve/repository.h"

namespace kiln::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;           // 0: any free port (http_port() tells which)
  int metrics_port = 8002;   // 0: any free port; -1: no metrics server
  size_t max_body_bytes = size_t{256} << 20;  // larger requests are refused (413)
  int threads = 256;         // requests served at once (connections waiting for a request hold no thread)
  int head_timeout_ms = 10000;  // a request head must arrive whole within this of its first byte (else
                                // 408); a connection that sends nothing is closed after it
  size_t min_bytes_per_second = 4096;  // bodies and responses slower than this (after head_timeout_ms of
                                       // waiting on the client) are cut
};

class HttpServer {
 public:
  HttpServer(Repository& repository, HttpOptions options);
  ~HttpServer();

  // Binds the ports; an error names the host and port that cannot be bound.
  Status bind();
  int http_port() const;
  int metrics_port() const;  // -1 without metrics
  // Serves until stop(); blocks the calling thread. Returns at once after an earlier stop().
  void run();
  // Stops accepting connections; once run() has been entered, returns when it has returned (the
  // requests in flight answered). Callable from any thread, before or during run().
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The Prometheus text of every loaded model's counters (Triton's metric names, labels model and version).
std::string prometheus_metrics(const Repository& repository);

}  // namespace kiln::serve
