// backends/cuda/cuda_attention_cudnn.cpp — kiln.Attention as cuDNN's fused attention (see the header).
// The only file that includes cudnn-frontend (a large header-only library).
#include "backends/cuda/cuda_attention_cudnn.h"

#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#ifdef KILN_CUDNN_FRONTEND
#include <cudnn_frontend.h>
#endif

namespace kiln::cuda {

#ifdef KILN_CUDNN_FRONTEND

namespace fe = cudnn_frontend;

struct CudnnAttention {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  bool mask = false;
};

namespace {

enum : int64_t { kUidQ = 1, kUidK, kUidV, kUidY, kUidMask };

// Everything the plan depends on, as text: the plan cache's key.
std::string signature(const AttentionArgs& a, int device) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &a.scale, sizeof(scale_bits));
  std::string k = std::to_string(device) + "|" + std::to_string(a.elem) + "|" + std::to_string(scale_bits);
  for (int64_t v : {a.b, a.s, a.t, a.heads, a.kv_group, int64_t{a.d}, int64_t{a.dv}, a.q_row, a.k_row, a.v_row, a.y_row,
                    a.q_batch, a.k_batch, a.v_batch, a.y_batch, a.q_head, a.k_head, a.v_head, int64_t{a.has_mask}, a.ms[0],
                    a.ms[1], a.ms[2], a.ms[3]})
    k += "|" + std::to_string(v);
  return k;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

std::string cudnn_attention_refusal(const AttentionArgs& a) {
  if (a.elem != kElemF16 && a.elem != kElemBF16) return "float16 and bfloat16 only";
  if (a.d != a.dv) return "Q's and V's head sizes differ";
  if (a.d % 8 != 0 || a.d > 128) return "head sizes that are multiples of 8 up to 128 only";
  if (a.has_cond) return "no bool mask";
  if (a.mask_period != 0) return "no mask repeating along the batch";
  // Rows of 16-byte pieces: every row and batch step a multiple of 8 elements.
  for (int64_t st : {a.q_row, a.k_row, a.v_row, a.y_row, a.q_batch, a.k_batch, a.v_batch, a.y_batch, a.q_head, a.k_head, a.v_head})
    if (st % 8 != 0) return "rows that are not 16-byte aligned";
  if (a.has_mask && (a.ms[3] != 1 || a.ms[2] < a.t || a.ms[2] % 8 != 0))
    return "an additive mask whose rows are not whole, aligned [S, T] rows";
  // A row the mask hides entirely: kiln's op gives NaN there unless zero_nan_rows says 0, while cuDNN's
  // kernel writes 0 (CudaOps.AttentionStagedMaskMatchesCpu checks the zero_nan_rows case).
  if (a.has_mask && !a.zero_nan_rows) return "a mask that may hide whole rows (NaN rows) without zero_nan_rows";
  if (a.b == 0 || a.s == 0 || a.t == 0) return "empty tensors";
  return "";
}

namespace {

// A state's plans by signature.
struct PlanCache {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<const CudnnAttention>> plans;
};

}  // namespace

std::shared_ptr<const CudnnAttention> plan_cudnn_attention(CudaState& st, const AttentionArgs& a, std::string* why) {
  if (std::string r = cudnn_attention_refusal(a); !r.empty()) {
    *why = r;
    return nullptr;
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    *why = "no current CUDA device";
    return nullptr;
  }
  const std::string key = signature(a, device);
  if (!st.cudnn_attention_plans) st.cudnn_attention_plans = std::make_shared<PlanCache>();
  PlanCache& cache = *static_cast<PlanCache*>(st.cudnn_attention_plans.get());
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto it = cache.plans.find(key); it != cache.plans.end()) return it->second;
  }
  cudnnHandle_t dnn = st.dnn;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(a.elem == kElemF16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, std::vector<int64_t> dims, std::vector<int64_t> strides) {
    return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dims)).set_stride(std::move(strides)));
  };
  // [B, H, S, D] views of kiln's tensors: a head's D values follow each other, heads, sequence steps
  // and batch entries as the strides of AttentionArgs say; K and V have H / kv_group heads
  // (grouped-query attention, which cuDNN's SDPA takes as K/V head counts dividing Q's).
  const int64_t H = a.heads, Hkv = a.heads / a.kv_group;
  auto q = tensor("Q", kUidQ, {a.b, H, a.s, a.d}, {a.q_batch, a.q_head, a.q_row, 1});
  auto k = tensor("K", kUidK, {a.b, Hkv, a.t, a.d}, {a.k_batch, a.k_head, a.k_row, 1});
  auto v = tensor("V", kUidV, {a.b, Hkv, a.t, a.dv}, {a.v_batch, a.v_head, a.v_row, 1});
  auto opts = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(false).set_attn_scale(a.scale);
  if (a.has_mask) {
    // The additive mask, added to the scaled scores: [B or 1, H or 1, S, T] (a broadcast dim has size 1).
    const int64_t mb = a.ms[0] ? a.b : 1, mh = a.ms[1] ? H : 1;
    const int64_t s2 = a.ms[2], s1 = a.ms[1] ? a.ms[1] : s2 * a.s, s0 = a.ms[0] ? a.ms[0] : s1 * mh;
    opts.set_bias(tensor("mask", kUidMask, {mb, mh, a.s, a.t}, {s0, s1, s2, 1}));
  }
  auto outs = g->sdpa(q, k, v, opts);
  outs[0]->set_output(true).set_uid(kUidY).set_dim({a.b, H, a.s, a.dv}).set_stride({a.y_batch, a.dv, a.y_row, 1});
  auto failed = [&](fe::error_t e, const char* step) {
    if (e.is_bad()) *why = std::string("cuDNN ") + step + ": " + e.get_message();
    return e.is_bad();
  };
  if (failed(g->validate(), "validate") || failed(g->build_operation_graph(dnn), "operation graph") ||
      failed(g->create_execution_plans({fe::HeurMode_t::A}), "execution plans") ||
      failed(g->check_support(dnn), "support") ||
      failed(g->build_plans(dnn, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "plan build"))
    return nullptr;
  auto p = std::make_shared<CudnnAttention>();
  if (failed(g->get_workspace_size(p->workspace), "workspace size")) return nullptr;
  p->graph = std::move(g);
  p->mask = a.has_mask;
  std::lock_guard<std::mutex> lock(cache.mu);
  // Shape plans hold what they use; past 1024 signatures (a stream of new shapes) the cache restarts.
  if (cache.plans.size() >= 1024) cache.plans.clear();
  return cache.plans.emplace(key, std::move(p)).first->second;
}

