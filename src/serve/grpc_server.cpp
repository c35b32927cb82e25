// serve/grpc_server.cpp — the KServe v2 gRPC service over the repository (grpc_server.h).
#include "serve/grpc_server.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>
#include <type_traits>

#include "grpc_service.grpc.pb.h"
#include "model_config.pb.h"
#include "serve/protocol.h"

namespace kiln::serve {

namespace pb = inference;

namespace {

grpc::Status to_grpc(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return grpc::Status::OK;
    case StatusCode::kNotFound: return {grpc::StatusCode::NOT_FOUND, st.message()};
    case StatusCode::kCancelled: return {grpc::StatusCode::UNAVAILABLE, st.message()};
    case StatusCode::kUnsupported: return {grpc::StatusCode::UNIMPLEMENTED, st.message()};
    case StatusCode::kRuntimeError:
    case StatusCode::kInternal: return {grpc::StatusCode::INTERNAL, st.message()};
    default: return {grpc::StatusCode::INVALID_ARGUMENT, st.message()};
  }
}

// Typed contents into the tensor, element by element (a count that is not the shape's is an error).
template <class T, class List>
Status copy_contents(const List& list, Tensor& t, const std::string& who) {
  if (static_cast<int64_t>(list.size()) != t.numel())
    return invalid_argument(who + ": " + std::to_string(list.size()) + " elements in contents, the shape needs " +
                            std::to_string(t.numel()));
  T* dst = t.data<T>();
  for (int i = 0; i < list.size(); ++i) {
    // int_contents carries INT8/INT16 and uint_contents UINT8/UINT16 as 32-bit values: one that does
    // not fit is an error (the JSON path refuses it too), never silently wrapped.
    using W = std::decay_t<decltype(list[i])>;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) < sizeof(W)) {
      if (list[i] < static_cast<W>(std::numeric_limits<T>::min()) || list[i] > static_cast<W>(std::numeric_limits<T>::max()))
        return invalid_argument(who + ": element " + std::to_string(i) + " (" + std::to_string(list[i]) + ") does not fit " +
                                protocol_type_name(t.dtype()));
    }
    dst[i] = static_cast<T>(list[i]);
  }
  return Status::Ok();
}

Status read_contents(const pb::InferTensorContents& c, Tensor& t, const std::string& who) {
  switch (t.dtype()) {
    case DataType::kBool: return copy_contents<bool>(c.bool_contents(), t, who);
    case DataType::kInt8: return copy_contents<int8_t>(c.int_contents(), t, who);
    case DataType::kInt16: return copy_contents<int16_t>(c.int_contents(), t, who);
    case DataType::kInt32: return copy_contents<int32_t>(c.int_contents(), t, who);
    case DataType::kInt64: return copy_contents<int64_t>(c.int64_contents(), t, who);
    case DataType::kUInt8: return copy_contents<uint8_t>(c.uint_contents(), t, who);
    case DataType::kUInt16: return copy_contents<uint16_t>(c.uint_contents(), t, who);
    case DataType::kUInt32: return copy_contents<uint32_t>(c.uint_contents(), t, who);
    case DataType::kUInt64: return copy_contents<uint64_t>(c.uint64_contents(), t, who);
    case DataType::kFloat32: return copy_contents<float>(c.fp32_contents(), t, who);
    case DataType::kFloat64: return copy_contents<double>(c.fp64_contents(), t, who);
    default:
      return invalid_argument(who + ": " + protocol_type_name(t.dtype()) + " tensors are sent in raw_input_contents");
  }
}

template <class Map>
Expected<std::chrono::microseconds> timeout_of(const Map& parameters) {
  auto it = parameters.find("timeout");
  if (it == parameters.end()) return std::chrono::microseconds(0);
  const pb::InferParameter& p = it->second;
  if (p.parameter_choice_case() == pb::InferParameter::kInt64Param && p.int64_param() >= 0)
    return clamp_microseconds(static_cast<uint64_t>(p.int64_param()));
  if (p.parameter_choice_case() == pb::InferParameter::kUint64Param) return clamp_microseconds(p.uint64_param());
  return invalid_argument("parameter \"timeout\" must be microseconds >= 0 (an integer)");
}

}  // namespace

