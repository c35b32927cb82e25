"""kiln.ray_serve on a local Ray (2 CPUs): the bundled example model on the CPU with 2 replicas, concurrent
requests through a DeploymentHandle and over HTTP (KServe v2 JSON on 127.0.0.1) with random batch sizes,
each checked against a direct kiln run; the replicas' counters show requests were merged; malformed
HTTP requests get 400. Not run by CI (Ray is large): scripts/setup_ray.sh makes .venv-ray, then

    .venv-ray/bin/python -m pytest -q tests/ray        # -s also prints the measured requests/s

Every wait is bounded (handle results, HTTP requests, thread pools)."""

from __future__ import annotations

import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

ray = pytest.importorskip("ray")
requests = pytest.importorskip("requests")
from ray import serve  # noqa: E402

import kiln  # noqa: E402
import kiln.ray_serve  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(REPO, "examples", "tiny_cnn.onnx")
TIMEOUT_S = 60
HANDLE_REQUESTS, HTTP_REQUESTS = 64, 16


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served():
    """(handle, HTTP base URL) of the example model on 2 CPU replicas; Serve and Ray shut down after."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # Two replicas of one CPU each (Serve's default), each running the engine on one thread.
        handle = serve.run(kiln.ray_serve.app(MODEL, num_replicas=2, threads=1),
                           name="kiln", route_prefix="/")
        yield handle, f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


@pytest.fixture(scope="module")
def reference():
    sess = kiln.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"image": x})[0]


def images(n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((int(rng.integers(1, 5)), 3, 32, 32)).astype(np.float32) for _ in range(n)]


def replica_stats(handle) -> list[dict]:
    """Every replica's counters: stats() goes to one replica per call, so call until both answered."""
    seen: dict[str, dict] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < 2 and time.monotonic() < deadline:
        s = handle.stats.remote().result(timeout_s=TIMEOUT_S)
        seen[s["replica"]] = s
    return list(seen.values())


def post(url: str, body, timeout=TIMEOUT_S):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(url, data=data, headers={"Content-Type": "application/json"}, timeout=timeout)


def v2_body(x: np.ndarray, name="image", datatype="FP32") -> dict:
    return {"inputs": [{"name": name, "shape": list(x.shape), "datatype": datatype, "data": x.ravel().tolist()}]}


def test_handle_requests_are_batched_and_match_a_direct_run(served, reference):
    handle, _ = served
    xs = images(HANDLE_REQUESTS, seed=1)
    before = replica_stats(handle)
    with ThreadPoolExecutor(max_workers=HANDLE_REQUESTS) as pool:
        futures = [pool.submit(lambda x: handle.remote({"image": x}).result(timeout_s=TIMEOUT_S), x) for x in xs]
        results = [f.result(timeout=TIMEOUT_S) for f in futures]
    for x, out in zip(xs, results):
        assert set(out) == {"probabilities"}
        np.testing.assert_allclose(out["probabilities"], reference(x), rtol=1e-5, atol=1e-7)
    after = replica_stats(handle)
    assert len(after) == 2, "both replicas should answer stats()"
    served_requests = sum(s["requests"] for s in after) - sum(s["requests"] for s in before)
    runs = sum(s["runs"] for s in after) - sum(s["runs"] for s in before)
    rows = sum(s["rows"] for s in after) - sum(s["rows"] for s in before)
    assert served_requests == HANDLE_REQUESTS
    assert rows == sum(x.shape[0] for x in xs)
    assert runs < HANDLE_REQUESTS, f"{HANDLE_REQUESTS} requests took {runs} engine runs: nothing was batched"
    assert all(s["requests"] > 0 for s in after), f"a replica served nothing: {after}"


