// serve/protocol.cpp — KServe v2 inference requests and responses (protocol.h).
#include "serve/protocol.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

namespace kiln::serve {

using nlohmann::json;

namespace {

// Calls f(T{}) with the C++ element type of `dtype` (the types the protocol's JSON form carries).
template <class F>
bool visit_json_type(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kBool: f(bool{}); return true;
    case DataType::kUInt8: f(uint8_t{}); return true;
    case DataType::kUInt16: f(uint16_t{}); return true;
    case DataType::kUInt32: f(uint32_t{}); return true;
    case DataType::kUInt64: f(uint64_t{}); return true;
    case DataType::kInt8: f(int8_t{}); return true;
    case DataType::kInt16: f(int16_t{}); return true;
    case DataType::kInt32: f(int32_t{}); return true;
    case DataType::kInt64: f(int64_t{}); return true;
    case DataType::kFloat32: f(float{}); return true;
    case DataType::kFloat64: f(double{}); return true;
    default: return false;  // FP16, BF16: binary data only
  }
}

// The leaves of "data", flat or nested (row-major), in order.
Status flatten(const json& j, std::vector<const json*>& out, int depth, const std::string& who) {
  if (depth > 64) return invalid_argument(who + ": \"data\" is nested too deeply");
  if (!j.is_array()) {
    out.push_back(&j);
    return Status::Ok();
  }
  for (const json& e : j) KILN_RETURN_IF_ERROR(flatten(e, out, depth + 1, who));
  return Status::Ok();
}

// A request's value for a message: a scalar as written (cut short), a container by its kind (never
// dumped whole: a hostile one may be nested deeper than a recursive dump can go).
std::string describe(const json& j) {
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  return j.dump(-1, ' ', false, json::error_handler_t::replace).substr(0, 40);
}

template <class T>
Status read_element(const json& j, T* dst, const std::string& who, size_t index) {
  auto bad = [&](const char* expected) {
    return invalid_argument(who + ": data[" + std::to_string(index) + "] is " + describe(j) + ", not " +
                            expected);
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) return bad("a boolean");
    *dst = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (j.is_number_unsigned()) {
      const uint64_t v = j.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<T>::max())) return bad("in the datatype's range");
      *dst = static_cast<T>(v);
    } else if (j.is_number_integer()) {
      const int64_t v = j.get<int64_t>();
      if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
          (v > 0 && static_cast<uint64_t>(v) > static_cast<uint64_t>(std::numeric_limits<T>::max())))
        return bad("in the datatype's range");
      *dst = static_cast<T>(v);
    } else {
      return bad("an integer");
    }
  } else {
    if (!j.is_number()) return bad("a number");
    *dst = static_cast<T>(j.get<double>());
  }
  return Status::Ok();
}

Status read_json_data(const json& data, Tensor& t, const std::string& who) {
  std::vector<const json*> leaves;
  KILN_RETURN_IF_ERROR(flatten(data, leaves, 0, who));
  if (leaves.size() != static_cast<size_t>(t.numel()))
    return invalid_argument(who + ": \"data\" has " + std::to_string(leaves.size()) + " elements but shape " +
                            shape_to_string(t.shape()) + " needs " + std::to_string(t.numel()));
  Status st;
  const bool known = visit_json_type(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* dst = t.data<T>();
    for (size_t i = 0; i < leaves.size() && st.ok(); ++i) st = read_element(*leaves[i], dst + i, who, i);
  });
  if (!known)
    return invalid_argument(who + ": " + protocol_type_name(t.dtype()) +
                            " tensors are sent as binary data (the binary tensor extension), not JSON");
  return st;
}

json write_json_data(const Tensor& t) {
  json data = json::array();
  visit_json_type(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* src = t.data<T>();
    for (int64_t i = 0; i < t.numel(); ++i) data.push_back(src[i]);
  });
  return data;
}

