"""kiln models as Ray Serve applications: replicas on a Ray cluster, requests batched inside each.

    from ray import serve
    import kiln.ray_serve

    handle = serve.run(kiln.ray_serve.app("model.onnx", num_replicas=2), route_prefix="/")
    outputs = handle.remote({"image": x}).result()          # {output name: numpy array}
    # HTTP (Ray's proxy): POST /v2/models/model/infer with a KServe v2 JSON body

Each replica builds (``.onnx``) or loads (``.kiln``) its engine once, keeps one execution context and
batches with Ray's ``@serve.batch``: the requests of a batch whose inputs agree in every dim but the
first are concatenated along dim 0, run once and split back per request. This module imports without
Ray; ``app()`` needs ``pip install "ray[serve]"``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from . import _ENGINE_MAGIC, Engine, InvalidArgument, KilnError

__all__ = ["RequestError", "app", "app_builder"]

# KServe v2 datatypes of the JSON form, both ways (BYTES, i.e. strings, is not served).
_V2_DTYPES = {
    "BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "FP16": "float16", "FP32": "float32", "FP64": "float64",
}
_V2_NAMES = {v: k for k, v in _V2_DTYPES.items()}


class RequestError(ValueError):
    """A request the model cannot take (unknown or missing input, wrong dtype or shape, malformed
    KServe v2 JSON). Over HTTP it is answered with 400 and its message."""


def _import_serve():
    try:
        from ray import serve
    except ImportError as e:
        raise ImportError('kiln.ray_serve needs Ray Serve: pip install "ray[serve]"') from e
    return serve


def _open(model_path: str, device: str, precision: str, build_options: dict) -> Engine:
    """The engine: an engine file is loaded (it was built for its device), a model is built here."""
    with open(model_path, "rb") as f:
        is_engine = f.read(8)[4:8] == _ENGINE_MAGIC
    if not is_engine:
        return Engine.build(model_path, device=device, precision=precision, **build_options)
    engine = Engine.load(model_path, on_mismatch=build_options.get("on_mismatch", "error"))
    if engine.device != device:
        raise KilnError(f"{model_path} is an engine for {engine.device}, not {device}: build one for {device} "
                        f"(kiln build --device {device}) or pass the .onnx model")
    return engine


class _Model:
    """One engine and one execution context, and the batching logic around them (no Ray here)."""

    def __init__(self, engine: Engine, threads: int = 0) -> None:
        self.engine = engine
        self.inputs = {i.name: i for i in engine.inputs}
        self._dtypes = {i.name: _numpy_dtype(i.dtype) for i in engine.inputs}
        self.outputs = [o.name for o in engine.outputs]
        self._ctx = engine.create_context()
        if threads:
            self._ctx.set_num_threads(threads)
        # Batched when every input and output has a dynamic first dim (kiln serve's rule).
        infos = list(engine.inputs) + list(engine.outputs)
        self.batched = all(i.rank_known and len(i.shape) >= 1 and not isinstance(i.shape[0], int) for i in infos)
        # The most rows one run may take: the largest first dim a shape profile allows (none: no bound).
        limits = [min(shapes[2][0] for shapes in p.values()) for p in engine.profiles if p]
        self.max_rows = max(limits) if limits else None
        self.runs = self.requests = self.rows = 0
        self._lock = threading.Lock()  # one context: one run at a time

    def check(self, request: Any) -> dict[str, np.ndarray]:
        """The request as {name: array} of the model's dtypes and ranks, or RequestError saying why not."""
        if not isinstance(request, dict):
            raise RequestError(f"a request is a dict of input name -> array, got {type(request).__name__}")
        feed = {}
        for name, value in request.items():
            info = self.inputs.get(name)
            if info is None:
                raise RequestError(f"unknown input {name!r}; the model's inputs are: "
                                   + ", ".join(repr(n) for n in self.inputs))
            dtype = self._dtypes[name]
            if isinstance(value, (list, tuple)):
                try:
                    value = np.asarray(value, dtype=dtype)
                except (ValueError, TypeError, OverflowError) as e:
                    raise RequestError(f"input {name!r}: the list is not {info.dtype}: {e}") from None
            if not isinstance(value, np.ndarray):
                raise RequestError(f"input {name!r}: expected a numpy array, got {type(value).__name__}")
            if dtype is not None and value.dtype != dtype:
                raise RequestError(f"input {name!r} is {info.dtype} in the model, got {value.dtype}")
            if info.rank_known:
                if value.ndim != len(info.shape):
                    raise RequestError(f"input {name!r} has rank {len(info.shape)} ({_dims(info.shape)}), "
                                       f"got shape {list(value.shape)}")
                for axis, (want, got) in enumerate(zip(info.shape, value.shape)):
                    if isinstance(want, int) and want >= 0 and want != got:
                        raise RequestError(f"input {name!r} dim {axis} is {want}, got shape {list(value.shape)}")
            feed[name] = np.ascontiguousarray(value)
        missing = [n for n, i in self.inputs.items() if n not in feed and not i.has_default]
        if missing:
            raise RequestError("missing input(s): " + ", ".join(repr(n) for n in missing))
        if self.batched:
            rows = {v.shape[0] for v in feed.values()}
            if len(rows) > 1:
                raise RequestError(f"the inputs' first (batch) dims differ: {sorted(rows)}")
        return feed

    def run_many(self, feeds: list[dict[str, np.ndarray]]) -> list[Any]:
        """Runs checked feeds, merging those of one signature (names, dtypes, non-batch dims) into one
        run; returns per feed its outputs {name: array} or the exception its run raised."""
        results: list[Any] = [None] * len(feeds)
        groups: dict[tuple, list[int]] = {}
        for i, feed in enumerate(feeds):
            if self.batched:
                key = tuple(sorted((n, v.dtype.str, v.shape[1:]) for n, v in feed.items()))
                groups.setdefault(key, []).append(i)
            else:
                groups[(i,)] = [i]
        for members in groups.values():
            for chunk in self._chunks(members, feeds):
                self._run_chunk(chunk, feeds, results)
        with self._lock:
            self.requests += len(feeds)
        return results

    def _chunks(self, members: list[int], feeds: list[dict]) -> list[list[int]]:
        if self.max_rows is None:
            return [members]
        chunks, rows = [[]], 0
        for i in members:
            n = next(iter(feeds[i].values())).shape[0]
            if chunks[-1] and rows + n > self.max_rows:
                chunks.append([])
                rows = 0
            chunks[-1].append(i)
            rows += n
        return chunks

    def _run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self._lock:
            outputs = self._ctx.run(feed)
            self.runs += 1
            self.rows += next(iter(feed.values())).shape[0] if self.batched and feed else 1
        return dict(zip(self.outputs, outputs))

    def _run_chunk(self, chunk: list[int], feeds: list[dict], results: list[Any]) -> None:
        if len(chunk) > 1:
            names = feeds[chunk[0]].keys()
            merged = {n: np.concatenate([feeds[i][n] for i in chunk]) for n in names}
            counts = [next(iter(feeds[i].values())).shape[0] for i in chunk]
            try:
                outputs = self._run(merged)
            except KilnError:
                outputs = None  # one request may be at fault: run each alone, so only its caller fails
            total = sum(counts)
            if outputs is not None and all(v.ndim >= 1 and v.shape[0] == total for v in outputs.values()):
                offsets = np.cumsum([0] + counts)
                for i, start, stop in zip(chunk, offsets[:-1], offsets[1:]):
                    results[i] = {n: v[start:stop] for n, v in outputs.items()}
                return
        for i in chunk:
            try:
                results[i] = self._run(feeds[i])
            except KilnError as e:
                results[i] = e


