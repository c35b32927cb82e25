// serve/grpc_server.h — `kiln serve`'s gRPC front: the KServe v2 service
// inference.GRPCInferenceService (grpc_service.proto) with Triton's extension calls (model config,
// statistics, repository index/load/unload), over the same repository and batchers as the HTTP
// routes. Inputs come as raw_input_contents or typed contents, outputs go back as
// raw_output_contents; every request is checked as the HTTP one is (protocol.h), and errors are gRPC
// statuses with a message naming what is wrong (INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, INTERNAL).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "kiln/status.h"
#include "serve/protocol.h"
#include "serve/repository.h"

namespace inference {
class ModelInferRequest;  // grpc_service.proto's message (generated)
}

namespace kiln::serve {

// A gRPC ModelInferRequest as the HTTP decoder's result (protocol.h): the same checks against the
// model's spec, then the batcher's input order. Raw contents (one per input) or typed contents.
Expected<DecodedRequest> decode_grpc_request(const inference::ModelInferRequest& req, const ModelSpec& spec);

struct GrpcOptions {
  std::string host = "127.0.0.1";
  int port = 8001;  // 0: any free port (port() tells which)
  size_t max_message_bytes = size_t{256} << 20;
  // Calls served at once; past it new calls are answered RESOURCE_EXHAUSTED (bounded threads and
  // memory under overload).
  int max_threads = 512;
};

class GrpcServer {
 public:
  GrpcServer(Repository& repository, GrpcOptions options);
  ~GrpcServer();  // stop()

  // Binds the port and serves on gRPC's own threads; an error names the address that cannot be bound.
  Status start();
  int port() const;
  // Stops taking calls; returns once the calls in flight are answered. Idempotent.
  void stop();
  // ServerReady says not ready from now on (a server beginning to stop; stop() implies it).
  void mark_stopping();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::serve