Expected<Shape> parse_shape(const json& j, const std::string& who) {
  if (!j.is_array()) return invalid_argument(who + ": \"shape\" must be an array of integers");
  Shape shape;
  for (const json& d : j) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return invalid_argument(who + ": \"shape\" has " + describe(d) + " (dims are integers >= 0)");
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

Expected<Tensor> decode_input(const json& in, const TensorSpec& spec, int64_t max_batch_size, const std::string& body,
                              size_t& binary_offset) {
  const std::string who = "input '" + spec.name + "'";
  if (!in.contains("datatype") || !in["datatype"].is_string())
    return invalid_argument(who + ": \"datatype\" (a string such as \"FP32\") is missing");
  const std::string datatype = in["datatype"].get<std::string>();
  if (!in.contains("shape")) return invalid_argument(who + ": \"shape\" is missing");
  KILN_ASSIGN_OR_RETURN(Shape shape, parse_shape(in["shape"], who));
  // Every element takes at least a byte of the body (a JSON number and its comma, or binary data).
  KILN_ASSIGN_OR_RETURN(Tensor t, new_input_tensor(spec, max_batch_size, datatype, shape, body.size()));

  const json* params = in.contains("parameters") ? &in["parameters"] : nullptr;
  if (params && !params->is_object()) return invalid_argument(who + ": \"parameters\" must be an object");
  const bool binary = params && params->contains("binary_data_size");
  if (binary == in.contains("data"))
    return invalid_argument(who + (binary ? ": has both \"data\" and a binary_data_size"
                                          : ": has neither \"data\" nor a binary_data_size parameter"));
  if (!binary) {
    KILN_RETURN_IF_ERROR(read_json_data(in["data"], t, who));
    return t;
  }
  const json& size_j = (*params)["binary_data_size"];
  if (!size_j.is_number_unsigned())
    return invalid_argument(who + ": binary_data_size must be a byte count (an integer >= 0)");
  const uint64_t size = size_j.get<uint64_t>();
  if (size != t.nbytes())
    return invalid_argument(who + ": binary_data_size " + std::to_string(size) + " but shape " +
                            shape_to_string(shape) + " of " + datatype + " is " + std::to_string(t.nbytes()) + " bytes");
  const size_t left = body.size() - binary_offset;
  if (size > left)
    return invalid_argument(who + ": binary data truncated: " + std::to_string(size) + " bytes declared, " +
                            std::to_string(left) + " left in the body");
  if (size) std::memcpy(t.raw(), body.data() + binary_offset, size);
  binary_offset += size;
  return t;
}

// The model's index of the tensor an "inputs" or "outputs" entry names.
Expected<size_t> entry_index(const json& entry, const std::vector<TensorSpec>& specs, const std::string& what,
                             const std::string& model) {
  if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string())
    return invalid_argument("every entry of \"" + what + "s\" needs a \"name\"");
  const std::string name = entry["name"].get<std::string>();
  for (size_t k = 0; k < specs.size(); ++k)
    if (specs[k].name == name) return k;
  return invalid_argument("unknown " + what + " '" + name + "' for model '" + model + "'");
}

bool flag(const json& obj, const char* key) {
  return obj.is_object() && obj.contains(key) && obj[key].is_boolean() && obj[key].get<bool>();
}

}  // namespace

Expected<Tensor> new_input_tensor(const TensorSpec& spec, int64_t max_batch_size, const std::string& datatype,
                                  const Shape& shape, uint64_t max_elements) {
  const std::string who = "input '" + spec.name + "'";
  if (protocol_type(datatype) != spec.dtype)
    return invalid_argument(who + ": datatype " + datatype.substr(0, 40) + ", the model takes " +
                            protocol_type_name(spec.dtype));
  const bool batching = max_batch_size > 0;
  const size_t rank = spec.dims.size() + (batching ? 1 : 0);
  std::string expected = shape_to_string(spec.dims);
  if (batching) expected = "[batch," + expected.substr(1);
  if (shape.size() != rank)
    return invalid_argument(who + ": shape " + shape_to_string(shape) + " has rank " + std::to_string(shape.size()) +
                            ", the model takes " + expected);
  if (batching && (shape[0] < 1 || shape[0] > max_batch_size))
    return invalid_argument(who + ": batch size " + std::to_string(shape[0]) + " outside 1.." +
                            std::to_string(max_batch_size) + " (max_batch_size)");
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    const int64_t want = spec.dims[i], got = shape[i + (batching ? 1 : 0)];
    if (got < 0 || (want != -1 && got != want))
      return invalid_argument(who + ": shape " + shape_to_string(shape) + " does not fit the model's " + expected);
  }
  const std::string too_big = check_tensor_size(spec.dtype, shape);
  if (!too_big.empty()) return invalid_argument(who + ": " + too_big);
  if (static_cast<uint64_t>(shape_numel(shape)) > max_elements)
    return invalid_argument(who + ": shape " + shape_to_string(shape) + " has " + std::to_string(shape_numel(shape)) +
                            " elements, more than the request carries (at most " + std::to_string(max_elements) + ")");
  // The model sees `reshape` when the config gives one (same element count).
  Shape model_shape = shape;
  if (spec.has_reshape) {
    model_shape = batching ? Shape{shape[0]} : Shape{};
    model_shape.insert(model_shape.end(), spec.reshape.begin(), spec.reshape.end());
    if (shape_numel(model_shape) != shape_numel(shape))
      return invalid_argument(who + ": shape " + shape_to_string(shape) + " cannot be reshaped to the model's " +
                              shape_to_string(model_shape));
  }
  return Tensor::empty(spec.dtype, model_shape);
}

Shape sent_output_shape(const ModelSpec& spec, size_t output, const Tensor& t) {
  const TensorSpec& out = spec.outputs[output];
  Shape shape = t.shape();
  if (out.has_reshape && std::find(out.dims.begin(), out.dims.end(), -1) == out.dims.end()) {
    Shape sent = spec.max_batch_size > 0 && !shape.empty() ? Shape{shape[0]} : Shape{};
    sent.insert(sent.end(), out.dims.begin(), out.dims.end());
    if (shape_numel(sent) == t.numel()) shape = sent;
  }
  return shape;
}

