#!/usr/bin/env bash
# The GPU-speed figures on a machine with an NVIDIA GPU, from the repository root with the built
# binaries in BIN_DIR:  tests/gpu/bench_run.sh BIN_DIR OUT_DIR
# 1. FP16 engines of ResNet-50, MobileNetV2 and BERT-base: the build's accuracy report, batch 1 and 64
#    times, and batch 64 with the host copies straight through cudaMemcpyAsync (KILN_STAGED_COPIES=0)
#    instead of kiln's pinned staging buffers.
# 2. bench/gpu_bench.py: kiln against PyTorch eager and torch.compile, ResNet-50 and BERT-base, FP32
#    and FP16, batch 1 and 64 (JSON and log per model in OUT_DIR).
set -uo pipefail
. "$(dirname "$0")/lib.sh"
{
  date -u +"%Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  prepare_zoo resnet50 mobilenet_v2 bert_base
  for m in resnet50 mobilenet_v2 bert_base; do
    echo "== $m fp16: the build's accuracy report"
    "$bin/kiln" build build/zoo/${m}_op17.onnx -o "$out/$m.kiln" --device cuda --opt-level 2 --precision fp16 2>&1 |
      grep -A3 "accuracy"
    "$bin/kiln" bench "$out/$m.kiln" $(zoo_args $m 1) -n 50 --warmup 5 2>&1 | grep -E "median|rror" | sed 's/^/b1: /'
    "$bin/kiln" bench "$out/$m.kiln" $(zoo_args $m 64) -n 10 --warmup 3 2>&1 | grep -E "median|rror" | sed 's/^/b64: /'
    KILN_STAGED_COPIES=0 "$bin/kiln" bench "$out/$m.kiln" $(zoo_args $m 64) -n 10 --warmup 3 2>&1 | grep -E "median|rror" |
      sed 's/^/b64, copies not staged: /'
    rm -f "$out/$m.kiln"
  done
} 2>&1 | tee "$out/bench_run.log"
python3 bench/gpu_bench.py --kiln "$bin/kiln" --models resnet50 --compile-modes reduce-overhead --json "$out/gpu_bench_resnet50.json" \
  > "$out/gpu_bench_resnet50.log" 2>&1
python3 bench/gpu_bench.py --kiln "$bin/kiln" --models bert_base --compile-modes default,reduce-overhead --json "$out/gpu_bench_bert_base.json" \
  > "$out/gpu_bench_bert_base.log" 2>&1
tail -n 30 "$out/gpu_bench_resnet50.log" "$out/gpu_bench_bert_base.log"
