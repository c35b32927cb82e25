"""`kiln serve` against a real client nobody here wrote (tritonclient from PyPI, HTTP and gRPC): health,
metadata, config, JSON, binary and raw tensors, async requests merged by the dynamic batcher,
statistics, metrics, repository load/unload, a set of malformed requests, and SIGTERM draining the
requests in flight.

Every wait is bounded: the server's ready line, each request (network_timeout) and each process exit."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import threading
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# KILN_CLI: another kiln to serve with (scripts/sanitize.sh runs this file against its ASan + UBSan
# build: a sanitizer report in the server's stderr then fails the test that stops it).
KILN = os.environ.get("KILN_CLI") or os.path.join(REPO, "build", "kiln")
SANITIZER_REPORT = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:")
EXAMPLE = os.path.join(REPO, "examples", "tiny_cnn.onnx")
EXAMPLE_INPUT = os.path.join(REPO, "examples", "tiny_cnn_input.npy")

ADDMUL_CONFIG = """
name: "addmul"
backend: "kiln"
max_batch_size: 16
input [
  { name: "x" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "sum" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "product" data_type: TYPE_FP32 dims: [ 4 ] }
]
dynamic_batching {
  max_queue_delay_microseconds: 30000
  default_queue_policy { max_queue_size: 64 }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "precision" value: { string_value: "fp32" } }
"""

RESHAPED_CONFIG = """
max_batch_size: 4
input [
  { name: "x" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } },
  { name: "y" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [ { name: "sum" data_type: TYPE_FP32 dims: [ 2, 2 ] reshape: { shape: [ 4 ] } } ]
"""


def addmul_model() -> onnx.ModelProto:
    """sum = x + y, product = x * y over [batch, 4] float32."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    s = helper.make_tensor_value_info("sum", TensorProto.FLOAT, ["batch", 4])
    p = helper.make_tensor_value_info("product", TensorProto.FLOAT, ["batch", 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["sum"]), helper.make_node("Mul", ["x", "y"], ["product"])],
                              "addmul", [x, y], [s, p])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def make_repository(root) -> str:
    repo = os.path.join(root, "models")
    os.makedirs(os.path.join(repo, "tiny_cnn", "1"))  # no config.pbtxt: derived from the model
    shutil.copy(EXAMPLE, os.path.join(repo, "tiny_cnn", "1", "model.onnx"))
    os.makedirs(os.path.join(repo, "addmul", "1"))
    onnx.save(addmul_model(), os.path.join(repo, "addmul", "1", "model.onnx"))
    with open(os.path.join(repo, "addmul", "config.pbtxt"), "w") as f:
        f.write(ADDMUL_CONFIG)
    os.makedirs(os.path.join(repo, "reshaped", "1"))  # the request's dims differ from the model's
    onnx.save(addmul_model(), os.path.join(repo, "reshaped", "1", "model.onnx"))
    with open(os.path.join(repo, "reshaped", "config.pbtxt"), "w") as f:
        f.write(RESHAPED_CONFIG)
    os.makedirs(os.path.join(repo, "dyn", "1"))  # no config, a dynamic second dim: requests choose its size
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "n"])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "dyn", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), os.path.join(repo, "dyn", "1", "model.onnx"))
    os.makedirs(os.path.join(repo, "broken", "1"))  # a config with a field kiln does not know
    onnx.save(addmul_model(), os.path.join(repo, "broken", "1", "model.onnx"))
    with open(os.path.join(repo, "broken", "config.pbtxt"), "w") as f:
        f.write('max_batch_size: 4\nsequence_batching { }\n')
    return repo