def _numpy_dtype(name: str) -> np.dtype | None:
    """numpy's dtype of a kiln dtype name; None where numpy has none (bfloat16, float8, string): the
    engine checks those."""
    try:
        return np.dtype(name)
    except TypeError:
        return None


def _dims(shape: list) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "-1" for d in shape) + "]"


def parse_v2_request(body: bytes, model: _Model) -> tuple[dict[str, np.ndarray], list[str] | None, Any]:
    """A KServe v2 JSON inference request -> (feed, requested output names or None, request id);
    RequestError for anything malformed."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(f"the body is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list) or not doc["inputs"]:
        raise RequestError('expected a JSON object with a non-empty "inputs" list')
    feed = {}
    for k, item in enumerate(doc["inputs"]):
        if not isinstance(item, dict):
            raise RequestError(f"inputs[{k}] is not an object")
        name, shape, datatype, data = (item.get(f) for f in ("name", "shape", "datatype", "data"))
        if not isinstance(name, str):
            raise RequestError(f'inputs[{k}] has no "name" string')
        if name in feed:
            raise RequestError(f"input {name!r} is given twice")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise RequestError(f'input {name!r}: "shape" must be a list of non-negative integers')
        if datatype not in _V2_DTYPES:
            raise RequestError(f"input {name!r}: datatype {datatype!r} is not one of " + ", ".join(_V2_DTYPES))
        info = model.inputs.get(name)
        if info is not None and _V2_DTYPES[datatype] != info.dtype:
            raise RequestError(f"input {name!r} is {_V2_NAMES.get(info.dtype, info.dtype)} in the model, "
                               f"got {datatype}")
        if not isinstance(data, list):
            raise RequestError(f'input {name!r}: "data" must be a list (flat or nested)')
        try:
            array = np.asarray(data, dtype=_V2_DTYPES[datatype])
        except (ValueError, TypeError, OverflowError) as e:
            raise RequestError(f"input {name!r}: data is not {datatype}: {e}") from None
        count = 1
        for d in shape:
            count *= d
        if array.size != count:
            raise RequestError(f"input {name!r}: shape {shape} holds {count} elements, data has {array.size}")
        feed[name] = array.reshape(shape)
    wanted = doc.get("outputs")
    names = None
    if wanted is not None:
        if not isinstance(wanted, list) or not all(isinstance(o, dict) and isinstance(o.get("name"), str)
                                                   for o in wanted):
            raise RequestError('"outputs" must be a list of objects with a "name"')
        names = [o["name"] for o in wanted]
        unknown = [n for n in names if n not in model.outputs]
        if unknown:
            raise RequestError(f"unknown output(s) {unknown}; the model's outputs are: {model.outputs}")
    return feed, names, doc.get("id")


def v2_response(model_name: str, outputs: dict[str, np.ndarray], names: list[str] | None, request_id: Any) -> dict:
    doc: dict[str, Any] = {"model_name": model_name}
    if request_id is not None:
        doc["id"] = request_id
    doc["outputs"] = [{"name": n, "datatype": _V2_NAMES.get(outputs[n].dtype.name, outputs[n].dtype.name.upper()),
                       "shape": list(outputs[n].shape), "data": outputs[n].ravel().tolist()}
                      for n in (names or outputs)]
    return doc


def _metadata(name: str, model: _Model) -> dict:
    def tensor(info):
        return {"name": info.name, "datatype": _V2_NAMES.get(info.dtype, info.dtype.upper()),
                "shape": [d if isinstance(d, int) else -1 for d in info.shape]}
    return {"name": name, "platform": "kiln", "inputs": [tensor(i) for i in model.engine.inputs],
            "outputs": [tensor(o) for o in model.engine.outputs]}


_deployment_class = None


def _replica_class():
    """The deployment class, defined once Ray is imported (its batch method needs @serve.batch)."""
    global _deployment_class
    if _deployment_class is not None:
        return _deployment_class
    serve = _import_serve()

    class KilnDeployment:
        """A Ray Serve replica serving one kiln model. Called with {input: array} through a
        DeploymentHandle, or with an HTTP request (Ray's proxy) speaking KServe v2 JSON."""

        def __init__(self, model_path: str, name: str, device: str, precision: str, build_options: dict,
                     threads: int, max_batch_size: int, batch_wait_timeout_s: float) -> None:
            self.name = name
            self.model = _Model(_open(model_path, device, precision, build_options), threads)
            self._infer_batch.set_max_batch_size(max_batch_size if self.model.batched else 1)
            self._infer_batch.set_batch_wait_timeout_s(batch_wait_timeout_s)
            # One thread runs the engine, off the replica's event loop (the same thread every time,
            # so the CPU backend's OpenMP threads are reused).
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kiln")

        @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
        async def _infer_batch(self, feeds: list[dict]) -> list[Any]:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._executor, self.model.run_many, feeds)

        async def infer(self, request: dict) -> dict[str, np.ndarray]:
            """{input name: array} -> {output name: array}; RequestError when the model cannot take it."""
            result = await self._infer_batch(self.model.check(request))
            if isinstance(result, Exception):
                raise result
            return result

        async def __call__(self, request: Any) -> Any:
            if isinstance(request, dict):
                return await self.infer(request)
            return await self._http(request)

        def stats(self) -> dict:
            """This replica's counters: requests served, engine runs and rows run (requests / runs is the
            achieved batch size)."""
            m = self.model
            return {"replica": str(serve.get_replica_context().replica_id), "pid": os.getpid(),
                    "requests": m.requests, "runs": m.runs, "rows": m.rows}

        def metadata(self) -> dict:
            return _metadata(self.name, self.model)

        async def _http(self, request) -> Any:
            from starlette.responses import JSONResponse

            path = request.url.path
            root = request.scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root):]
            path = "/" + path.strip("/")
            model_path = f"/v2/models/{self.name}"
            if request.method == "GET" and path in ("/v2/health/live", "/v2/health/ready", model_path + "/ready"):
                return JSONResponse({})
            if request.method == "GET" and path == model_path:
                return JSONResponse(self.metadata())
            if path == model_path + "/infer":
                if request.method != "POST":
                    return JSONResponse({"error": "use POST for infer"}, status_code=405)
                try:
                    feed, names, request_id = parse_v2_request(await request.body(), self.model)
                    outputs = await self.infer(feed)
                except (RequestError, InvalidArgument) as e:
                    return JSONResponse({"error": str(e)}, status_code=400)
                except KilnError as e:
                    return JSONResponse({"error": str(e)}, status_code=500)
                return JSONResponse(v2_response(self.name, outputs, names, request_id))
            if path.startswith("/v2/models/"):
                return JSONResponse({"error": f"unknown model or route {path}; this application serves "
                                              f"{model_path}"}, status_code=404)
            return JSONResponse({"error": f"unknown route {path}"}, status_code=404)

    _deployment_class = KilnDeployment
    return KilnDeployment


