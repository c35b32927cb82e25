// backends/cuda/cuda_backend.cpp — the CUDA backend: device memory, copies, per-context state.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_entry.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/parallel.h"

namespace kiln {
namespace cuda {

Status check_cuda(int err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  return runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(static_cast<cudaError_t>(err)));
}

CudaState::~CudaState() {
  for (int i = 0; i < 2; ++i) {
    if (staged[i]) cudaEventDestroy(staged[i]);
    if (staging[i]) cudaFreeHost(staging[i]);
  }
  if (workspace) cudaFree(workspace);
  cudnn_attention_plans.reset();  // before the handle they were built with
  if (dnn) cudnnDestroy(dnn);
  if (lt) cublasLtDestroy(lt);
  if (own_stream) cudaStreamDestroy(own_stream);
}

Expected<std::shared_ptr<CudaState>> make_state() {
  auto st = std::make_shared<CudaState>();
  KILN_RETURN_IF_ERROR(check_cuda(cudaStreamCreateWithFlags(&st->own_stream, cudaStreamNonBlocking), "creating a stream"));
  st->stream = st->own_stream;
  if (cublasLtCreate(&st->lt) != CUBLAS_STATUS_SUCCESS) return runtime_error("cuda: cublasLtCreate failed");
  if (cudnnStatus_t s = cudnnCreate(&st->dnn); s != CUDNN_STATUS_SUCCESS)
    return runtime_error(std::string("cuda: cudnnCreate failed: ") + cudnnGetErrorString(s));
  if (cudnnSetStream(st->dnn, st->stream) != CUDNN_STATUS_SUCCESS) return runtime_error("cuda: cudnnSetStream failed");
  KILN_RETURN_IF_ERROR(check_cuda(cudaMalloc(&st->workspace, kWorkspaceBytes), "allocating the workspace"));
  st->workspace_bytes = kWorkspaceBytes;
  for (int i = 0; i < 2; ++i) {
    if (cudaHostAlloc(&st->staging[i], kStagingBytes, cudaHostAllocDefault) != cudaSuccess ||
        cudaEventCreateWithFlags(&st->staged[i], cudaEventDisableTiming) != cudaSuccess) {
      cudaGetLastError();  // no pinned memory: copies go through the driver's own staging
      for (int j = 0; j <= i; ++j) {
        if (st->staging[j]) cudaFreeHost(st->staging[j]);
        if (st->staged[j]) cudaEventDestroy(st->staged[j]);
        st->staging[j] = nullptr;
        st->staged[j] = nullptr;
      }
      break;
    }
  }
  return st;
}

namespace {

std::string make_fingerprint() {
  cudaDeviceProp prop{};
  std::string name = "unknown GPU";
  int major = 0, minor = 0;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    name = prop.name;
    major = prop.major;
    minor = prop.minor;
  }
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  const size_t dnn = cudnnGetVersion();
  const size_t lt = cublasLtGetVersion();
  auto s = [](auto v) { return std::to_string(v); };
  return name + "; sm_" + s(major) + s(minor) + "; CUDA runtime " + s(rt / 1000) + "." + s(rt % 1000 / 10) +
         "; cuDNN " + s(dnn / 10000) + "." + s(dnn % 10000 / 100) + "." + s(dnn % 100) + "; cuBLAS " +
         s(lt / 10000) + "." + s(lt / 100 % 100) + "." + s(lt % 100);
}

}  // namespace

void register_all(KernelRegistry& r) {
  register_gemm(r);
  register_conv(r);
  register_qconv(r);
  register_conv_pool(r);
  register_nn(r);
  register_resize(r);
  register_misc(r);
  register_elementwise(r);
  register_shape(r);
  register_reduce(r);
  register_fused(r);
  register_pointwise(r);
  register_index(r);
  register_attention_op(r);
  register_quant(r);
  register_pool_nd(r);
  register_grid(r);
  register_conv_transpose(r);
  register_shape_eye_like(r);
  register_index_one_hot(r);
  register_nn_norm(r);
  register_cast_bitcast(r);
  register_attention_rotary(r);
  register_conv_causal(r);
  register_attention_linear(r);
  register_gemm_direct(r);
  register_signal(r);
  register_shape_depth_space(r);
  register_einsum(r);
  register_reduce_topk(r);
  register_index_col2im(r);
  register_training(r);
  register_quant_dynamic(r);
  register_index_scatter(r);
  register_detect(r);
  register_rnn(r);
}

CudaBackend::CudaBackend() {
  register_all(registry_);
  fingerprint_ = make_fingerprint();
}

Expected<std::shared_ptr<Storage>> CudaBackend::allocate(size_t bytes) {
  count_allocation();
  auto st = std::make_shared<Storage>();
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes ? bytes : 256);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls do not see it
    return runtime_error("cuda: out of device memory allocating " + std::to_string(bytes) + " bytes (" +
                         cudaGetErrorString(err) + ")");
  }
  st->data = p;
  st->bytes = bytes;
  st->device = device();
  st->release = [](void* q) { cudaFree(q); };
  return st;
}