class Server:
    """`kiln serve` on 127.0.0.1 with free ports, started and waited for (its ready line), bounded."""

    def __init__(self, repo: str, *args: str):
        self.proc = subprocess.Popen([KILN, "serve", "--model-repository", repo, "--http-port", "0",
                                      "--grpc-port", "0", "--metrics-port", "0", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr: list[str] = []
        self.stderr_reader = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)
        self.stderr_reader.start()
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=60)
        m = re.search(r"ready: HTTP on 127\.0\.0\.1:(\d+), gRPC on 127\.0\.0\.1:(\d+), metrics on 127\.0\.0\.1:(\d+)",
                      lines[0] if lines else "")
        if not m:
            self.stop()
            raise AssertionError(f"no ready line: {lines} {''.join(self.stderr)}")
        self.port, self.grpc_port, self.metrics_port = int(m.group(1)), int(m.group(2)), int(m.group(3))
        self.url = f"127.0.0.1:{self.port}"

    def grpc(self):
        return grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")

    def client(self, concurrency: int = 1):
        return httpclient.InferenceServerClient(self.url, concurrency=concurrency, connection_timeout=10,
                                                network_timeout=30)

    def raw(self, method: str, path: str, body: bytes | str = b"", headers: dict | None = None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise
        self.stderr_reader.join(timeout=10)
        report = "".join(self.stderr)
        assert not SANITIZER_REPORT.search(report), f"the server's sanitizer report:\n{report[-6000:]}"
        return rc


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return make_repository(str(tmp_path_factory.mktemp("serve")))


@pytest.fixture(scope="module")
def server(repo):
    s = Server(repo, "--max-body-bytes", "1000000")
    yield s
    s.stop()


def addmul_inputs(x, y, binary: bool):
    inputs = [httpclient.InferInput("x", list(x.shape), "FP32"), httpclient.InferInput("y", list(y.shape), "FP32")]
    inputs[0].set_data_from_numpy(x, binary_data=binary)
    inputs[1].set_data_from_numpy(y, binary_data=binary)
    return inputs


def test_health_and_metadata(server):
    c = server.client()
    # Not ready: 'broken' failed to load (strict readiness, Triton's default; test_readiness_follows_the_models).
    assert c.is_server_live() and not c.is_server_ready()
    assert c.is_model_ready("tiny_cnn") and c.is_model_ready("addmul", "1")
    assert not c.is_model_ready("broken") and not c.is_model_ready("nope")
    meta = c.get_server_metadata()
    assert meta["name"] == "kiln" and "binary_tensor_data" in meta["extensions"], meta
    m = c.get_model_metadata("tiny_cnn")
    assert m["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 3, 32, 32]}], m
    assert m["outputs"] == [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]}], m
    assert m["versions"] == ["1"]


def test_model_config(server):
    c = server.client()
    cfg = c.get_model_config("addmul")
    assert cfg["max_batch_size"] == 16 and cfg["dynamic_batching"]["max_queue_delay_microseconds"] == 30000, cfg
    assert cfg["instance_group"][0]["count"] == 2 and cfg["instance_group"][0]["kind"] == "KIND_CPU", cfg
    assert [i["name"] for i in cfg["input"]] == ["x", "y"] and cfg["input"][0]["data_type"] == "TYPE_FP32", cfg
    derived = c.get_model_config("tiny_cnn")  # no config.pbtxt: dynamic batch dim → batching by default
    assert derived["max_batch_size"] == 8 and "dynamic_batching" in derived, derived
    assert derived["input"][0]["dims"] == [3, 32, 32], derived


def test_infer_json_and_binary_match_the_session(server):
    import kiln  # noqa: PLC0415

    image = np.load(EXAMPLE_INPUT).astype(np.float32)
    if image.ndim == 3:
        image = image[None]
    batch = np.concatenate([image, image * 0.5], axis=0)
    expected = kiln.InferenceSession(EXAMPLE).run(None, {"image": batch})[0]
    c = server.client()
    for binary in (False, True):
        inp = httpclient.InferInput("image", list(batch.shape), "FP32")
        inp.set_data_from_numpy(batch, binary_data=binary)
        out = httpclient.InferRequestedOutput("probabilities", binary_data=binary)
        r = c.infer("tiny_cnn", [inp], outputs=[out], request_id="req-1")
        np.testing.assert_allclose(r.as_numpy("probabilities"), expected, rtol=1e-5, atol=1e-6)
        assert r.get_response()["id"] == "req-1" and r.get_response()["model_version"] == "1"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y = np.full((2, 4), 3, dtype=np.float32)
    r = c.infer("addmul", addmul_inputs(x, y, binary=False))  # both outputs, as JSON
    np.testing.assert_array_equal(r.as_numpy("sum"), x + y)
    np.testing.assert_array_equal(r.as_numpy("product"), x * y)