def app(model_path: str | os.PathLike, *, name: str | None = None, precision: str = "fp32", device: str = "cpu",
        num_replicas: int | str | None = 1, num_gpus: float | None = None, num_cpus: float | None = None,
        max_batch_size: int = 8, batch_wait_timeout_s: float = 0.005, max_ongoing_requests: int | None = None,
        autoscaling_config: dict | None = None, threads: int = 0, build_options: dict | None = None,
        ray_actor_options: dict | None = None):
    """A Ray Serve application (``serve.run(app(...))``) serving one kiln model.

    model_path: an ``.onnx`` model (built on each replica with device, precision and build_options,
    kiln.Engine.build's keyword options) or a ``.kiln`` engine file (loaded; build_options may hold
    on_mismatch); the path must be readable from every node that runs a replica. name: the model's
    name in the HTTP routes (default: the file name without its suffix). num_replicas: as Ray Serve's
    (ignored when autoscaling_config is given; "auto" lets Ray choose). num_gpus: per replica,
    default 1 for device="cuda", 0 otherwise. max_batch_size, batch_wait_timeout_s: Ray's
    @serve.batch, counted in requests (each request may carry several rows); a model without a
    dynamic first dim runs requests one at a time. max_ongoing_requests: per replica (default 2 x
    max_batch_size, so a batch can fill). threads: CPU threads of each replica's runs (0: kiln's
    default). ray_actor_options: merged over the num_gpus/num_cpus ones.
    """
    serve = _import_serve()
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    model_path = os.path.abspath(os.fspath(model_path))
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"no model file {model_path}")
    if name is None:
        name = os.path.splitext(os.path.basename(model_path))[0]
    if num_gpus is None:
        num_gpus = 1 if device == "cuda" else 0
    actor_options: dict[str, Any] = {"num_gpus": num_gpus}
    if num_cpus is not None:
        actor_options["num_cpus"] = num_cpus
    actor_options.update(ray_actor_options or {})
    options: dict[str, Any] = {
        "name": f"kiln-{name}",
        "ray_actor_options": actor_options,
        "max_ongoing_requests": max_ongoing_requests or 2 * max_batch_size,
    }
    if autoscaling_config is not None:
        options["autoscaling_config"] = autoscaling_config
    else:
        options["num_replicas"] = num_replicas
    deployment = serve.deployment(**options)(_replica_class())
    return deployment.bind(model_path, name, device, precision, dict(build_options or {}), threads,
                           max_batch_size, batch_wait_timeout_s)


def app_builder(args: dict[str, str]):
    """For ``serve run kiln.ray_serve:app_builder model_path=model.onnx device=cuda num_replicas=2``
    (Ray's application builder: every argument arrives as a string)."""
    args = dict(args)
    kw: dict[str, Any] = {}
    for key, convert in (("num_replicas", int), ("num_gpus", float), ("num_cpus", float), ("max_batch_size", int),
                         ("batch_wait_timeout_s", float), ("max_ongoing_requests", int), ("threads", int)):
        if key in args:
            kw[key] = convert(args.pop(key))
    for key in ("name", "precision", "device"):
        if key in args:
            kw[key] = args.pop(key)
    if "model_path" not in args:
        raise ValueError("app_builder needs model_path=...")
    model_path = args.pop("model_path")
    if args:
        raise ValueError(f"unknown argument(s) {sorted(args)}")
    return app(model_path, **kw)
