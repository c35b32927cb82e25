// serve/protocol.h — KServe v2 (Open Inference Protocol) inference requests and responses over HTTP:
// JSON tensors and the binary tensor extension (a JSON header of Inference-Header-Content-Length
// bytes, then each binary input's bytes in the order the header lists them).
//
// Everything a request says is checked against the model's configuration before a tensor is made:
// names, datatypes, shapes (batch size within max_batch_size), element counts against the data or
// the declared binary sizes, and declared sizes against the bytes the body really has. Every
// refusal is a kInvalidArgument naming the input and what is wrong.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"
#include "kiln/status.h"
#include "serve/model_config.h"

namespace kiln::serve {

// The tensor a request's input of `datatype` and `shape` fills, once both are checked against the
// config (datatype, rank, dims, batch size within max_batch_size, the tensor size limit): new and
// zeroed, in the shape the model sees (the config's reshape, when it has one). `max_elements`: the
// most elements the request can carry for it (its bytes, or its typed contents' count), checked before
// anything is allocated, so a small request cannot make the server hold a huge tensor.
Expected<Tensor> new_input_tensor(const TensorSpec& spec, int64_t max_batch_size, const std::string& datatype,
                                  const Shape& shape, uint64_t max_elements);

// The shape output `output` is sent with: the config's dims when it has a reshape, else the tensor's.
Shape sent_output_shape(const ModelSpec& spec, size_t output, const Tensor& t);

struct DecodedRequest {
  std::string id;
  std::vector<Tensor> inputs;         // the model's input order; undefined: an optional input left out
  std::vector<size_t> outputs;        // the model outputs to answer with, in the order asked
  std::vector<bool> binary_outputs;   // per entry of `outputs`: as binary data
  std::chrono::microseconds timeout{0};  // the request's "timeout" parameter; 0: the model's default
};

// `header_length`: the Inference-Header-Content-Length header's value, when the request has it.
Expected<DecodedRequest> decode_infer_request(const std::string& body, std::optional<size_t> header_length,
                                              const ModelSpec& spec);

struct EncodedResponse {
  std::string body;
  size_t header_length = 0;  // > 0: the body is a JSON header of this many bytes, then binary outputs
};

// `outputs`: every model output, in the model's order (what the batcher answers).
EncodedResponse encode_infer_response(const ModelSpec& spec, const std::string& version,
                                      const DecodedRequest& request, const std::vector<Tensor>& outputs);

}  // namespace kiln::serve