namespace {

// KILN_STAGED_COPIES=0: every copy through cudaMemcpyAsync as it is (to compare).
bool getenv_staging_off() {
  static const bool off = [] {
    const char* v = std::getenv("KILN_STAGED_COPIES");
    return v && std::string(v) == "0";
  }();
  return off;
}

// memcpy on the calling thread's CPU threads, in 1 MiB pieces.
void parallel_memcpy(void* dst, const void* src, size_t bytes) {
  constexpr size_t kPiece = size_t{1} << 20;
  const int64_t pieces = static_cast<int64_t>((bytes + kPiece - 1) / kPiece);
  parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
    const size_t lo = static_cast<size_t>(b) * kPiece, hi = std::min(bytes, static_cast<size_t>(e) * kPiece);
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, hi - lo);
  });
}

bool pageable(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

// A copy between pageable host memory and the GPU through the state's two pinned buffers, in
// chunks: the CPU threads copy one chunk into (or out of) one buffer while the other transfers.
// (cudaMemcpyAsync stages pageable memory itself, with one thread: 7-9 GB/s on the H100's host.)
// To the GPU it returns once the source is read (the last transfers may still run, ordered on the
// stream before later work); from the GPU it returns with the data in place.
Status staged_copy(CudaState& cs, const char* src, char* dst, size_t bytes, bool to_device) {
  const size_t n = (bytes + kStagingBytes - 1) / kStagingBytes;
  auto size = [&](size_t i) { return std::min(kStagingBytes, bytes - i * kStagingBytes); };
  if (to_device) {
    for (size_t i = 0; i < n; ++i) {
      const int k = cs.next_staging;
      cs.next_staging ^= 1;
      KILN_RETURN_IF_ERROR(check_cuda(cudaEventSynchronize(cs.staged[k]), "staging a copy"));
      parallel_memcpy(cs.staging[k], src + i * kStagingBytes, size(i));
      KILN_RETURN_IF_ERROR(check_cuda(cudaMemcpyAsync(dst + i * kStagingBytes, cs.staging[k], size(i), cudaMemcpyHostToDevice,
                                                      cs.stream),
                                      "copy"));
      KILN_RETURN_IF_ERROR(check_cuda(cudaEventRecord(cs.staged[k], cs.stream), "staging a copy"));
    }
    return Status::Ok();
  }
  auto fetch = [&](size_t i) -> Status {
    const int k = static_cast<int>(i % 2);
    KILN_RETURN_IF_ERROR(check_cuda(cudaEventSynchronize(cs.staged[k]), "staging a copy"));
    KILN_RETURN_IF_ERROR(check_cuda(cudaMemcpyAsync(cs.staging[k], src + i * kStagingBytes, size(i), cudaMemcpyDeviceToHost,
                                                    cs.stream),
                                    "copy"));
    return check_cuda(cudaEventRecord(cs.staged[k], cs.stream), "staging a copy");
  };
  for (size_t i = 0; i < n && i < 2; ++i) KILN_RETURN_IF_ERROR(fetch(i));
  for (size_t i = 0; i < n; ++i) {
    const int k = static_cast<int>(i % 2);
    KILN_RETURN_IF_ERROR(check_cuda(cudaEventSynchronize(cs.staged[k]), "copy"));
    parallel_memcpy(dst + i * kStagingBytes, cs.staging[k], size(i));
    if (i + 2 < n) KILN_RETURN_IF_ERROR(fetch(i + 2));
  }
  return Status::Ok();
}

}  // namespace

Status CudaBackend::copy(const Tensor& src, Tensor& dst, void* state) {
  if (src.nbytes() != dst.nbytes()) return internal_error("cuda copy: size mismatch");
  if (src.dtype() == DataType::kString || dst.dtype() == DataType::kString)
    return unsupported("cuda copy: string tensors cannot live on the GPU");
  if (src.nbytes() == 0) return Status::Ok();
  if (src.device().is_cpu() && dst.device().is_cpu()) {
    std::memcpy(dst.raw(), src.raw(), src.nbytes());
    return Status::Ok();
  }
  // Unified addressing lets the runtime infer the direction (H2D, D2H or D2D).
  if (state) {
    auto* cs = static_cast<CudaState*>(state);
    const bool to_device = src.device().is_cpu(), from_device = dst.device().is_cpu();
    if ((to_device || from_device) && src.nbytes() >= kStagedMinBytes && cs->staging[0] && cs->staging[1] &&
        pageable(to_device ? src.raw() : dst.raw()) && !(getenv_staging_off()))
      return staged_copy(*cs, static_cast<const char*>(src.raw()), static_cast<char*>(dst.raw()), src.nbytes(), to_device);
    return check_cuda(cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault, cs->stream), "copy");
  }
  if (src.device().is_cpu()) {
    // An upload without a state (weights at build and load time, kiln::transfer): on a stream of its
    // own, waited for. Not cudaMemcpy and a device-wide wait: those wait on every stream of the device,
    // which a stream capturing a CUDA graph in another thread (a served model's new shape while
    // another model loads) refuses — the upload failed and the capture with it. Host memory is ready
    // as it is; the destination is read only after this returns.
    cudaStream_t s = nullptr;
    KILN_RETURN_IF_ERROR(check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "copy"));
    cudaError_t err = cudaMemcpyAsync(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyHostToDevice, s);
    const cudaError_t waited = cudaStreamSynchronize(s);
    if (err == cudaSuccess) err = waited;
    cudaStreamDestroy(s);
    return check_cuda(err, "copy");
  }
  // From the device: its producer may be any stream (a caller's tensor), so the whole device is waited for.
  KILN_RETURN_IF_ERROR(check_cuda(cudaMemcpy(dst.raw(), src.raw(), src.nbytes(), cudaMemcpyDefault), "copy"));
  return check_cuda(cudaDeviceSynchronize(), "copy");
}