Expected<DecodedRequest> decode_grpc_request(const pb::ModelInferRequest& req, const ModelSpec& spec) {
  DecodedRequest r;
  r.id = req.id();
  KILN_ASSIGN_OR_RETURN(r.timeout, timeout_of(req.parameters()));
  const bool raw = req.raw_input_contents_size() > 0;
  if (raw && req.raw_input_contents_size() != req.inputs_size())
    return invalid_argument(std::to_string(req.raw_input_contents_size()) + " raw_input_contents for " +
                            std::to_string(req.inputs_size()) + " inputs (one each, in the inputs' order)");
  r.inputs.resize(spec.inputs.size());
  for (int i = 0; i < req.inputs_size(); ++i) {
    const pb::ModelInferRequest::InferInputTensor& in = req.inputs(i);
    auto it = std::find_if(spec.inputs.begin(), spec.inputs.end(), [&](const TensorSpec& s) { return s.name == in.name(); });
    if (it == spec.inputs.end())
      return invalid_argument("unknown input '" + in.name().substr(0, 100) + "' for model '" + spec.name + "'");
    const size_t k = static_cast<size_t>(it - spec.inputs.begin());
    if (r.inputs[k].defined()) return invalid_argument("input '" + in.name() + "' is given twice");
    const std::string who = "input '" + in.name() + "'";
    // What the request carries for it: its raw bytes, or its typed contents (one of the lists).
    const pb::InferTensorContents& c = in.contents();
    const uint64_t carried =
        raw ? req.raw_input_contents(i).size()
            : static_cast<uint64_t>(c.bool_contents_size()) + c.int_contents_size() + c.int64_contents_size() +
                  c.uint_contents_size() + c.uint64_contents_size() + c.fp32_contents_size() + c.fp64_contents_size();
    KILN_ASSIGN_OR_RETURN(Tensor t, new_input_tensor(*it, spec.max_batch_size, in.datatype(),
                                                     Shape(in.shape().begin(), in.shape().end()), carried));
    if (raw) {
      const std::string& bytes = req.raw_input_contents(i);
      if (bytes.size() != t.nbytes())
        return invalid_argument(who + ": raw_input_contents has " + std::to_string(bytes.size()) + " bytes, shape " +
                                shape_to_string(Shape(in.shape().begin(), in.shape().end())) + " of " +
                                in.datatype() + " is " + std::to_string(t.nbytes()));
      if (!bytes.empty()) std::memcpy(t.raw(), bytes.data(), bytes.size());
    } else {
      KILN_RETURN_IF_ERROR(read_contents(in.contents(), t, who));
    }
    r.inputs[k] = std::move(t);
  }
  for (size_t k = 0; k < spec.inputs.size(); ++k)
    if (!r.inputs[k].defined() && !spec.inputs[k].optional)
      return invalid_argument("input '" + spec.inputs[k].name + "' is missing");
  for (const auto& out : req.outputs()) {
    auto it = std::find_if(spec.outputs.begin(), spec.outputs.end(), [&](const TensorSpec& s) { return s.name == out.name(); });
    if (it == spec.outputs.end())
      return invalid_argument("unknown output '" + out.name().substr(0, 100) + "' for model '" + spec.name + "'");
    if (out.parameters().count("classification"))
      return unsupported("output '" + out.name() + "': the classification extension is not supported");
    r.outputs.push_back(static_cast<size_t>(it - spec.outputs.begin()));
  }
  if (req.outputs_size() == 0)
    for (size_t k = 0; k < spec.outputs.size(); ++k) r.outputs.push_back(k);
  r.binary_outputs.assign(r.outputs.size(), true);
  return r;
}