def test_reshape(server):
    c = server.client()
    x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    y = np.ones((2, 4), np.float32)
    inputs = [httpclient.InferInput("x", [2, 2, 2], "FP32"), httpclient.InferInput("y", [2, 4], "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    r = c.infer("reshaped", inputs, outputs=[httpclient.InferRequestedOutput("sum")])
    np.testing.assert_array_equal(r.as_numpy("sum"), x + y.reshape(2, 2, 2))
    assert c.get_model_metadata("reshaped")["inputs"][0]["shape"] == [-1, 2, 2]


def _addmul_counts(c):
    s = c.get_inference_statistics("addmul")["model_stats"][0]
    return s["inference_count"], s["execution_count"]


def test_achieved_batch_size_grows_with_concurrency(server):
    """A bounded load: 6 requests one at a time, then 24 at once; inferences per execution grow."""
    c = server.client(concurrency=24)
    x = np.ones((1, 4), np.float32)
    achieved = []
    for concurrency in (1, 24):
        i0, e0 = _addmul_counts(c)
        for _ in range(24 // concurrency if concurrency > 1 else 6):
            pending = [c.async_infer("addmul", addmul_inputs(x, x, binary=True)) for _ in range(concurrency)]
            for p in pending:
                np.testing.assert_array_equal(p.get_result(timeout=30).as_numpy("sum"), x + x)
        i1, e1 = _addmul_counts(c)
        achieved.append((i1 - i0) / (e1 - e0))
    assert achieved[0] == 1.0 and achieved[1] > 2.0, achieved
    c.close()


def test_async_requests_are_batched(server):
    n = 24
    c = server.client(concurrency=n)
    before = c.get_inference_statistics("addmul")["model_stats"][0]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(n)]
    ys = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(n)]
    pending = [c.async_infer("addmul", addmul_inputs(xs[i], ys[i], binary=i % 2 == 0)) for i in range(n)]
    for i, p in enumerate(pending):
        r = p.get_result(timeout=30)
        np.testing.assert_array_equal(r.as_numpy("sum"), xs[i] + ys[i])
        np.testing.assert_array_equal(r.as_numpy("product"), xs[i] * ys[i])
    after = c.get_inference_statistics("addmul")["model_stats"][0]
    inferences = after["inference_count"] - before["inference_count"]
    executions = after["execution_count"] - before["execution_count"]
    assert inferences == n, after
    assert executions < inferences, f"no batching: {executions} runs for {inferences} requests"
    sizes = {b["batch_size"] for b in after["batch_stats"]}
    assert max(sizes) > 1 and max(sizes) <= 16, after["batch_stats"]
    stats = after["inference_stats"]
    assert stats["success"]["count"] >= n and stats["queue"]["count"] >= n, stats
    c.close()


def test_statistics_and_metrics(server):
    c = server.client()
    all_stats = c.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in all_stats} == {"addmul", "dyn", "reshaped", "tiny_cnn"}, all_stats
    conn = http.client.HTTPConnection("127.0.0.1", server.metrics_port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    for name in ("nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
                 "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                 "nv_inference_compute_infer_duration_us"):
        assert f"# TYPE {name} counter" in text, name
    m = re.search(r'^nv_inference_count\{model="addmul",version="1"\} (\d+)$', text, re.M)
    e = re.search(r'^nv_inference_exec_count\{model="addmul",version="1"\} (\d+)$', text, re.M)
    assert m and e and int(e.group(1)) <= int(m.group(1)), text


def test_repository_index_load_unload(server, repo):
    c = server.client()
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["addmul"]["state"] == "READY" and index["tiny_cnn"]["state"] == "READY", index
    # The broken model's reason names the file, the line and the unknown field.
    reason = index["broken"]["reason"]
    assert index["broken"]["state"] == "UNAVAILABLE" and "config.pbtxt:2:" in reason and "sequence_batching" in reason, reason
    c.unload_model("tiny_cnn")
    assert not c.is_model_ready("tiny_cnn")
    image = httpclient.InferInput("image", [1, 3, 32, 32], "FP32")
    image.set_data_from_numpy(np.zeros((1, 3, 32, 32), np.float32))
    with pytest.raises(InferenceServerException, match="tiny_cnn"):
        c.infer("tiny_cnn", [image])
    t0 = time.monotonic()
    c.load_model("tiny_cnn")  # from the engine cached beside the model
    assert c.is_model_ready("tiny_cnn")
    assert time.monotonic() - t0 < 10
    cached = [f for f in os.listdir(os.path.join(repo, "tiny_cnn", "1")) if re.fullmatch(r"model\.[0-9a-f]{16}\.kiln", f)]
    assert len(cached) == 1, os.listdir(os.path.join(repo, "tiny_cnn", "1"))
    with pytest.raises(InferenceServerException, match="no model 'nope'"):
        c.load_model("nope")


def test_readiness_follows_the_models(tmp_path):
    """Strict readiness (the default, as Triton's): ready while no model failed to load, over HTTP and
    gRPC alike; unloading the failed model makes the server ready, loading it again (still broken) not.
    --strict-readiness false: ready whenever the server is up."""
    repo = make_repository(str(tmp_path))
    shutil.rmtree(os.path.join(repo, "tiny_cnn"))
    s = Server(repo)
    try:
        h, g = s.client(), s.grpc()
        assert not h.is_server_ready() and not g.is_server_ready()
        h.unload_model("broken")
        assert h.is_server_ready() and g.is_server_ready()
        with pytest.raises(InferenceServerException, match="sequence_batching"):
            h.load_model("broken")
        assert not h.is_server_ready() and not g.is_server_ready()
        g.close()
    finally:
        assert s.stop() == 0
    s = Server(repo, "--strict-readiness", "false")
    try:
        assert s.client().is_server_ready()
    finally:
        assert s.stop() == 0


def test_version_folders_are_plain_numbers(tmp_path):
    """'1' and '001' would both be version 1: a folder with leading zeros is skipped (logged), so the
    model serves version 1 from '1'; a model with only '007' has no version."""
    repo = str(tmp_path)
    for model, folders in (("a", ("1", "001")), ("b", ("007",))):
        for f in folders:
            os.makedirs(os.path.join(repo, model, f))
            onnx.save(addmul_model(), os.path.join(repo, model, f, "model.onnx"))
    s = Server(repo)
    try:
        index = {(m["name"], m.get("version", "")): m for m in s.client().get_model_repository_index()}
        assert index[("a", "1")]["state"] == "READY", index
        assert [k for k in index if k[0] == "a"] == [("a", "1")], index
        assert index[("b", "")]["state"] == "UNAVAILABLE" and "no version folder" in index[("b", "")]["reason"], index
    finally:
        assert s.stop() == 0
    log = "".join(s.stderr)
    assert "version folder '001' skipped" in log and "version folder '007' skipped" in log, log


def _binary_request(header: dict, tail: bytes):
    head = json.dumps(header).encode()
    return head + tail, {"Inference-Header-Content-Length": str(len(head)), "Content-Type": "application/octet-stream"}


def test_malformed_requests_are_refused_with_a_message(server):
    url = "/v2/models/addmul/infer"
    good_input = {"name": "y", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}

    def infer_json(x_input):
        return server.raw("POST", url, json.dumps({"inputs": [x_input, good_input]}))

    cases = {
        "bad JSON": (server.raw("POST", url, "{not json"), 400, "not valid JSON"),
        "no inputs": (server.raw("POST", url, "{}"), 400, "inputs"),
        "wrong dtype": (infer_json({"name": "x", "shape": [1, 4], "datatype": "INT64", "data": [1, 2, 3, 4]}), 400,
                        "datatype INT64"),
        "wrong shape": (infer_json({"name": "x", "shape": [1, 5], "datatype": "FP32", "data": [1, 2, 3, 4, 5]}), 400,
                        "does not fit"),
        "too few elements": (infer_json({"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, 2]}), 400,
                             "needs 4"),
        "string element": (infer_json({"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [1, "a", 3, 4]}),
                           400, "not a number"),
        "batch over max_batch_size": (infer_json({"name": "x", "shape": [17, 4], "datatype": "FP32",
                                                  "data": [0] * 68}), 400, "max_batch_size"),
        "unknown input": (infer_json({"name": "z", "shape": [1, 4], "datatype": "FP32", "data": [1, 2, 3, 4]}), 400,
                          "unknown input 'z'"),
        "unknown model": (server.raw("POST", "/v2/models/nope/infer", "{}"), 404, "unknown model 'nope'"),
        "unknown route": (server.raw("GET", "/v2/nothing"), 404, "no route"),
        "truncated binary": (server.raw("POST", url, *_binary_request(
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 16}},
                        good_input]}, struct.pack("<2f", 1, 2))), 400, "truncated"),
        "binary size not the shape's": (server.raw("POST", url, *_binary_request(
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
                        good_input]}, struct.pack("<2f", 1, 2))), 400, "binary_data_size 8"),
        "header length over the body": (server.raw("POST", url, b"{}", {"Inference-Header-Content-Length": "99999999"}),
                                        400, "larger than the body"),
        "header length not a number": (server.raw("POST", url, b"{}", {"Inference-Header-Content-Length": "-5"}),
                                       400, "not a byte count"),
        "data nested 100000 deep": (server.raw("POST", url, '{"inputs": [{"name": "x", "shape": [1, 4], "datatype": '
                                               '"FP32", "data": ' + "[" * 100000 + "]" * 100000 + "}]}"), 400, "nested too deeply"),
        "an object nested 100000 deep as an element": (server.raw("POST", url, '{"inputs": [{"name": "x", "shape": [1, 4], '
                                                                 '"datatype": "FP32", "data": [' + '{"a":' * 100000 + "1" +
                                                                 "}" * 100000 + ", 2, 3, 4]}]}"), 400, "an object"),
        "huge declared shape": (infer_json({"name": "x", "shape": [1, 2**62], "datatype": "FP32",
                                            "parameters": {"binary_data_size": 16}}), 400, "x"),
        "huge binary size": (server.raw("POST", url, *_binary_request(
            {"inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32",
                         "parameters": {"binary_data_size": 2**63}}, good_input]}, b"")), 400, "binary_data_size"),
    }
    cases["body over --max-body-bytes"] = (server.raw("POST", url, b" " * 1_500_000), 413, "larger than the server's limit")
    for what, ((status, body), want_status, want_text) in cases.items():
        assert status == want_status, (what, status, body)
        message = json.loads(body)["error"]
        assert want_text in message, (what, message)
    c = server.client()
    assert c.is_server_live() and c.is_model_ready("addmul")
    failures = c.get_inference_statistics("addmul")["model_stats"][0]["inference_stats"]["fail"]["count"]
    assert failures >= 10


