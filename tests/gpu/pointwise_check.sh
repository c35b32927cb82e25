#!/usr/bin/env bash
# kiln.Pointwise on the GPU (#40's fusion compiler, first step): the pointwise and CUDA unit tests,
# then models whose glue between library calls is left unfused by kiln's hand-written fusions —
# a Llama-style decoder exported by transformers with its defaults (SwiGLU's Sigmoid·Mul·Mul, RoPE's
# arithmetic) and the zoo's ConvNeXt-Tiny — each built FP16 with and without the fuse-pointwise stage:
# regions fused, output against the CPU float32 engine, and kiln bench (GPU-resident, CUDA events) of
# both engines in the same run.
#   bash tests/gpu/pointwise_check.sh BIN_DIR OUT_DIR
set -uo pipefail
. "$(dirname "$0")/lib.sh"
{
  machine_and_unit_tests "${FILTER:-Pointwise.*:CudaPointwise.*:Cuda*:Runtime.Cuda*}"
  ldd "$bin/libkiln_cuda.so" | grep -i nvrtc
  mkdir -p build/zoo build/inputs
  python3 - <<'EOF'
import numpy as np, torch, transformers as tf
torch.manual_seed(0)
cfg = tf.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
                     num_key_value_heads=16, vocab_size=8192, max_position_embeddings=512, use_cache=False)
net = tf.LlamaForCausalLM(cfg).eval()
ids = torch.randint(0, 8192, (1, 128))
class Wrap(torch.nn.Module):
    def __init__(s, m): super().__init__(); s.m = m
    def forward(s, input_ids, attention_mask): return s.m(input_ids=input_ids, attention_mask=attention_mask).logits
torch.onnx.export(Wrap(net), (ids, torch.ones_like(ids)), "build/zoo/llama_op17.onnx",
                  input_names=["input_ids", "attention_mask"], output_names=["logits"],
                  dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "logits": {0: "batch"}},
                  opset_version=17, dynamo=False)
for b in (1, 16):
    np.save(f"build/inputs/llama_input_ids_b{b}.npy", np.random.default_rng(b).integers(0, 8192, (b, 128)).astype(np.int64))
    np.save(f"build/inputs/llama_attention_mask_b{b}.npy", np.ones((b, 128), np.int64))
print("export: llama_op17 (transformers", tf.__version__, ")")
EOF
  prepare_zoo convnext_tiny
  for m in ${MODELS:-llama convnext_tiny}; do
    b=64; [ $m = llama ] && b=16
    for v in fused unfused; do
      extra=(); [ $v = unfused ] && extra=(--disable-pass fuse-pointwise)
      "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.$v.kiln --device cuda --precision fp16 -v "${extra[@]}" \
        > "$out/build_${m}_$v.txt" 2>&1 || tail -5 "$out/build_${m}_$v.txt"
    done
    echo "== $m: $(grep -c '\[pointwise\]' "$out/build_${m}_fused.txt") regions fused; ops per region:" \
      "$(grep -o '\[pointwise\] [0-9]* ops' "$out/build_${m}_fused.txt" | awk '{print $2}' | sort -n | uniq -c | tr '\n' ' ')"
    grep -m3 '\[pointwise\]' "$out/build_${m}_fused.txt" | cut -c1-220
    echo "== $m: fused fp16 (CUDA) vs float32 (CPU), batch 1"
    "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/$m.fused.kiln --device-a cpu $(zoo_args $m 1) --runs 2 --rtol 5e-2 2>&1 |
      grep -E "relative L2|rror|FAIL|pass"
    echo "== $m: fused vs unfused fp16 engines (CUDA), batch 1"
    "$bin/kiln" compare /tmp/$m.unfused.kiln /tmp/$m.fused.kiln $(zoo_args $m 1) --runs 2 --rtol 5e-2 2>&1 |
      grep -E "relative L2|rror|FAIL|pass"
    for v in unfused fused unfused fused; do
      echo "== $m $v, batch $b (GPU-resident)"
      "$bin/kiln" bench /tmp/$m.$v.kiln $(zoo_args $m $b) -n 50 --warmup 10 --device-io 2>&1 | grep -E "median|rror"
    done
  done
} 2>&1 | tee "$out/pointwise_check.log"