namespace {

void fill_duration(pb::StatisticDuration* d, const Duration& from) {
  d->set_count(from.count);
  d->set_ns(from.ns);
}

void fill_stats(pb::ModelStatistics* s, const ModelVersion& mv) {
  const StatsSnapshot snap = mv.stats->snapshot();
  s->set_name(mv.name);
  s->set_version(std::to_string(mv.version));
  s->set_last_inference(snap.last_inference_ms);
  s->set_inference_count(snap.inference_count);
  s->set_execution_count(snap.execution_count);
  pb::InferStatistics* is = s->mutable_inference_stats();
  fill_duration(is->mutable_success(), snap.success);
  fill_duration(is->mutable_fail(), snap.fail);
  fill_duration(is->mutable_queue(), snap.queue);
  fill_duration(is->mutable_compute_input(), snap.compute.input);
  fill_duration(is->mutable_compute_infer(), snap.compute.infer);
  fill_duration(is->mutable_compute_output(), snap.compute.output);
  for (const auto& [size, c] : snap.batches) {
    pb::InferBatchStatistics* b = s->add_batch_stats();
    b->set_batch_size(static_cast<uint64_t>(size));
    fill_duration(b->mutable_compute_input(), c.input);
    fill_duration(b->mutable_compute_infer(), c.infer);
    fill_duration(b->mutable_compute_output(), c.output);
  }
}

void fill_tensor_metadata(pb::ModelMetadataResponse::TensorMetadata* m, const TensorSpec& t, int64_t max_batch_size) {
  m->set_name(t.name);
  m->set_datatype(protocol_type_name(t.dtype));
  if (max_batch_size > 0) m->add_shape(-1);
  for (int64_t d : t.dims) m->add_shape(d);
}

class Service final : public pb::GRPCInferenceService::Service {
 public:
  explicit Service(Repository& repository) : repository_(repository) {}

  grpc::Status ServerLive(grpc::ServerContext*, const pb::ServerLiveRequest*, pb::ServerLiveResponse* res) override {
    res->set_live(true);
    return grpc::Status::OK;
  }
  // Ready as HTTP's /v2/health/ready: not stopping, and the repository ready (Repository::ready).
  grpc::Status ServerReady(grpc::ServerContext*, const pb::ServerReadyRequest*, pb::ServerReadyResponse* res) override {
    res->set_ready(!stopping.load() && repository_.ready());
    return grpc::Status::OK;
  }
  std::atomic<bool> stopping{false};
  grpc::Status ModelReady(grpc::ServerContext*, const pb::ModelReadyRequest* req, pb::ModelReadyResponse* res) override {
    res->set_ready(repository_.find(req->name(), req->version()).ok());
    return grpc::Status::OK;
  }
  grpc::Status ServerMetadata(grpc::ServerContext*, const pb::ServerMetadataRequest*,
                              pb::ServerMetadataResponse* res) override {
    res->set_name("kiln");
    res->set_version(kiln::version());
    for (const char* e : {"model_configuration", "model_repository", "statistics"}) res->add_extensions(e);
    return grpc::Status::OK;
  }
  grpc::Status ModelMetadata(grpc::ServerContext*, const pb::ModelMetadataRequest* req,
                             pb::ModelMetadataResponse* res) override {
    auto mv = repository_.find(req->name(), req->version());
    if (!mv.ok()) return to_grpc(mv.status());
    const ModelSpec& spec = (*mv)->spec;
    res->set_name(spec.name);
    for (const auto& v : repository_.loaded())
      if (v->name == spec.name) res->add_versions(std::to_string(v->version));
    res->set_platform(spec.platform.empty() ? spec.backend : spec.platform);
    for (const TensorSpec& t : spec.inputs) fill_tensor_metadata(res->add_inputs(), t, spec.max_batch_size);
    for (const TensorSpec& t : spec.outputs) fill_tensor_metadata(res->add_outputs(), t, spec.max_batch_size);
    return grpc::Status::OK;
  }
  // An exception (memory exhausted by a tensor the limits allowed) is an error naming it, not gRPC's
  // "Unexpected error in RPC handling".
  grpc::Status ModelInfer(grpc::ServerContext* ctx, const pb::ModelInferRequest* req, pb::ModelInferResponse* res) override {
    try {
      return infer(ctx, req, res);
    } catch (const std::bad_alloc&) {
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, "out of memory for model '" + req->model_name() + "'"};
    } catch (const std::exception& e) {
      return {grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what()};
    }
  }
  grpc::Status infer(grpc::ServerContext*, const pb::ModelInferRequest* req, pb::ModelInferResponse* res) {
    const auto arrived = std::chrono::steady_clock::now();
    auto mv = repository_.find(req->model_name(), req->model_version());
    if (!mv.ok()) return to_grpc(mv.status());
    ModelVersion& model = **mv;
    auto request = decode_grpc_request(*req, model.spec);
    if (!request.ok()) {
      model.stats->record_failure(static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - arrived).count()));
      return to_grpc(request.status());
    }
    auto outputs = model.batcher->infer({request->inputs, request->timeout});
    if (!outputs.ok()) return to_grpc(outputs.status());
    res->set_model_name(model.name);
    res->set_model_version(std::to_string(model.version));
    res->set_id(request->id);
    for (size_t k : request->outputs) {
      const Tensor& t = (*outputs)[k];
      pb::ModelInferResponse::InferOutputTensor* o = res->add_outputs();
      o->set_name(model.spec.outputs[k].name);
      o->set_datatype(protocol_type_name(t.dtype()));
      for (int64_t d : sent_output_shape(model.spec, k, t)) o->add_shape(d);
      res->add_raw_output_contents(static_cast<const char*>(t.raw()), t.nbytes());
    }
    return grpc::Status::OK;
  }
  grpc::Status ModelConfig(grpc::ServerContext*, const pb::ModelConfigRequest* req, pb::ModelConfigResponse* res) override {
    auto mv = repository_.find(req->name(), req->version());
    if (!mv.ok()) return to_grpc(mv.status());
    fill_model_config((*mv)->spec, res->mutable_config());
    return grpc::Status::OK;
  }
  grpc::Status ModelStatistics(grpc::ServerContext*, const pb::ModelStatisticsRequest* req,
                               pb::ModelStatisticsResponse* res) override {
    if (!req->version().empty()) {
      auto mv = repository_.find(req->name(), req->version());
      if (!mv.ok()) return to_grpc(mv.status());
      fill_stats(res->add_model_stats(), **mv);
      return grpc::Status::OK;
    }
    for (const auto& mv : repository_.loaded())
      if (req->name().empty() || mv->name == req->name()) fill_stats(res->add_model_stats(), *mv);
    if (!req->name().empty() && res->model_stats_size() == 0)
      return {grpc::StatusCode::NOT_FOUND, "unknown model '" + req->name() + "'"};
    return grpc::Status::OK;
  }
  grpc::Status RepositoryIndex(grpc::ServerContext*, const pb::RepositoryIndexRequest* req,
                               pb::RepositoryIndexResponse* res) override {
    for (const ModelState& s : repository_.index()) {
      if (req->ready() && s.state != "READY") continue;
      pb::RepositoryIndexResponse::ModelIndex* m = res->add_models();
      m->set_name(s.name);
      m->set_version(s.version);
      m->set_state(s.state);
      m->set_reason(s.reason);
    }
    return grpc::Status::OK;
  }
  grpc::Status RepositoryModelLoad(grpc::ServerContext*, const pb::RepositoryModelLoadRequest* req,
                                   pb::RepositoryModelLoadResponse*) override {
    if (req->parameters().count("config"))
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "load with a \"config\" parameter is not supported: edit config.pbtxt instead"};
    return to_grpc(repository_.load(req->model_name()));
  }
  grpc::Status RepositoryModelUnload(grpc::ServerContext*, const pb::RepositoryModelUnloadRequest* req,
                                     pb::RepositoryModelUnloadResponse*) override {
    return to_grpc(repository_.unload(req->model_name()));
  }

 private:
  Repository& repository_;
};

}  // namespace