def test_hostile_requests_found_in_review(server):
    """Requests that crashed, pinned memory or overflowed before: a path that is not UTF-8 (its error
    message used to throw outside the handlers), parameters nested 30,000 deep (a recursive copy), a
    small body declaring a 2 GB tensor (allocated before the body was looked at), and a timeout of
    2^64 - 1 microseconds (clock overflow: refused at once as timed out)."""
    status, body = server.raw("GET", "/%C3%28")
    assert status == 404 and "no route" in json.loads(body)["error"], body
    deep = '{"parameters": {"x": ' + "[" * 30000 + "]" * 30000 + '}, "inputs": []}'
    status, body = server.raw("POST", "/v2/models/addmul/infer", deep)
    assert status == 400 and "is missing" in json.loads(body)["error"], body
    t0 = time.monotonic()
    status, body = server.raw("POST", "/v2/models/dyn/infer",
                              json.dumps({"inputs": [{"name": "x", "shape": [1, 500_000_000], "datatype": "FP32", "data": []}]}))
    message = json.loads(body)["error"]
    assert status == 400 and ("more than the request carries" in message or "limit" in message), message
    assert time.monotonic() - t0 < 5
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 3
    status, body = server.raw("POST", "/v2/models/dyn/infer",
                              json.dumps({"parameters": {"timeout": 2**64 - 1},
                                          "inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32",
                                                      "data": x.ravel().tolist()}]}))
    assert status == 200, body
    np.testing.assert_array_equal(np.array(json.loads(body)["outputs"][0]["data"], np.float32), np.maximum(x, 0).ravel())
    c = server.grpc()
    i8 = [grpcclient.InferInput("x", [1, 4], "FP32")]
    i8[0].set_data_from_numpy(np.ones((1, 4), np.float32))
    assert c.infer("dyn", i8, client_timeout=30).as_numpy("y").shape == (1, 4)
    c.close()
    assert server.client().is_server_live()