Expected<std::shared_ptr<void>> CudaBackend::create_state() {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<CudaState> st, make_state());
  return std::shared_ptr<void>(std::move(st));
}

Status CudaBackend::synchronize(void* state) {
  if (!state) return check_cuda(cudaDeviceSynchronize(), "synchronize");
  return check_cuda(cudaStreamSynchronize(static_cast<CudaState*>(state)->stream), "synchronize");
}

Status CudaBackend::begin_capture(void* state) {
  // Thread-local mode: a call on this thread that cannot be recorded (cudaMalloc, a synchronisation)
  // fails the capture instead of running; other threads' contexts are not affected.
  return check_cuda(cudaStreamBeginCapture(static_cast<CudaState*>(state)->stream, cudaStreamCaptureModeThreadLocal),
                    "beginning a graph capture");
}

Expected<std::shared_ptr<void>> CudaBackend::end_capture(void* state, size_t max_nodes, size_t* nodes) {
  cudaGraph_t graph = nullptr;
  cudaError_t err = cudaStreamEndCapture(static_cast<CudaState*>(state)->stream, &graph);
  if (err != cudaSuccess || !graph) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky; do not leave one for the next check
    return runtime_error(std::string("cuda: graph capture failed (") + cudaGetErrorString(err) + ")");
  }
  size_t count = 0;
  err = cudaGraphGetNodes(graph, nullptr, &count);
  if (nodes) *nodes = count;
  if (err != cudaSuccess || (max_nodes > 0 && count > max_nodes)) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    if (err != cudaSuccess) return runtime_error(std::string("cuda: counting a graph's nodes failed (") + cudaGetErrorString(err) + ")");
    return runtime_error("cuda: the graph records " + std::to_string(count) + " operations, more than " +
                              std::to_string(max_nodes));
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return runtime_error(std::string("cuda: graph instantiation failed (") + cudaGetErrorString(err) + ")");
  }
  return std::shared_ptr<void>(exec, [](void* e) { cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e)); });
}

Status CudaBackend::launch_graph(void* graph, void* state) {
  return check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<CudaState*>(state)->stream),
                    "launching a graph");
}

Status CudaBackend::use_stream(void* state, void* stream) {
  auto* cs = static_cast<CudaState*>(state);
  if (!cs) return invalid_argument("cuda: no state to set a stream on");
  cudaStream_t next = stream ? static_cast<cudaStream_t>(stream) : cs->own_stream;
  if (next == cs->stream) return Status::Ok();
  // Work queued on the old stream (a staged copy's last transfer) finishes before any on the new.
  KILN_RETURN_IF_ERROR(check_cuda(cudaStreamSynchronize(cs->stream), "switching streams"));
  if (cudnnStatus_t s = cudnnSetStream(cs->dnn, next); s != CUDNN_STATUS_SUCCESS)
    return runtime_error(std::string("cuda: cudnnSetStream failed: ") + cudnnGetErrorString(s));
  cs->stream = next;
  return Status::Ok();
}

void* CudaBackend::build_state() {
  std::lock_guard<std::mutex> lock(build_mu_);
  if (!build_state_) {
    auto st = make_state();
    if (!st.ok()) return nullptr;
    build_state_ = std::move(st).value();
  }
  return build_state_.get();
}

const KernelRegistry* kernel_rows() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry;
    register_all(*r);
    return r;
  }();
  return registry;
}

Expected<Backend*> probe_backend() {
  // A process either sees a GPU or it does not.
  static const Expected<Backend*> backend = []() -> Expected<Backend*> {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return unsupported(std::string("no CUDA GPU visible: ") + cudaGetErrorString(err));
    }
    if (count == 0) return unsupported("no CUDA GPU visible: cudaGetDeviceCount found 0 devices");
    static CudaBackend instance;
    return &instance;
  }();
  return backend;
}

}  // namespace cuda

}  // namespace kiln