struct GrpcServer::Impl {
  GrpcOptions options;
  Service service;
  std::unique_ptr<grpc::Server> server;
  int port = -1;
  std::once_flag stopped;
  Impl(Repository& r, GrpcOptions o) : options(std::move(o)), service(r) {}
};

GrpcServer::GrpcServer(Repository& repository, GrpcOptions options)
    : impl_(std::make_unique<Impl>(repository, std::move(options))) {}

GrpcServer::~GrpcServer() { stop(); }

Status GrpcServer::start() {
  const std::string address = impl_->options.host + ":" + std::to_string(impl_->options.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(impl_->options.max_message_bytes, INT32_MAX)));
  builder.SetMaxSendMessageSize(-1);
  grpc::ResourceQuota quota("kiln-serve-grpc");
  quota.SetMaxThreads(std::max(2, impl_->options.max_threads));
  builder.SetResourceQuota(quota);
  builder.RegisterService(&impl_->service);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port <= 0)
    return io_error("cannot serve gRPC on " + address + " (in use, or not an address of this machine)");
  return Status::Ok();
}

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::mark_stopping() { impl_->service.stopping = true; }

void GrpcServer::stop() {
  if (!impl_->server) return;
  impl_->service.stopping = true;
  std::call_once(impl_->stopped, [this] { impl_->server->Shutdown(); });
}

}  // namespace kiln::serve