def grpc_addmul_inputs(x, y):
    inputs = [grpcclient.InferInput("x", list(x.shape), "FP32"), grpcclient.InferInput("y", list(y.shape), "FP32")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(y)
    return inputs


def test_grpc_health_metadata_config(server):
    c = server.grpc()
    assert c.is_server_live() and not c.is_server_ready()  # as HTTP's: 'broken' failed to load
    assert c.is_model_ready("tiny_cnn") and not c.is_model_ready("nope")
    assert c.get_server_metadata(as_json=True)["name"] == "kiln"
    m = c.get_model_metadata("tiny_cnn", as_json=True)
    assert m["inputs"] == [{"name": "image", "datatype": "FP32", "shape": ["-1", "3", "32", "32"]}], m
    cfg = c.get_model_config("addmul", as_json=True)["config"]
    assert cfg["max_batch_size"] == 16 and cfg["dynamic_batching"]["max_queue_delay_microseconds"] == "30000", cfg
    assert cfg["input"][0] == {"name": "x", "data_type": "TYPE_FP32", "dims": ["4"]}, cfg
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU" and cfg["instance_group"][0]["count"] == 2, cfg
    index = {m["name"]: m for m in c.get_model_repository_index(as_json=True)["models"]}
    assert index["addmul"]["state"] == "READY" and index["broken"]["state"] == "UNAVAILABLE", index
    c.close()


def test_grpc_infer_raw_and_async_batching(server):
    import queue  # noqa: PLC0415

    import kiln  # noqa: PLC0415

    image = np.load(EXAMPLE_INPUT).astype(np.float32)
    if image.ndim == 3:
        image = image[None]
    expected = kiln.InferenceSession(EXAMPLE).run(None, {"image": image})[0]
    c = server.grpc()
    inp = grpcclient.InferInput("image", list(image.shape), "FP32")
    inp.set_data_from_numpy(image)
    r = c.infer("tiny_cnn", [inp], outputs=[grpcclient.InferRequestedOutput("probabilities")], request_id="g1",
                client_timeout=30)
    np.testing.assert_allclose(r.as_numpy("probabilities"), expected, rtol=1e-5, atol=1e-6)
    assert r.get_response().id == "g1"

    n = 16
    before = c.get_inference_statistics("addmul", as_json=True)["model_stats"][0]
    done: queue.Queue = queue.Queue()
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(n)]
    for i in range(n):
        c.async_infer("addmul", grpc_addmul_inputs(xs[i], xs[i]), lambda result, error, i=i: done.put((i, result, error)),
                      client_timeout=30)
    for _ in range(n):
        i, result, error = done.get(timeout=30)
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("sum"), xs[i] + xs[i])
        np.testing.assert_array_equal(result.as_numpy("product"), xs[i] * xs[i])
    after = c.get_inference_statistics("addmul", as_json=True)["model_stats"][0]
    inferences = int(after["inference_count"]) - int(before.get("inference_count", 0))
    executions = int(after["execution_count"]) - int(before.get("execution_count", 0))
    assert inferences == n and executions < inferences, (before, after)
    c.close()


