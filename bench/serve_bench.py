"""`kiln serve` under load: throughput and p50/p99 latency against the number of requests in flight,
with dynamic batching on and off, over gRPC (or HTTP), next to the same engine called in-process.

    .venv/bin/python bench/serve_bench.py [--model M.onnx] [--device cpu|cuda] [--concurrency 1,4,16,64]
        [--seconds 3] [--max-batch-size 64] [--delay-us 1000] [--protocol grpc|http] [--json out.json]

The model's first input dim must be dynamic (the batch). Two copies of it are served from a temporary
repository: `on` (dynamic_batching with the queue delay) and `off` (the same max_batch_size, each request
run alone). Each level keeps `concurrency` single-item requests in flight (a closed loop of tritonclient
async calls) for `--seconds`; the achieved batch size is inference_count / execution_count from the
server's statistics. In-process: kiln.InferenceSession at batch 1 (latency) and at max_batch_size (the
engine's best throughput). Bounded: every level stops after --seconds, every call has a timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NP_TYPES = {"FP32": np.float32, "FP64": np.float64, "INT64": np.int64, "INT32": np.int32, "FP16": np.float16,
            "INT8": np.int8, "UINT8": np.uint8, "BOOL": np.bool_}


def make_repository(root: str, model: str, device: str, max_batch: int, delay_us: int) -> None:
    kind = "KIND_GPU" if device == "cuda" else "KIND_CPU"
    for name, batching in (("on", f"dynamic_batching {{ max_queue_delay_microseconds: {delay_us} }}\n"), ("off", "")):
        os.makedirs(os.path.join(root, name, "1"))
        shutil.copy(model, os.path.join(root, name, "1", "model.onnx"))
        with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
            f.write(f"max_batch_size: {max_batch}\n{batching}instance_group [ {{ count: 1 kind: {kind} }} ]\n")


def start_server(kiln: str, repo: str) -> tuple[subprocess.Popen, int, int]:
    proc = subprocess.Popen([kiln, "serve", "--model-repository", repo, "--http-port", "0", "--grpc-port", "0",
                             "--metrics-port", "-1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=600)
    m = re.search(r"HTTP on [^:]+:(\d+), gRPC on [^:]+:(\d+)", lines[0] if lines else "")
    if not m:
        proc.kill()
        sys.exit(f"serve_bench: kiln serve did not start: {lines}")
    return proc, int(m.group(1)), int(m.group(2))


def closed_loop(client, lib, model: str, inputs_meta, concurrency: int, seconds: float) -> dict:
    """Keeps `concurrency` requests in flight for `seconds`; returns throughput and latency percentiles.
    `client`: a gRPC client, or for HTTP the server's address (each thread makes its own client)."""
    rng = np.random.default_rng(0)
    arrays = [(m["name"], m["datatype"], rng.standard_normal([1] + [d if d > 0 else 1 for d in m["shape"][1:]])
               .astype(NP_TYPES[m["datatype"]])) for m in inputs_meta]

    def request():
        ins = []
        for name, dtype, a in arrays:
            i = lib.InferInput(name, list(a.shape), dtype)
            i.set_data_from_numpy(a)
            ins.append(i)
        return ins

    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    if not lib.__name__.endswith("grpc"):
        # HTTP: one thread per request in flight, each with its own client (sync calls; the client's
        # gevent-based async calls measured the client, not the server).
        lock = threading.Lock()

        def worker():
            nonlocal errors
            c = lib.InferenceServerClient(client, network_timeout=60)
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                try:
                    c.infer(model, request())
                    with lock:
                        latencies.append(time.perf_counter() - t0)
                except Exception as e:  # noqa: BLE001
                    with lock:
                        errors += 1
                        if errors == 1:
                            print(f"  first error: {str(e)[:200]}", flush=True)
            c.close()

        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=seconds + 120)
    else:
        done: queue.Queue = queue.Queue()

        def send():
            t0 = time.perf_counter()
            client.async_infer(model, request(), lambda result, error: done.put((t0, error)), client_timeout=60)

        for _ in range(concurrency):
            send()
        in_flight = concurrency
        while in_flight:
            t0, err = done.get(timeout=120)
            in_flight -= 1
            if err is not None:
                errors += 1
                if errors == 1:
                    print(f"  first error: {str(err)[:200]}", flush=True)
            else:
                latencies.append(time.perf_counter() - t0)
            if time.perf_counter() < deadline:
                send()
                in_flight += 1
    wall = time.perf_counter() - start
    lat = np.array(latencies) * 1e3
    return {"requests": len(latencies), "errors": errors, "throughput_per_s": len(latencies) / wall,
            "p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99))}


def in_process(model: str, device: str, max_batch: int, seconds: float) -> dict:
    import kiln  # noqa: PLC0415

    providers = ["CUDAExecutionProvider"] if device == "cuda" else ["CPUExecutionProvider"]
    sess = kiln.InferenceSession(model, providers=providers)
    out = {}
    for batch in (1, max_batch):
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal([batch] + [d if isinstance(d, int) and d > 0 else 1 for d in i.shape[1:]])
                 .astype(np.float32) for i in sess.get_inputs()}
        sess.run(None, feeds)
        times = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            sess.run(None, feeds)
            times.append(time.perf_counter() - t0)
        t = np.array(times) * 1e3
        out[f"batch{batch}"] = {"runs": len(times), "items_per_s": batch * len(times) / (t.sum() / 1e3),
                                "p50_ms": float(np.percentile(t, 50)), "p99_ms": float(np.percentile(t, 99))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(REPO, "examples", "tiny_cnn.onnx"))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--max-batch-size", type=int, default=64)
    ap.add_argument("--delay-us", type=int, default=1000)
    ap.add_argument("--protocol", default="grpc", choices=["grpc", "http"])
    ap.add_argument("--kiln", default=os.path.join(REPO, "build", "kiln"))
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.protocol == "grpc":
        import tritonclient.grpc as lib  # noqa: PLC0415
    else:
        import tritonclient.http as lib  # noqa: PLC0415

    levels = [int(c) for c in a.concurrency.split(",")]
    root = tempfile.mkdtemp(prefix="kiln_serve_bench_")
    try:
        make_repository(root, a.model, a.device, a.max_batch_size, a.delay_us)
        proc, http_port, grpc_port = start_server(a.kiln, root)
        try:
            url = f"127.0.0.1:{grpc_port if a.protocol == 'grpc' else http_port}"
            client = lib.InferenceServerClient(url)
            target = client if a.protocol == "grpc" else url
            meta = client.get_model_metadata("on") if a.protocol == "http" else client.get_model_metadata("on", as_json=True)
            inputs_meta = [{"name": m["name"], "datatype": m["datatype"], "shape": [int(d) for d in m["shape"]]}
                           for m in meta["inputs"]]
            rows = []
            for model in ("off", "on"):
                closed_loop(target, lib, model, inputs_meta, 1, min(1.0, a.seconds))  # warm-up
                for c in levels:
                    stats = (client.get_inference_statistics(model) if a.protocol == "http"
                             else client.get_inference_statistics(model, as_json=True))["model_stats"][0]
                    i0, e0 = int(stats.get("inference_count", 0)), int(stats.get("execution_count", 0))
                    r = closed_loop(target, lib, model, inputs_meta, c, a.seconds)
                    stats = (client.get_inference_statistics(model) if a.protocol == "http"
                             else client.get_inference_statistics(model, as_json=True))["model_stats"][0]
                    di, de = int(stats["inference_count"]) - i0, int(stats["execution_count"]) - e0
                    r.update({"batching": model, "concurrency": c, "achieved_batch": di / de if de else 0.0})
                    rows.append(r)
                    print(f"batching {model:3} concurrency {c:4}: {r['throughput_per_s']:9.1f} req/s  "
                          f"p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  batch {r['achieved_batch']:5.2f}  "
                          f"errors {r['errors']}", flush=True)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        local = in_process(a.model, a.device, a.max_batch_size, a.seconds)
        for k, v in local.items():
            print(f"in-process {k}: {v['items_per_s']:9.1f} items/s  p50 {v['p50_ms']:7.3f} ms  p99 {v['p99_ms']:7.3f} ms")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": os.path.basename(a.model), "device": a.device, "protocol": a.protocol,
                       "seconds_per_level": a.seconds, "max_batch_size": a.max_batch_size, "delay_us": a.delay_us,
                       "cpus": os.cpu_count(), "serve": rows, "in_process": local}, f, indent=1)


if __name__ == "__main__":
    main()