Expected<DecodedRequest> decode_infer_request(const std::string& body, std::optional<size_t> header_length,
                                              const ModelSpec& spec) {
  if (header_length && *header_length > body.size())
    return invalid_argument("Inference-Header-Content-Length " + std::to_string(*header_length) +
                            " is larger than the body (" + std::to_string(body.size()) + " bytes)");
  const size_t json_size = header_length ? *header_length : body.size();
  json j = json::parse(body.begin(), body.begin() + static_cast<std::ptrdiff_t>(json_size), nullptr, false);
  if (j.is_discarded()) return invalid_argument("the request body is not valid JSON");
  if (!j.is_object()) return invalid_argument("the request must be a JSON object");
  DecodedRequest r;
  if (j.contains("id")) {
    if (!j["id"].is_string()) return invalid_argument("\"id\" must be a string");
    r.id = j["id"].get<std::string>();
  }
  // (by reference: copying a JSON value recurses, and a hostile one is nested deep enough to overflow
  // the stack)
  static const json kNone = json::object();
  const json& params = j.contains("parameters") ? j["parameters"] : kNone;
  if (!params.is_object()) return invalid_argument("\"parameters\" must be an object");
  if (params.contains("timeout")) {
    if (!params["timeout"].is_number_unsigned()) return invalid_argument("parameter \"timeout\" must be microseconds >= 0");
    r.timeout = clamp_microseconds(params["timeout"].get<uint64_t>());
  }
  const bool all_binary = flag(params, "binary_data_output");

  if (!j.contains("inputs") || !j["inputs"].is_array()) return invalid_argument("\"inputs\" (an array) is missing");
  r.inputs.resize(spec.inputs.size());
  size_t binary_offset = json_size;
  for (const json& in : j["inputs"]) {
    KILN_ASSIGN_OR_RETURN(const size_t k, entry_index(in, spec.inputs, "input", spec.name));
    if (r.inputs[k].defined()) return invalid_argument("input '" + spec.inputs[k].name + "' is given twice");
    KILN_ASSIGN_OR_RETURN(r.inputs[k], decode_input(in, spec.inputs[k], spec.max_batch_size, body, binary_offset));
  }
  if (binary_offset != body.size())
    return invalid_argument("the body has " + std::to_string(body.size() - binary_offset) +
                            " bytes after the inputs' binary data");
  for (size_t k = 0; k < spec.inputs.size(); ++k)
    if (!r.inputs[k].defined() && !spec.inputs[k].optional)
      return invalid_argument("input '" + spec.inputs[k].name + "' is missing");

  if (j.contains("outputs")) {
    if (!j["outputs"].is_array()) return invalid_argument("\"outputs\" must be an array");
    for (const json& out : j["outputs"]) {
      KILN_ASSIGN_OR_RETURN(const size_t k, entry_index(out, spec.outputs, "output", spec.name));
      const std::string& name = spec.outputs[k].name;
      const json& oparams = out.contains("parameters") ? out["parameters"] : kNone;
      if (oparams.contains("classification"))
        return unsupported("output '" + name + "': the classification extension is not supported");
      r.outputs.push_back(k);
      r.binary_outputs.push_back(oparams.contains("binary_data") ? flag(oparams, "binary_data") : all_binary);
    }
  } else {
    for (size_t k = 0; k < spec.outputs.size(); ++k) {
      r.outputs.push_back(k);
      r.binary_outputs.push_back(all_binary);
    }
  }
  return r;
}

EncodedResponse encode_infer_response(const ModelSpec& spec, const std::string& version,
                                      const DecodedRequest& request, const std::vector<Tensor>& outputs) {
  json j = {{"model_name", spec.name}, {"model_version", version}};
  if (!request.id.empty()) j["id"] = request.id;
  json outs = json::array();
  std::string binary;
  for (size_t i = 0; i < request.outputs.size(); ++i) {
    const Tensor& t = outputs[request.outputs[i]];
    json o = {{"name", spec.outputs[request.outputs[i]].name},
              {"datatype", protocol_type_name(t.dtype())},
              {"shape", sent_output_shape(spec, request.outputs[i], t)}};
    bool as_binary = request.binary_outputs[i];
    if (!as_binary && (t.dtype() == DataType::kFloat16 || t.dtype() == DataType::kBFloat16)) as_binary = true;
    if (as_binary) {
      o["parameters"] = {{"binary_data_size", t.nbytes()}};
      binary.append(static_cast<const char*>(t.raw()), t.nbytes());
    } else {
      o["data"] = write_json_data(t);
    }
    outs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outs);
  EncodedResponse r;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (!binary.empty() || std::find(request.binary_outputs.begin(), request.binary_outputs.end(), true) !=
                             request.binary_outputs.end()) {
    r.header_length = r.body.size();
    r.body += binary;
  }
  return r;
}

}  // namespace kiln::serve