def test_grpc_errors_and_repository(server):
    c = server.grpc()
    x = np.ones((1, 4), np.float32)
    cases = [
        ("nope", grpc_addmul_inputs(x, x), "NOT_FOUND", "unknown model 'nope'"),
        ("addmul", [grpcclient.InferInput("x", [1, 4], "INT32"), grpcclient.InferInput("y", [1, 4], "FP32")],
         "INVALID_ARGUMENT", "datatype INT32"),
        ("addmul", grpc_addmul_inputs(np.ones((1, 5), np.float32), np.ones((1, 5), np.float32)), "INVALID_ARGUMENT",
         "does not fit"),
        ("addmul", grpc_addmul_inputs(np.ones((17, 4), np.float32), np.ones((17, 4), np.float32)), "INVALID_ARGUMENT",
         "max_batch_size"),
        ("addmul", grpc_addmul_inputs(x, x)[:1], "INVALID_ARGUMENT", "input 'y' is missing"),
    ]
    cases[1][1][0].set_data_from_numpy(np.ones((1, 4), np.int32))
    cases[1][1][1].set_data_from_numpy(x)
    for model, inputs, code, text in cases:
        with pytest.raises(InferenceServerException) as e:
            c.infer(model, inputs, client_timeout=30)
        assert code in str(e.value.status()) and text in e.value.message(), (model, text, e.value)
    c.unload_model("tiny_cnn")
    assert not c.is_model_ready("tiny_cnn")
    c.load_model("tiny_cnn")
    assert c.is_model_ready("tiny_cnn")
    assert c.is_server_live()
    c.close()


def test_restart_loads_the_cached_engines(server, repo):
    s = Server(repo)
    try:
        assert s.client().is_model_ready("tiny_cnn")
    finally:
        assert s.stop() == 0
    log = "".join(s.stderr)
    assert "model 'tiny_cnn' version 1: ready (loaded the cached engine model." in log, log
    assert "model 'addmul' version 1: ready (loaded the cached engine model." in log, log


