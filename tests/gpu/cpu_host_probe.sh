#!/usr/bin/env bash
# tests/gpu/cpu_host_probe.sh BIN_DIR OUT_DIR — on the device's host CPU (AVX-512), pinned to cores
# 2,3, where one model's time goes ($MODEL, default efficientnet_b0): the kiln command's end-to-end
# median with and without its per-kernel profile (KILN_PROFILE), each runtime alone in its process
# (bench/cpu_alone.py), oneDNN's own per-primitive log (DNNL_VERBOSE: implementation and time), and the
# engine without channels-last (--disable-pass channels-last). Threads $THREADS (default "1 2"). PROBE=threads:
# instead, the kiln command against kiln from Python at 2 threads under several OpenMP policies;
# PROBE=onednn: oneDNN's log alone.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
model=${MODEL:-efficientnet_b0}
HOST_MODELS=$model cpu_host_setup
onnx=build/zoo/${model}_op17.onnx
pin="taskset -c 2,3"
if [ "${PROBE:-}" = threads ]; then
  # The OpenMP side: the same engine under the kiln command and under Python, by thread policy.
  {
    python3 -c 'import kiln, re; print("OpenMP runtimes in a Python process with kiln:", sorted({l.split()[-1] for l in open("/proc/self/maps") if re.search("gomp|iomp", l)}))'
    for env in "" "OMP_PROC_BIND=true OMP_PLACES=cores" "OMP_WAIT_POLICY=ACTIVE" "GOMP_SPINCOUNT=10000000"; do
      for rep in 1 2; do
        echo "== 2 threads, env [$env], kiln command (run $rep)"
        env $env $pin "$bin/kiln" bench "$onnx" --threads 2 -n 150 2>&1 | grep -E "^median"
        echo "== 2 threads, env [$env], kiln from Python (run $rep)"
        env $env $pin python3 bench/cpu_alone.py kiln --models $model --threads 2 --runs 150 | grep -o '"median_ms.*"p90_ms": [0-9.]*'
      done
    done
    echo "== onnxruntime alone, 2 threads"
    $pin python3 bench/cpu_alone.py ort --models $model --threads 2 --runs 150 | grep -o '"median_ms.*"p90_ms": [0-9.]*'
  } 2>&1 | tee "$out/cpu_host_probe_threads.log"
  exit 0
fi
{
  for t in ${THREADS:-1 2}; do
    [ "${PROBE:-}" = onednn ] && break  # PROBE=onednn: oneDNN's log alone
    echo "== threads $t: kiln command, profiled (per-op sums, then the end-to-end median)"
    KILN_PROFILE=1 $pin "$bin/kiln" bench "$onnx" --threads $t -n 150 2>&1 | grep -E "^kiln profile|^  |^median"
    echo "== threads $t: kiln command, not profiled"
    $pin "$bin/kiln" bench "$onnx" --threads $t -n 150 2>&1 | grep -E "^median"
    echo "== threads $t: kiln command, --disable-pass channels-last"
    "$bin/kiln" build "$onnx" -o /tmp/probe_nocl.kiln --disable-pass channels-last -q > /dev/null
    $pin "$bin/kiln" bench /tmp/probe_nocl.kiln --threads $t -n 150 2>&1 | grep -E "^median"
    echo "== threads $t: each runtime alone (bench/cpu_alone.py)"
    $pin python3 bench/cpu_alone.py kiln --models $model --threads $t --runs 100
    $pin python3 bench/cpu_alone.py ort --models $model --threads $t --runs 100
  done
  echo "== oneDNN's per-primitive log, 1 thread (DNNL_VERBOSE=1, 3 timed runs)"
  DNNL_VERBOSE=1 $pin "$bin/kiln" bench "$onnx" --threads 1 -n 3 --warmup 1 > "$out/dnnl_verbose_t1.log" 2>&1 || true
  python3 - "$out/dnnl_verbose_t1.log" <<'PY'
import collections, sys
rows = collections.defaultdict(lambda: [0, 0.0])
for line in open(sys.argv[1]):
    f = line.strip().split(",")
    if len(f) > 4 and f[0].endswith("_verbose") and f[1] == "exec":  # dnnl_verbose or onednn_verbose
        key = (f[3], f[4], f[-2] if len(f) > 8 else "")
        rows[key][0] += 1
        rows[key][1] += float(f[-1])
tot = sum(v[1] for v in rows.values())
print(f"total {tot:.3f} ms in oneDNN primitives (build-time reorders, then 5 executions of each layer)")
for (prim, impl, desc), (n, ms) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:60]:
    print(f"{ms:8.3f} ms x{n:<3} {prim:12s} {impl:28s} {desc}")
PY
} 2>&1 | tee "$out/cpu_host_probe.log"
