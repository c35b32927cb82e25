// tests/fuzz/fuzz_serve.cpp — `kiln serve`'s request and configuration parsers from bytes (#47):
// the KServe v2 HTTP body (JSON and the binary tensor extension), the gRPC ModelInferRequest, and
// config.pbtxt. Seeds: corpus/serve (tests/fuzz/make_seeds.py).
//
// Byte 0 chooses the parser (mod 3):
//   0  HTTP: bytes 1-4 are the Inference-Header-Content-Length (little-endian; 0xffffffff: no such
//      header), the rest is the body; decoded against the model below, then a response encoded.
//   1  gRPC: the rest is a serialized ModelInferRequest, decoded against the model below, then a
//      response encoded as the HTTP route would.
//   2  config.pbtxt: the rest is the file's text; a config that parses is written back as JSON and as
//      the gRPC ModelConfig message.
// Errors are fine; a crash, a sanitizer report, a leak or an allocation past the fuzzer's limit is not.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "fuzz/fuzz_common.h"
#include "fuzz/serve_model.h"
#include "grpc_service.pb.h"
#include "model_config.pb.h"
#include "serve/grpc_server.h"
#include "serve/model_config.h"
#include "serve/protocol.h"

namespace {


const kiln::serve::ModelSpec& spec() {
  static const kiln::serve::ModelSpec s = [] {
    auto parsed = kiln::serve::parse_model_config(kiln::fuzz::kServeModelConfig, "fuzz config", "m");
    if (!parsed.ok()) {
      std::fprintf(stderr, "fuzz_serve: the harness's own config is refused: %s\n", parsed.status().message().c_str());
      std::abort();
    }
    return *parsed;
  }();
  return s;
}

// Encodes a response with zero-filled outputs of the request's batch size, as the batcher would answer.
void respond(const kiln::serve::DecodedRequest& request) {
  const kiln::serve::ModelSpec& m = spec();
  int64_t batch = 1;
  for (const kiln::Tensor& t : request.inputs)
    if (t.defined() && t.rank() > 0) {
      batch = t.dim(0);
      break;
    }
  std::vector<kiln::Tensor> outputs;
  for (const kiln::serve::TensorSpec& o : m.outputs) {
    kiln::Shape shape{batch};
    for (int64_t d : o.has_reshape ? o.reshape : o.dims) shape.push_back(d < 0 ? 1 : d);
    kiln::Tensor t = kiln::Tensor::empty(o.dtype, shape);
    if (t.nbytes() > 0) std::memset(t.raw(), 0, t.nbytes());
    outputs.push_back(std::move(t));
  }
  kiln::serve::EncodedResponse r = kiln::serve::encode_infer_response(m, "1", request, outputs);
  if (r.header_length > r.body.size()) std::abort();  // the JSON header is measured before the binary data
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::init_limits();
  if (size < 1) return 0;
  const int mode = data[0] % 3;
  ++data, --size;
  if (mode == 0) {
    if (size < 4) return 0;
    uint32_t hl = 0;
    std::memcpy(&hl, data, 4);
    const std::optional<size_t> header = hl == 0xffffffffu ? std::nullopt : std::optional<size_t>(hl);
    const std::string body(reinterpret_cast<const char*>(data + 4), size - 4);
    auto request = kiln::serve::decode_infer_request(body, header, spec());
    if (request.ok()) respond(*request);
  } else if (mode == 1) {
    inference::ModelInferRequest req;
    if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
    auto request = kiln::serve::decode_grpc_request(req, spec());
    if (request.ok()) respond(*request);
  } else {
    const std::string text(reinterpret_cast<const char*>(data), size);
    auto parsed = kiln::serve::parse_model_config(text, "config.pbtxt", "fuzzed");
    if (parsed.ok()) {
      (void)kiln::serve::model_config_json(*parsed);
      kiln::serve::config::ModelConfig c;
      kiln::serve::fill_model_config(*parsed, &c);
      (void)c.SerializeAsString();
    }
  }
  return 0;
}
