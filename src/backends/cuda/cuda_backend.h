// backends/cuda/cuda_backend.h — the CUDA backend (sm_90): device memory, copies, streams, and the
// per-context state that CUDA kernels find through KernelContext::device_state().
//
// No CUDA header is included here: the handle types are forward-declared exactly as the CUDA,
// cuBLASLt and cuDNN headers declare them, so host modules can include this file freely.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "backends/backend.h"

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // NOLINT: same typedef as cuda_runtime_api.h
struct CUevent_st;
typedef struct CUevent_st* cudaEvent_t;  // NOLINT: same typedef as cuda_runtime_api.h
struct cublasLtContext;
typedef struct cublasLtContext* cublasLtHandle_t;  // NOLINT: same typedef as cublasLt.h
struct cudnnContext;
typedef struct cudnnContext* cudnnHandle_t;  // NOLINT: same typedef as cudnn.h

namespace kiln::cuda {

// One per ExecutionContext (and one for build time). Every kernel of a context queues its work on
// `stream`; the library handles are bound to that stream; `workspace` is scratch memory that a
// kernel may use during its own run only (the stream orders the users).
struct CudaState {
  cudaStream_t stream = nullptr;      // where work is queued: own_stream, or the caller's (use_stream)
  cudaStream_t own_stream = nullptr;  // created with the state, destroyed with it
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Two pinned host buffers for copies between pageable host memory and the GPU (CudaBackend::copy),
  // each with the event of the last transfer that used it; null when pinned memory was refused.
  void* staging[2] = {nullptr, nullptr};
  cudaEvent_t staged[2] = {nullptr, nullptr};
  int next_staging = 0;
  // cuDNN fused-attention plans built with `dnn` (cuda_attention_cudnn.cpp owns the type): they live
  // and die with this state's handle, and only its context runs them.
  std::shared_ptr<void> cudnn_attention_plans;
  ~CudaState();
};

// Each staging buffer's size, and the smallest copy that goes through them.
constexpr size_t kStagingBytes = size_t{8} << 20;
constexpr size_t kStagedMinBytes = size_t{1} << 20;

// Scratch memory every state gets (cuBLASLt and cuDNN algorithms that need more are not chosen).
constexpr size_t kWorkspaceBytes = size_t{64} << 20;

// Creates a state on the current device: a non-blocking stream, handles and the workspace.
Expected<std::shared_ptr<CudaState>> make_state();

// The CudaState of a running kernel (never null for kernels placed on CUDA).
inline CudaState& state_of(const KernelContext& ctx) { return *static_cast<CudaState*>(ctx.device_state()); }
// The CudaState a reshape() plans with: null where shapes are planned without a device state, so a
// kernel whose plan needs a library handle checks it.
inline CudaState* reshape_state(const ReshapeContext& rc) { return static_cast<CudaState*>(rc.device_state); }

// Kernel families (one table each, see cuda_*.cpp).
void register_elementwise(KernelRegistry& r);
void register_shape(KernelRegistry& r);
void register_nn(KernelRegistry& r);
void register_resize(KernelRegistry& r);
void register_misc(KernelRegistry& r);
void register_gemm(KernelRegistry& r);
void register_conv(KernelRegistry& r);
void register_conv_pool(KernelRegistry& r);  // cuda_conv_pool_op.cpp: kiln.ConvPool (a stem in one kernel)
void register_qconv(KernelRegistry& r);  // cuda_qconv.cpp: kiln.QConv (int8, cuDNN's graph API)
void register_reduce(KernelRegistry& r);
void register_fused(KernelRegistry& r);
void register_pointwise(KernelRegistry& r);  // cuda_pointwise.cpp: kiln.Pointwise (NVRTC-generated)
void register_index(KernelRegistry& r);
void register_attention_op(KernelRegistry& r);
void register_quant(KernelRegistry& r);
void register_pool_nd(KernelRegistry& r);
void register_grid(KernelRegistry& r);
void register_conv_transpose(KernelRegistry& r);
void register_shape_eye_like(KernelRegistry& r);
void register_index_one_hot(KernelRegistry& r);
void register_nn_norm(KernelRegistry& r);  // Instance/GroupNormalization, LRN, LpNormalization
void register_cast_bitcast(KernelRegistry& r);
void register_attention_rotary(KernelRegistry& r);  // RotaryEmbedding
void register_conv_causal(KernelRegistry& r);  // CausalConvWithState
void register_attention_linear(KernelRegistry& r);  // LinearAttention
void register_gemm_direct(KernelRegistry& r);  // MatMul (float64, integers), MatMulInteger, QLinearMatMul
void register_signal(KernelRegistry& r);  // DFT, Hann/Hamming/BlackmanWindow
void register_shape_depth_space(KernelRegistry& r);  // DepthToSpace, SpaceToDepth
void register_einsum(KernelRegistry& r);
void register_reduce_topk(KernelRegistry& r);  // TopK
void register_index_col2im(KernelRegistry& r);  // Col2Im
void register_training(KernelRegistry& r);  // Adagrad, Adam, Momentum
void register_quant_dynamic(KernelRegistry& r);  // DynamicQuantizeLinear
void register_index_scatter(KernelRegistry& r);  // TensorScatter
void register_detect(KernelRegistry& r);
void register_rnn(KernelRegistry& r);
// The CUDA MatMul (Gemm) kernel as kiln.FusedMatMul's (FusedGemm's) inner kernel: an inner node with
// attribute kBiasEpilogueAttr = 1 (bias), 2 (bias and ReLU) or 3 (bias and tanh GELU) and the bias as
// input 2 asks for them in cuBLASLt's epilogue; matmul_epilogue_applied(plan) says what the plan took
// (0: nothing, 1: the bias, 2: bias and the activation), the rest is the caller's.
inline constexpr const char* kBiasEpilogueAttr = "kiln_bias_epilogue";
// kiln.FusedMatMul's output_dtype (float32 from half operands) as its inner MatMul reads it: only the
// fused op's shape function declares it, so a plain MatMul never carries it.
inline constexpr const char* kOutputDtypeAttr = "kiln_output_dtype";
// ... and its output_columns (the float32 Y is the product's first columns: run_matmul, cuda_gemm.cpp).
inline constexpr const char* kOutputColumnsAttr = "kiln_output_columns";
int matmul_epilogue_applied(const void* shape_state);  // kiln's FusedConv/FusedGemm/FusedMatMul
// The CUDA Conv kernel as kiln.FusedConv's inner kernel: kBiasEpilogueAttr = 1 (bias, residual as
// input 3) or 2 (and a ReLU) asks for them in cuDNN's fused convolution; conv_epilogue_applied(plan)
// is non-zero when the plan took them all.
int conv_epilogue_applied(const void* shape_state);
// Conv's placement check (1-D/2-D, float types), also FusedConv's: the fused node has Conv's inputs
// and attributes.
std::string conv_check(const ir::Node& n);

// The process-wide backend for device 0 (see cuda_backend() in backend.h).
class CudaBackend final : public Backend {
 public:
  CudaBackend();
  std::string name() const override { return "cuda"; }
  Device device() const override { return {DeviceType::kCUDA, 0}; }
  const KernelRegistry& kernels() const override { return registry_; }
  Expected<std::shared_ptr<Storage>> allocate(size_t bytes) override;
  Status copy(const Tensor& src, Tensor& dst, void* state) override;
  Expected<std::shared_ptr<void>> create_state() override;
  Status synchronize(void* state) override;
  Status begin_capture(void* state) override;
  Expected<std::shared_ptr<void>> end_capture(void* state, size_t max_nodes, size_t* nodes) override;
  Status launch_graph(void* graph, void* state) override;
  Status use_stream(void* state, void* stream) override;
  std::string fingerprint() const override { return fingerprint_; }
  // A state for kernel creation (a stream and handles), made on first use; null if that failed.
  void* build_state() override;

 private:
  KernelRegistry registry_;
  std::string fingerprint_;
  std::shared_ptr<CudaState> build_state_;
  std::mutex build_mu_;
};

// "cuda: <what>: <cudaGetErrorString>" for a failed runtime call, or OK.
Status check_cuda(int err, const char* what);

}  // namespace kiln::cuda