def test_cached_engine_follows_external_weights(tmp_path):
    """A model whose weights live beside it (external data): new weights in the same file name give a
    new engine, never the one cached from the old weights."""
    repo = tmp_path / "ext_repo"
    (repo / "ext" / "1").mkdir(parents=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])

    def save(w):
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "ext", [x], [y],
                              [onnx.numpy_helper.from_array(w, "w")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        onnx.save(m, str(repo / "ext" / "1" / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                  location="weights.bin", size_threshold=0)

    def served(w):
        save(w)
        s = Server(str(repo))
        try:
            inp = httpclient.InferInput("x", [1, 4], "FP32")
            inp.set_data_from_numpy(np.ones((1, 4), np.float32))
            return s.client().infer("ext", [inp]).as_numpy("y")
        finally:
            assert s.stop() == 0

    w1 = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(served(w1), np.ones((1, 4), np.float32) @ w1)
    time.sleep(0.01)  # a later modification time, whatever the file system's resolution
    w2 = -2 * w1
    np.testing.assert_allclose(served(w2), np.ones((1, 4), np.float32) @ w2)


def test_cached_engine_follows_half_outputs(tmp_path):
    """The engine cache is keyed by every build parameter: adding half_outputs to the config builds
    anew (here refused: a CPU engine's outputs are float32), never loads the cached float32 engine."""
    repo = tmp_path / "half_repo"
    (repo / "addmul" / "1").mkdir(parents=True)
    onnx.save(addmul_model(), str(repo / "addmul" / "1" / "model.onnx"))
    s = Server(str(repo))
    try:
        assert s.client().is_model_ready("addmul")
    finally:
        assert s.stop() == 0
    (repo / "addmul" / "config.pbtxt").write_text('parameters { key: "half_outputs" value: { string_value: "true" } }\n')
    s = Server(str(repo))
    try:
        assert not s.client().is_model_ready("addmul")
    finally:
        s.stop()
    log = "".join(s.stderr)
    assert "half_outputs is for engines whose float tensors are float16" in log, log


def test_sigterm_drains_requests_in_flight(repo, tmp_path):
    slow = os.path.join(repo, "..", "slow_repo")
    os.makedirs(os.path.join(slow, "slow", "1"), exist_ok=True)
    onnx.save(addmul_model(), os.path.join(slow, "slow", "1", "model.onnx"))
    with open(os.path.join(slow, "slow", "config.pbtxt"), "w") as f:
        # A long queue delay: the requests wait in the queue when the signal comes.
        f.write(ADDMUL_CONFIG.replace('name: "addmul"', 'name: "slow"').replace("30000", "5000000"))
    s = Server(slow)
    c = s.client(concurrency=4)
    x = np.ones((1, 4), np.float32)
    pending = [c.async_infer("slow", addmul_inputs(x * i, x, binary=True)) for i in range(4)]
    time.sleep(0.5)
    t0 = time.monotonic()
    assert s.stop() == 0, "".join(s.stderr)
    assert time.monotonic() - t0 < 4, "shutdown waited for the queue delay"
    for i, p in enumerate(pending):
        np.testing.assert_array_equal(p.get_result(timeout=10).as_numpy("sum"), x * i + x)
    assert any("stopping (SIGTERM)" in line for line in s.stderr), s.stderr


@pytest.mark.skipif(bool(os.environ.get("KILN_CLI")), reason="runs the installed package's own kiln, not KILN_CLI")
def test_python_dash_m_kiln_serve():
    import sys  # noqa: PLC0415

    r = subprocess.run([sys.executable, "-m", "kiln", "serve", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "--model-repository" in r.stdout, r.stdout + r.stderr


def test_mutated_requests_never_break_the_server(server):
    """300 valid requests with random damage (bytes flipped, cut short, header lengths, shapes and
    datatypes changed): every one is answered with an HTTP status, never a dropped connection."""
    rng = np.random.default_rng(42)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    header = {"inputs": [{"name": "x", "shape": [2, 4], "datatype": "FP32", "parameters": {"binary_data_size": 32}},
                         {"name": "y", "shape": [2, 4], "datatype": "FP32", "data": list(range(8))}],
              "outputs": [{"name": "sum", "parameters": {"binary_data": True}}]}
    odd_values = [-1, 0, 2**31, 2**63 - 1, 2**64, -(2**63), 1.5, "4", None, [], {}, True]
    statuses = set()
    for i in range(300):
        h = json.loads(json.dumps(header))
        kind = i % 5
        if kind == 0:
            h["inputs"][i % 2]["shape"][int(rng.integers(2))] = odd_values[int(rng.integers(len(odd_values)))]
        elif kind == 1:
            h["inputs"][i % 2]["datatype"] = ["FP16", "INT8", "BYTES", "BOOL", "", "fp32", "FP64"][i % 7]
        elif kind == 2:
            h["inputs"][0]["parameters"]["binary_data_size"] = odd_values[int(rng.integers(len(odd_values)))]
        head = json.dumps(h).encode()
        body = bytearray(head + x.tobytes())
        length = len(head)
        if kind == 3:  # bytes flipped anywhere
            for _ in range(int(rng.integers(1, 6))):
                body[int(rng.integers(len(body)))] = int(rng.integers(256))
        elif kind == 4:  # cut short, or the header length off
            if i % 2:
                body = body[: int(rng.integers(len(body)))]
            else:
                length = int(rng.integers(0, 2 * len(body)))
        status, reply = server.raw("POST", "/v2/models/addmul/infer", bytes(body),
                                   {"Inference-Header-Content-Length": str(length)})
        statuses.add(status)
        assert status in (200, 400), (i, status, reply[:200])
        if status == 400:
            assert json.loads(reply)["error"], reply
    assert 400 in statuses
    assert server.client().is_server_live()


def _connect(s: Server, payload: bytes = b""):
    import socket  # noqa: PLC0415

    c = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    if payload:
        c.sendall(payload)
    return c


def _read_until_closed(c, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection (or resets it), and when that was."""
    t0, got = time.monotonic(), b""
    c.settimeout(limit_s)
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            got += b
    except ConnectionResetError:
        pass
    return got, time.monotonic() - t0


def test_slow_clients_do_not_hold_the_http_threads(repo):
    """A slow-loris with --http-threads 2: six connections trickle a request head (a header line every
    0.2 s) and one kept-alive connection trickles its second request; health requests and an inference
    are still answered at once, because connections wait for their head in the gate, not in a thread."""
    s = Server(repo, "--http-threads", "2")
    slow, stop = [], threading.Event()
    try:
        for _ in range(6):
            slow.append(_connect(s, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n"))
        k = _connect(s, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert k.recv(4096).startswith(b"HTTP/1.1 200")
        k.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
        slow.append(k)

        def trickle():
            i = 0
            while not stop.wait(0.2):
                for c in slow:
                    try:
                        c.sendall(b"X-Slow-%d: y\r\n" % i)
                    except OSError:
                        pass
                i += 1

        threading.Thread(target=trickle, daemon=True).start()
        time.sleep(1.0)  # all seven accepted and mid-head
        for _ in range(3):
            t0 = time.monotonic()
            assert s.raw("GET", "/v2/health/live")[0] == 200
            assert time.monotonic() - t0 < 2.0
        x = np.arange(4, dtype=np.float32).reshape(1, 4)
        r = s.client().infer("addmul", addmul_inputs(x, x, binary=True))
        np.testing.assert_array_equal(r.as_numpy("sum"), x + x)
    finally:
        stop.set()
        for c in slow:
            c.close()
        assert s.stop() == 0, "".join(s.stderr)


def test_request_heads_and_bodies_have_deadlines(repo):
    """--http-head-timeout 1: a head still incomplete after 1 s is answered 408 and closed, a silent
    connection is closed, a head over 16 KiB is answered 431, and a body trickled far below the rate
    floor is cut; pipelined requests sent in one write are all answered, in order."""
    s = Server(repo, "--http-head-timeout", "1")
    try:
        partial = _connect(s, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        silent = _connect(s)
        got, took = _read_until_closed(partial, 10)
        assert got.startswith(b"HTTP/1.1 408") and 0.5 < took < 5, (got, took)
        got, took = _read_until_closed(silent, 10)
        assert got == b"" and took < 5, (got, took)

        big = _connect(s, b"GET /v2/health/live HTTP/1.1\r\n" + b"X-Big: " + b"a" * 20000 + b"\r\n")
        got, _ = _read_until_closed(big, 10)
        assert got.startswith(b"HTTP/1.1 431"), got[:80]

        body = _connect(s, b"POST /v2/models/addmul/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")
        t0, closed = time.monotonic(), False
        while time.monotonic() - t0 < 15 and not closed:
            try:
                body.sendall(b" " * 64)
                body.settimeout(0.1)
                closed = body.recv(4096) == b""
            except TimeoutError:
                pass
            except OSError:
                closed = True
        assert closed and time.monotonic() - t0 < 10, time.monotonic() - t0

        piped = _connect(s, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n" * 3 + b"GET /v2/models/addmul HTTP/1.1\r\n"
                         b"Host: x\r\nConnection: close\r\n\r\n")
        got, _ = _read_until_closed(piped, 10)
        assert got.count(b"HTTP/1.1 200") == 4 and got.rstrip().endswith(b"}") and b'"addmul"' in got, got
        for c in (partial, silent, big, body, piped):
            c.close()
        assert s.raw("GET", "/v2/health/live")[0] == 200
    finally:
        assert s.stop() == 0, "".join(s.stderr)


def test_idle_keep_alive_connections_are_closed_by_a_stop(repo):
    s = Server(repo)
    idle = [_connect(s, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n") for _ in range(8)]
    for c in idle:
        assert c.recv(4096).startswith(b"HTTP/1.1 200")
    t0 = time.monotonic()
    assert s.stop() == 0, "".join(s.stderr)
    assert time.monotonic() - t0 < 4, time.monotonic() - t0  # the process's whole teardown
    for c in idle:
        assert _read_until_closed(c, 2)[0] == b""
        c.close()


def _json_infer(x: np.ndarray) -> bytes:
    rows = [{"name": n, "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()} for n in ("x", "y")]
    return json.dumps({"inputs": rows, "outputs": [{"name": "sum"}]}).encode()


def test_requests_racing_unload_and_load_are_all_answered(repo):
    """Four clients send inferences to a model while it is unloaded and loaded again ten times: every
    request is answered, with the right sum or with a JSON error naming the model (404, 503), never a
    dropped connection, and the model serves after the last load."""
    s = Server(repo)
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    body, stop, results, lock = _json_infer(x), threading.Event(), [], threading.Lock()

    def client():
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        while not stop.is_set():
            try:
                c.request("POST", "/v2/models/addmul/infer", body=body)
                r = c.getresponse()
                status, data = r.status, r.read()
            except (OSError, http.client.HTTPException) as e:  # a dropped connection is the failure
                status, data = -1, repr(e).encode()
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
            with lock:
                results.append((status, data))
        c.close()

    threads = [threading.Thread(target=client) for _ in range(4)]
    try:
        for t in threads:
            t.start()
        admin = s.client()
        for _ in range(10):
            admin.unload_model("addmul")
            time.sleep(0.02)
            admin.load_model("addmul")
            time.sleep(0.02)
        stop.set()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        codes: dict[int, int] = {}
        for status, data in results:
            codes[status] = codes.get(status, 0) + 1
            if status == 200:
                out = json.loads(data)["outputs"][0]
                assert out["name"] == "sum" and out["data"] == (x + x).ravel().tolist(), out
            else:
                assert status in (400, 404, 503) and "addmul" in json.loads(data)["error"], (status, data[:200])
        assert codes.get(200, 0) > 0 and -1 not in codes, codes
        status, data = s.raw("POST", "/v2/models/addmul/infer", body)
        assert status == 200, data
    finally:
        stop.set()
        assert s.stop() == 0, "".join(s.stderr)


def test_many_tiny_requests_on_kept_alive_connections(server):
    """KILN_SERVE_SOAK_REQUESTS (20,000 here; 10^6 in the pre-stop run) health and metadata requests
    from 8 kept-alive connections: every one answered 200, and the server's threads and open files do
    not grow with the count."""
    total = int(os.environ.get("KILN_SERVE_SOAK_REQUESTS", "20000"))
    per, failures = total // 8, []

    def proc_counts():
        pid = server.proc.pid
        return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))

    def client(k):
        c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        path = "/v2/health/live" if k % 2 else "/v2/models/addmul"
        for _ in range(per):
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            if r.status != 200:
                failures.append(r.status)
            if r.getheader("Connection", "").lower() == "close":
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        c.close()

    assert server.raw("GET", "/v2/health/live")[0] == 200  # listening: its thread pool is up
    before = proc_counts()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads) and not failures, failures[:10]
    time.sleep(0.2)
    after = proc_counts()
    assert after[0] <= before[0] and after[1] <= before[1] + 2, (before, after)