def test_http_requests_match_a_direct_run(served, reference):
    _, base = served
    xs = images(HTTP_REQUESTS, seed=2)
    url = f"{base}/v2/models/tiny_cnn/infer"
    with ThreadPoolExecutor(max_workers=HTTP_REQUESTS) as pool:
        responses = list(pool.map(lambda x: post(url, v2_body(x)), xs, timeout=TIMEOUT_S))
    for x, r in zip(xs, responses):
        assert r.status_code == 200, r.text
        (out,) = r.json()["outputs"]
        assert out["name"] == "probabilities" and out["datatype"] == "FP32" and out["shape"] == [x.shape[0], 10]
        got = np.asarray(out["data"], dtype=np.float32).reshape(out["shape"])
        np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-7)


def test_http_metadata_and_health(served):
    _, base = served
    assert requests.get(f"{base}/v2/health/ready", timeout=TIMEOUT_S).status_code == 200
    meta = requests.get(f"{base}/v2/models/tiny_cnn", timeout=TIMEOUT_S).json()
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert requests.get(f"{base}/v2/models/other/infer", timeout=TIMEOUT_S).status_code == 404


def test_malformed_http_requests_get_400(served, reference):
    _, base = served
    url = f"{base}/v2/models/tiny_cnn/infer"
    x = images(1, seed=3)[0]
    good = v2_body(x)
    bad = {
        "not JSON": b"{inputs: [",
        "not an object": [1, 2],
        "no inputs": {"outputs": []},
        "unknown input": v2_body(x, name="picture"),
        "wrong datatype": v2_body(x.astype(np.int64), datatype="INT64"),
        "unknown datatype": v2_body(x, datatype="FP128"),
        "wrong rank": v2_body(x.reshape(x.shape[0], 3, 1024)),
        "wrong dim": v2_body(np.zeros((1, 3, 16, 16), np.float32)),
        "count vs shape": {"inputs": [{**good["inputs"][0], "shape": [x.shape[0], 3, 32, 33]}]},
        "negative dim": {"inputs": [{**good["inputs"][0], "shape": [-1, 3, 32, 32]}]},
        "strings as data": {"inputs": [{**good["inputs"][0], "data": ["a"] * x.size}]},
        "ragged data": {"inputs": [{**good["inputs"][0], "data": [[1.0], [1.0, 2.0]]}]},
        "unknown output": {**good, "outputs": [{"name": "logits"}]},
    }
    for what, body in bad.items():
        r = post(url, body)
        assert r.status_code == 400, f"{what}: {r.status_code} {r.text}"
        assert r.json()["error"], what
    r = post(url, good)  # the replicas still serve
    assert r.status_code == 200
    got = np.asarray(r.json()["outputs"][0]["data"], dtype=np.float32).reshape(x.shape[0], 10)
    np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-7)


def test_handle_errors_name_the_problem(served):
    handle, _ = served
    with pytest.raises(kiln.ray_serve.RequestError, match="unknown input 'picture'"):
        handle.remote({"picture": np.zeros((1, 3, 32, 32), np.float32)}).result(timeout_s=TIMEOUT_S)
    with pytest.raises(kiln.ray_serve.RequestError, match="float32 in the model, got float64"):
        handle.remote({"image": np.zeros((1, 3, 32, 32))}).result(timeout_s=TIMEOUT_S)


def test_throughput_through_the_handle_vs_direct_runs(served, reference):
    """Not a target, a measurement (printed with -s): single-image requests through the handle from 32
    threads vs the same images run one by one in this process."""
    handle, _ = served
    n = 256
    x = images(1, seed=4)[0][:1]
    t0 = time.perf_counter()
    for _ in range(n):
        reference(x)
    direct = n / (time.perf_counter() - t0)
    before = replica_stats(handle)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=32) as pool:
        futures = [pool.submit(lambda: handle.remote({"image": x}).result(timeout_s=TIMEOUT_S)) for _ in range(n)]
        for f in futures:
            f.result(timeout=TIMEOUT_S)
    through = n / (time.perf_counter() - t0)
    after = replica_stats(handle)
    runs = sum(s["runs"] for s in after) - sum(s["runs"] for s in before)
    print(f"\nray_serve: {n} single-image requests: handle {through:.0f} req/s (32 threads, 2 replicas, "
          f"{n / max(runs, 1):.1f} requests per engine run); direct runs in-process {direct:.0f} req/s")
    assert runs <= n
