#!/usr/bin/env bash
# ONNX Runtime's com.microsoft contrib ops on CUDA (#44): the models of tests/python/test_contrib_ops.py
# and tiny transformers optimized by onnxruntime's optimizer (written by dump_contrib_models.py into
# CONTRIB_DIR, default build/contrib_models), each run by `kiln compare` — the CPU float32 engine
# against the CUDA float32 engine (relative L2 <= 1e-4) and the CUDA float16 one (<= 2e-2) — then the
# zoo's BERT-base (default export) through onnxruntime's transformer optimizer: its FP16 CUDA engine
# against the CPU and its batch-64 time beside the unoptimized export's.
#   bash tests/gpu/contrib_cuda_check.sh BIN_DIR OUT_DIR
set -uo pipefail
. "$(dirname "$0")/lib.sh"
dir=${CONTRIB_DIR:-build/contrib_models}
{
  SKIP_UNIT=${SKIP_UNIT:-} machine_and_unit_tests "${FILTER:-Passes.Contrib*}"
  [ -d "$dir" ] || python3 tests/gpu/dump_contrib_models.py "$dir" | tail -1
  pass=0; fail=0
  for d in "$dir"/*/; do
    n=$(basename "$d"); args=()
    for f in "$d"*.npy; do args+=(--input "$(basename "$f" .npy)=$f"); done
    for p in "fp32 1e-4" "fp16 2e-2"; do
      set -- $p
      if r=$("$bin/kiln" compare "$d/model.onnx" --device-a cpu --device-b cuda --precision-b "$1" \
             "${args[@]}" --rtol "$2" 2>&1); then pass=$((pass + 1)); else
        fail=$((fail + 1)); echo "FAIL $n $1:"; echo "$r" | tail -4; fi
    done
  done
  echo "== contrib models on CUDA: $pass passed, $fail failed (fp32 and fp16 each)"

  prepare_zoo bert_base
  python3 -m onnxruntime.transformers.optimizer --input build/zoo/bert_base_op17.onnx \
    --output build/zoo/bert_base_ort_op17.onnx --model_type bert --num_heads 12 --hidden_size 768 \
    --opt_level 0 2>&1 | tail -2
  python3 -c "import onnx, collections; m = onnx.load('build/zoo/bert_base_ort_op17.onnx', load_external_data=False); \
print('ORT-optimized ops:', dict(collections.Counter(n.op_type for n in m.graph.node if n.domain == 'com.microsoft')))"
  for m in bert_base bert_base_ort; do
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o /tmp/$m.fp16.kiln --device cuda --precision fp16 -v > "$out/build_$m.txt" 2>&1 ||
      tail -5 "$out/build_$m.txt"
    echo "== $m: $(grep -c 'fused .*attention' "$out/build_$m.txt") attentions fused; fp16 CUDA vs fp32 CPU, batch 1"
    "$bin/kiln" compare build/zoo/${m}_op17.onnx /tmp/$m.fp16.kiln --device-a cpu $(zoo_args bert_base 1) --runs 2 --rtol 5e-2 2>&1 |
      grep -E "relative L2|rror|FAIL|pass"
    for b in 1 64; do
      echo "== $m fp16 batch $b"
      "$bin/kiln" bench /tmp/$m.fp16.kiln $(zoo_args bert_base $b) --device-io -n 200 --warmup 20 2>&1 | grep -iE "median|p50|mean|rror"
    done
  done
} 2>&1 | tee "$out/contrib_cuda_check.log"