size_t cudnn_attention_workspace(const CudnnAttention& p) { return static_cast<size_t>(std::max<int64_t>(p.workspace, 0)); }

std::string run_cudnn_attention(const CudnnAttention& p, cudnnHandle_t dnn, const AttentionArgs& a, void* workspace) {
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.y) || (p.mask && !aligned16(a.mask)))
    return "cuDNN attention needs 16-byte aligned tensors";
  std::unordered_map<int64_t, void*> pack = {{kUidQ, const_cast<void*>(a.q)},
                                             {kUidK, const_cast<void*>(a.k)},
                                             {kUidV, const_cast<void*>(a.v)},
                                             {kUidY, a.y}};
  if (p.mask) pack[kUidMask] = const_cast<void*>(a.mask);
  fe::error_t e = p.graph->execute(dnn, pack, workspace);
  return e.is_good() ? std::string() : "cuDNN attention: " + e.get_message();
}

#else  // built without cudnn-frontend's headers

struct CudnnAttention {};

std::string cudnn_attention_refusal(const AttentionArgs&) { return "this kiln was built without cudnn-frontend"; }

std::shared_ptr<const CudnnAttention> plan_cudnn_attention(CudaState&, const AttentionArgs& a, std::string* why) {
  *why = cudnn_attention_refusal(a);
  return nullptr;
}

size_t cudnn_attention_workspace(const CudnnAttention&) { return 0; }

std::string run_cudnn_attention(const CudnnAttention&, cudnnHandle_t, const AttentionArgs& a, void*) {
  return cudnn_attention_refusal(a);
}

#endif

}  // namespace kiln::cuda
