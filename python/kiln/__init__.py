"""kiln: an inference compiler and runtime for ONNX models.

Two ways in:

* ``kiln.InferenceSession`` — a drop-in for ``onnxruntime.InferenceSession``::

      sess = kiln.InferenceSession("model.onnx", providers=["CUDAExecutionProvider"])
      (y,) = sess.run(None, {"x": x})

* ``kiln.Engine`` — the engine API: build once, save the ``.kiln`` file, load it later::

      engine = kiln.Engine.build("model.onnx", device="cuda")
      engine.save("model.kiln")
      ctx = kiln.Engine.load("model.kiln").create_context()
      outputs = ctx.run({"x": x})

``kiln.backend`` implements onnx's backend protocol (used by the conformance suite).
Every error kiln reports is a ``kiln.KilnError`` (a ``RuntimeError``) with a ``code`` attribute, raised
as the subclass ONNX Runtime names the same way: ``InvalidArgument``, ``InvalidGraph``,
``NotImplemented``, ``NoSuchFile``, ``EngineError``, ``RuntimeException``, ``Fail``, plus kiln's
``FileError`` and ``Cancelled`` (``kiln.NotImplemented`` is not exported by ``from kiln import *``:
it would hide Python's builtin of that name).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import ctypes.util
import enum
import json
import math
import operator
import os
import re
import sys
import threading
import time
import warnings
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

# kiln's CPU kernels use OpenMP. With libgomp's default (active) waiting, idle worker threads spin,
# and on a machine whose cores are busy with other work a 2-thread run became 5-70x slower than a
# 1-thread run (measured, bench/README.md); passive waiting removed that (MobileNetV2, 2 threads,
# loaded machine: 293 ms -> 45.6 ms). The choice must be made before libgomp loads, i.e. before
# _kiln is imported; a value the user set wins. Passive waiting alone costs a thread wake-up per
# parallel region (MobileNetV2 was slower on 2 threads than on 1), so workers first spin briefly
# (GOMP_SPINCOUNT, which libgomp prefers to the policy): on 2 idle cores MobileNetV2 23.3 -> 16.1 ms;
# with another runtime's threads spinning on the same cores 23.1 -> 25.7 ms
# (bench/results/cpu_tuning.md).
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["GOMP_SPINCOUNT"] = "10000"

from . import _kiln
from ._kiln import (
    Cancelled,
    Engine,
    EngineError,
    ExecutionContext,
    Fail,
    InvalidArgument,
    InvalidGraph,
    FileError,
    KilnError,
    NoSuchFile,
    NotImplemented,  # noqa: A004
    ProfileEvent,
    RuntimeException,
    Tensor,
    TensorInfo,
    set_default_logger_severity,
    summarize_model,
)

# ONNX Runtime's OrtValue spelled as kiln's Tensor, with its factory names.
OrtValue = Tensor
Tensor.ortvalue_from_numpy = staticmethod(Tensor.from_numpy)
Tensor.ortvalue_from_shape_and_type = staticmethod(
    lambda shape, element_type, device_type="cpu", device_id=0: Tensor.empty(shape, element_type, device_type, device_id)
)

__version__: str = _kiln.__version__

__all__ = [
    "Cancelled",
    "Engine",
    "EngineError",
    "Fail",
    "IOBinding",
    "InvalidArgument",
    "InvalidGraph",
    "ModelMetadata",
    "FileError",
    "NoSuchFile",
    "OrtValue",
    "ProfileEvent",
    "RunOptions",
    "RuntimeException",
    "Tensor",
    "set_default_logger_severity",
    "ExecutionContext",
    "GraphOptimizationLevel",
    "InferenceSession",
    "KilnError",
    "NodeArg",
    "SessionOptions",
    "TensorInfo",
    "cuda_available",
    "get_all_providers",
    "get_available_providers",
    "get_device",
    "get_version_string",
    "set_seed",
    "load_plugin",
    "summarize_model",
]

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
_KNOWN_PROVIDERS = (CUDA_PROVIDER, CPU_PROVIDER)

# The flatbuffers file identifier of an engine file (bytes 4..8).
_ENGINE_MAGIC = b"KILN"


def _error(code: str, message: str) -> KilnError:
    err = _kiln.error_class(code)(f"{code}: {message}")
    err.code = code
    return err


# ---- Devices and providers

_cuda_probe: bool | None = None
_cuda_lock = threading.Lock()


def _tiny_model_bytes() -> bytes:
    """A one-node Identity model (float x[1] → y), serialized."""
    from onnx import TensorProto, helper  # noqa: PLC0415

    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "kiln_probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


def cuda_available() -> bool:
    """Whether kiln can build engines for CUDA here (built with CUDA and a GPU is usable).

    Decided once, by building a one-node model for CUDA; set KILN_DISABLE_CUDA=1 to hide CUDA.
    """
    global _cuda_probe
    if os.environ.get("KILN_DISABLE_CUDA", "") not in ("", "0"):
        return False
    with _cuda_lock:
        if _cuda_probe is None:
            try:
                Engine.build_from_bytes(_tiny_model_bytes(), device="cuda")
                _cuda_probe = True
            except (KilnError, ImportError):
                _cuda_probe = False
        return _cuda_probe


def get_available_providers() -> list[str]:
    """Like onnxruntime.get_available_providers(): CUDA first when usable, then CPU."""
    return [CUDA_PROVIDER, CPU_PROVIDER] if cuda_available() else [CPU_PROVIDER]


def get_device() -> str:
    """Like onnxruntime.get_device(): "GPU" when CUDA is usable, else "CPU"."""
    return "GPU" if cuda_available() else "CPU"


def get_all_providers() -> list[str]:
    """Like onnxruntime.get_all_providers(): every provider this kiln can run, usable here or not (CUDA
    first, the CPU last, as onnxruntime orders them); get_available_providers() says which are usable."""
    return list(_KNOWN_PROVIDERS)


def get_version_string() -> str:
    """Like onnxruntime.get_version_string(): kiln's version (kiln.__version__)."""
    return __version__


def set_seed(seed: int) -> None:
    """Like onnxruntime.set_seed(n): seeds the random ops of every session that have no ``seed``
    attribute (RandomNormal, RandomUniform and their *Like forms, Bernoulli, Multinomial, Dropout in
    training mode), process-wide. Without it each run of such an op draws from a fresh seed; after
    set_seed(n) the same runs in the same order draw the same numbers (each draw takes the next seed of
    one sequence started from n, whichever session makes it). Ops with a ``seed`` attribute always use
    theirs. Nothing else in kiln is random (numpy's generator and the ``kiln`` command's --seed are
    separate)."""
    _kiln.set_seed(operator.index(seed))


def _provider_names(providers: Iterable[Any] | None) -> list[str]:
    """The usable providers asked for, in order. As onnxruntime does, a provider that is unknown or not
    available here is skipped with a warning (the session falls back to the next one, then the CPU)."""
    names = []
    available = None
    for p in providers or []:
        name = p[0] if isinstance(p, (tuple, list)) else p
        if not isinstance(name, str):
            raise ValueError(f"providers must be names or (name, options) tuples, got {p!r}")
        if name not in _KNOWN_PROVIDERS:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(get_available_providers())}' (kiln knows "
                f"{', '.join(_KNOWN_PROVIDERS)})",
                stacklevel=3,
            )
            continue
        if available is None:
            available = get_available_providers()
        if name not in available:
            warnings.warn(
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(available)}' (no usable CUDA GPU here: running on the CPU)",
                stacklevel=3,
            )
            continue
        names.append(name)
    return names


def _cuda_provider_options(providers: Iterable[Any] | None, provider_options: Sequence[dict] | None) -> dict:
    """The options given to CUDAExecutionProvider, as (name, options) tuples or in provider_options."""
    found: dict = {}
    for i, p in enumerate(providers or []):
        name = p[0] if isinstance(p, (tuple, list)) else p
        if name != CUDA_PROVIDER:
            continue
        if isinstance(p, (tuple, list)) and len(p) > 1 and p[1]:
            found.update(dict(p[1]))
        if provider_options and i < len(provider_options) and provider_options[i]:
            found.update(dict(provider_options[i]))
    return found


def _truthy(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).strip().lower() in ("1", "true", "yes", "on")


def _cuda_settings(options: dict) -> tuple[str, bool | None]:
    """kiln's reading of CUDA provider options: the engine precision ("precision": fp32/tf32/fp16/bf16/best, or
    TensorRT's trt_fp16_enable / trt_bf16_enable) and CUDA graphs (onnxruntime's enable_cuda_graph;
    None leaves kiln's default, on). Other keys are accepted and ignored, as onnxruntime does."""
    precision = str(options.get("precision", "fp32")).lower()
    if _truthy(options.get("trt_fp16_enable", False)):
        precision = "fp16"
    if _truthy(options.get("trt_bf16_enable", False)):
        precision = "bf16"
    if precision in ("int8", "fp8"):
        raise ValueError(f"CUDAExecutionProvider option precision={precision!r}: 8-bit engines need calibration data; "
                         f"build one with kiln.Engine.build(path, device='cuda', precision={precision!r}, calibration=...), "
                         "save it and open the .kiln file")
    if precision not in ("fp32", "tf32", "fp16", "bf16", "best"):
        raise ValueError(f"CUDAExecutionProvider option precision={precision!r}: expected fp32, tf32, fp16, bf16 or best")
    graphs = options.get("enable_cuda_graph")
    return precision, None if graphs is None else _truthy(graphs)


def _trt_shapes(spec: str) -> list[tuple[str, list[int]]]:
    items = []
    for item in filter(None, (x.strip() for x in str(spec).split(","))):
        name, sep, dims = item.rpartition(":")
        if not sep or not name or not dims:
            raise ValueError(f"shape {item!r}: expected name:dims like input:1x3x224x224")
        try:
            items.append((name, [int(d) for d in dims.split("x")]))
        except ValueError:
            raise ValueError(f"shape {item!r}: dims must be integers separated by 'x'") from None
    return items


def _build_settings(options: dict) -> dict:
    """Shape profiles and tuning from provider options, spelled as ONNX Runtime's TensorRT provider spells them:
    trt_profile_min_shapes / trt_profile_opt_shapes / trt_profile_max_shapes ("in:1x3x224x224,mask:1x128"; an input
    named again starts the next profile), trt_timing_cache_enable and trt_timing_cache_path (a file, or a folder that
    gets kiln_timing_cache.txt); "tune" (True/False) forces tuning on or off."""
    out: dict = {}
    keys = ("trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes")
    given = [k for k in keys if options.get(k)]
    if given:
        if len(given) != 3:
            raise ValueError("shape profiles need trt_profile_min_shapes, trt_profile_opt_shapes and trt_profile_max_shapes")
        parsed = [_trt_shapes(options[k]) for k in keys]
        profiles: list[dict] = []
        for which, items in enumerate(parsed):
            seen: dict[str, int] = {}
            for name, dims in items:
                index = seen.get(name, 0)
                seen[name] = index + 1
                while len(profiles) <= index:
                    profiles.append({})
                profiles[index].setdefault(name, [None, None, None])[which] = dims
        for p in profiles:
            for name, triple in p.items():
                if any(t is None for t in triple):
                    raise ValueError(f"shape profile input {name!r} needs min, opt and max shapes")
                p[name] = tuple(triple)
        out["profiles"] = profiles
    if "tune" in options:
        out["tune"] = _truthy(options["tune"])
    path = options.get("trt_timing_cache_path")
    if path and _truthy(options.get("trt_timing_cache_enable", True)):
        path = os.fspath(path)
        out["timing_cache"] = os.path.join(path, "kiln_timing_cache.txt") if os.path.isdir(path) else path
    return out


# ---- Threads


def load_plugin(library: str, override: bool = False) -> dict:
    """Loads a kiln plugin library (written against include/kiln/plugin.h; docs/plugins.md) into the
    process, once: its ops are then known to every build and engine load. ``library`` is a path, or a
    bare file name looked up in KILN_PLUGIN_PATH's folders and then by the dynamic loader.
    ``override=True`` lets it replace ops built into kiln (otherwise such a plugin is refused).
    Returns {"library", "path", "name", "version", "ops"}. Raises KilnError naming the library when
    it is not a kiln plugin (ONNX Runtime custom-op libraries included), was built for another plugin
    ABI version, or declares an op that cannot be added."""
    return _kiln.load_plugin(os.fspath(library), bool(override))


def set_num_threads(n: int) -> None:
    """Sets the number of CPU threads kiln's kernels use (OpenMP) for runs from this thread.

    n <= 0 leaves the default (all cores, or OMP_NUM_THREADS).
    """
    if n <= 0:
        return
    lib = ctypes.util.find_library("gomp")
    if lib is None:
        return
    try:
        ctypes.CDLL(lib).omp_set_num_threads(ctypes.c_int(int(n)))
    except (OSError, AttributeError):
        pass


# ---- Sessions (ONNX Runtime–compatible)


class GraphOptimizationLevel(enum.IntEnum):
    """Same names and values as onnxruntime.GraphOptimizationLevel (members are ints)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_ALL = 99


class ExecutionMode:
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class SessionOptions:
    """onnxruntime.SessionOptions. What kiln does with each field:

    * graph_optimization_level: disable → kiln opt level 0, basic → 1, extended/all → 2 (fusions).
    * intra_op_num_threads: CPU threads of this session's build and runs (0: all cores or
      OMP_NUM_THREADS); set per build and per run and restored after it, so sessions never change each
      other's thread count.
    * enable_profiling / profile_file_prefix: every run records each step's time;
      InferenceSession.end_profiling() writes them in ONNX Runtime's profile format (also a Chrome
      trace) and returns the file name.
    * log_severity_level: 0 or 1 logs the build's decisions (a verbose build); 3 or 4 lowers kiln's
      process-wide logging to errors (as set_default_logger_severity).
    * optimized_model_filepath: kiln's optimized form of a model is its engine, not an .onnx: a
      warning, and nothing is written (save ``session.engine`` instead).
    * inter_op_num_threads, execution_mode, enable_mem_pattern, enable_cpu_mem_arena,
      log_verbosity_level, logid: accepted; they change nothing in kiln (its memory is always
      planned, its steps run in order).
    Setting a field that onnxruntime's SessionOptions does not have raises AttributeError, as there.
    """

    __slots__ = (
        "_graph_optimization_level",
        "intra_op_num_threads",
        "inter_op_num_threads",
        "execution_mode",
        "execution_order",
        "log_severity_level",
        "log_verbosity_level",
        "enable_profiling",
        "profile_file_prefix",
        "enable_mem_pattern",
        "enable_mem_reuse",
        "enable_cpu_mem_arena",
        "optimized_model_filepath",
        "logid",
        "use_deterministic_compute",
        "_config",
    )

    def __init__(self) -> None:
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = 0
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.enable_profiling = False
        self.profile_file_prefix = "kiln_profile"
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.enable_cpu_mem_arena = True
        self.optimized_model_filepath = ""
        self.logid = ""
        self.use_deterministic_compute = False
        self._config: dict[str, str] = {}

    @property
    def graph_optimization_level(self) -> GraphOptimizationLevel:
        return self._graph_optimization_level

    @graph_optimization_level.setter
    def graph_optimization_level(self, level: Any) -> None:
        # onnxruntime takes only its enum's members and raises TypeError for anything else (5, "all",
        # None). kiln raises the same for those, and also takes a plain int equal to a level's value.
        if isinstance(level, bool) or not isinstance(level, int) or level not in GraphOptimizationLevel._value2member_map_:
            raise TypeError(f"graph_optimization_level: {level!r} is not a GraphOptimizationLevel (expected one of "
                            + ", ".join(f"{m.name} ({m.value})" for m in GraphOptimizationLevel) + ")")
        self._graph_optimization_level = GraphOptimizationLevel(level)

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Stored (get_session_config_entry returns it). kiln reads two keys: "kiln.on_mismatch" — what an
        engine file built for another GPU, driver or library version does: "error" (the default),
        "rebuild" (from the graph it holds) or "rebuild-and-save" (Engine.load's on_mismatch); and
        "kiln.max_shape_plans" — how many input-shape signatures each of the session's contexts keeps
        planned (a positive integer, default 16; ExecutionContext.max_shape_plans): past it the least
        recently used plan goes and its memory with it."""
        key, value = str(key), str(value)
        if key == "kiln.on_mismatch" and value not in ("error", "rebuild", "rebuild-and-save"):
            raise ValueError(f"kiln.on_mismatch '{value}': expected error, rebuild or rebuild-and-save")
        if key == "kiln.max_shape_plans" and not (value.isdigit() and 0 < int(value) <= 1 << 20):
            raise ValueError(f"kiln.max_shape_plans '{value}': expected a positive integer")
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        return self._config[str(key)]

    def register_custom_ops_library(self, library_path: str) -> None:
        """onnxruntime's way to add custom ops. kiln loads the library at once (process-wide, as
        load_plugin does): a kiln plugin (include/kiln/plugin.h) or an ONNX Runtime custom-op library
        (exporting RegisterCustomOps, e.g. onnxruntime_extensions.get_library_path()), whose ops then
        run on the CPU through kiln's implementation of ONNX Runtime's custom-op C API (docs/plugins.md
        lists what it provides)."""
        load_plugin(library_path)

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        raise NotImplementedError("free dimension overrides: give shape profiles instead (providers option trt_profile_*_shapes)")


class RunOptions:
    """Per-run options, as onnxruntime's RunOptions.

    ``terminate = True`` (from any thread) stops every run using these options: a run in progress
    raises KilnError (Cancelled) before its next step, whenever the request came after run() was
    called (also while the inputs are still being converted), and runs started while it is set raise
    at once; set it back to False to run again. ``run_timeout_s`` (kiln's own) limits each run's time
    the same way (0: none). The log fields are accepted for compatibility.
    """

    def __init__(self) -> None:
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.run_timeout_s = 0.0
        # The request itself, shared with every run given these options: the runs check it before
        # each step and never clear it (only the caller does), so it cannot be lost.
        self._stop = _kiln.StopFlag()
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Stored, as onnxruntime stores it (get_run_config_entry returns it); kiln's runs read no key
        (onnxruntime's keys tune its own arenas and execution providers)."""
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        """The value add_run_config_entry stored; RuntimeError (as onnxruntime) when there is none."""
        try:
            return self._config[str(key)]
        except KeyError:
            raise RuntimeError(f"RunOptions does not have configuration with key: {key}") from None

    @property
    def terminate(self) -> bool:
        return self._stop.is_set

    @terminate.setter
    def terminate(self, value: bool) -> None:
        self._stop.is_set = bool(value)

    def _check(self) -> None:
        if self._stop.is_set:
            raise _error("Cancelled", "the run was terminated: RunOptions.terminate is set")


# Engine metadata of a ZipMap output (src/onnx/importer.cpp): its labels, JSON {"keys", "labels"}.
_ZIPMAP_PREFIX = "model.custom.kiln.zipmap."


def _kiln_records(meta: dict[str, str], prefix: str, names: Any = None) -> Iterator[tuple[str, dict]]:
    """(name, record) for each of kiln's map-edge records under `prefix` (a ZipMap's output, a
    DictVectorizer's or CastMap's input), of a name in `names` when given. A value that is not a JSON
    object is not kiln's record: its tensor stays a tensor."""
    for k, v in meta.items():
        name = k[len(prefix):]
        if not k.startswith(prefix) or (names is not None and name not in names):
            continue
        try:
            record = json.loads(v)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield name, record


def _zipmaps(meta: dict[str, str]) -> dict[str, dict]:
    """Output name → {"keys": "int64" | "string", "labels": [...]} for outputs a ZipMap wrote."""
    return dict(_kiln_records(meta, _ZIPMAP_PREFIX))


def _as_zipmap(array: Any, spec: dict) -> list[dict]:
    """The [N, C] probabilities as ONNX Runtime's ZipMap output: one {label: probability} per row."""
    labels = spec["labels"]
    rows = np.asarray(array).reshape(-1, len(labels)) if len(labels) else np.zeros((0, 0))
    return [dict(zip(labels, (float(p) for p in row))) for row in rows]


# Engine metadata of a map input read by a DictVectorizer (src/onnx/importer.cpp): JSON {"keys", "vocabulary"}.
_DICTVEC_PREFIX = "model.custom.kiln.dictvectorizer."


def _dict_vectorizers(meta: dict[str, str], inputs: dict[str, TensorInfo]) -> dict[str, dict]:
    """Input name → {"keys": "int64" | "string", "vocabulary": [...], "index": {key: [positions]},
    "map_type": onnxruntime's type of the input} for the map inputs made dense rows (of `inputs`; a
    record naming no input, or not kiln's, is ignored)."""
    out = {}
    for name, spec in _kiln_records(meta, _DICTVEC_PREFIX, inputs):
        if spec.get("keys") not in ("int64", "string") or not isinstance(spec.get("vocabulary"), list):
            continue
        index: dict[Any, list[int]] = {}
        try:
            for i, key in enumerate(spec["vocabulary"]):  # a repeated key fills every position it has
                index.setdefault(key, []).append(i)
        except TypeError:
            continue  # a key that is no JSON scalar: not kiln's record
        spec.update(index=index, map_type=f"map({spec['keys']},{inputs[name].type})")
        out[name] = spec
    return out


def _as_dense_row(value: Any, spec: dict, info: TensorInfo) -> Any:
    """A {key: value} map given for a DictVectorizer's input as the row [1, vocabulary] it makes: each
    vocabulary entry's value, 0 (or "") where the map has none; keys outside the vocabulary are left out,
    as ONNX Runtime does. Anything but a dict is passed on as it is (the dense row itself, say)."""
    if not isinstance(value, dict):
        return value
    strings = info.dtype == "string"
    row = np.full((1, len(spec["vocabulary"])), "" if strings else 0, dtype=object if strings else np.dtype(info.dtype))
    int_keys = spec["keys"] == "int64"
    for key, v in value.items():
        ok = (isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_)) and
              -2**63 <= int(key) < 2**63) if int_keys else isinstance(key, str)
        if not ok:
            raise _error("InvalidArgument", f"input '{info.name}' is a map with {spec['keys']} keys; got the key {key!r}")
        for i in spec["index"].get(int(key) if int_keys else key, ()):
            row[0, i] = v
    return row


# Engine metadata of a map input read by a CastMap (src/onnx/importer.cpp): JSON {"values": "float" |
# "string", "cast_to": "TO_FLOAT" | "TO_STRING" | "TO_INT64", "map_form": "DENSE" | "SPARSE", "max_map"}.
_CASTMAP_PREFIX = "model.custom.kiln.castmap."


def _cast_maps(meta: dict[str, str], inputs: dict[str, TensorInfo]) -> dict[str, dict]:
    """Input name → the CastMap record of a map input made the node's row (of `inputs`; a record naming
    no input, or not in kiln's form, is ignored), with "castmap": True and "map_type" (onnxruntime's
    type of the input) added."""
    out = {}
    for name, spec in _kiln_records(meta, _CASTMAP_PREFIX, inputs):
        if (spec.get("values") not in ("float", "string") or spec.get("cast_to") not in ("TO_FLOAT", "TO_STRING", "TO_INT64")
                or spec.get("map_form") not in ("DENSE", "SPARSE") or type(spec.get("max_map")) is not int
                or not 1 <= spec["max_map"] <= 2**31 - 1):
            continue
        spec.update(castmap=True, map_type=f"map(int64,tensor({spec['values']}))")
        out[name] = spec
    return out


# What C's strtoll (base 10) and strtof read at the start of a string, after white space: onnxruntime's
# CastMap reads string values with std::stoll / std::stof, which take the longest such prefix.
_C_SPACE = " \t\n\v\f\r"
_STRTOLL = re.compile(r"[+-]?[0-9]+")
_STRTOF = re.compile(r"[+-]?(?:0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)(?:[pP][+-]?[0-9]+)?"
                     r"|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                     r"|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?|[nN][aA][nN](?:\([0-9A-Za-z_]*\))?)")


def _c_number(text: str, to: str) -> Any:
    """`text` read as std::stoll (TO_INT64) or std::stof (TO_FLOAT) read it: the longest number at its
    start after white space ("12abc" is 12, "1.5" as an integer 1, "0x1p3" as a float 8); None where
    there is none or it is out of the type's range (where std::stoll/stof throw). Floats go through
    double, which can round a decimal exactly halfway between two float32 values differently than
    strtof's direct rounding."""
    t = text.lstrip(_C_SPACE)
    if to == "TO_INT64":
        m = _STRTOLL.match(t)
        if not m:
            return None
        n = int(m.group(0))
        return n if -2**63 <= n < 2**63 else None
    m = _STRTOF.match(t)
    if not m:
        return None
    g = m.group(0)
    body = g.lstrip("+-")
    if body[:2] in ("0x", "0X"):
        v = float.fromhex(g)
    elif body[:1] in "nN":
        v = -float("nan") if g.startswith("-") else float("nan")
    else:
        v = float(g)  # decimal digits, "inf" and "infinity" (Python reads them all)
    with np.errstate(over="ignore", under="ignore"):
        f = np.float32(v)
    if math.isfinite(v) and (not np.isfinite(f) or (v != 0 and abs(float(f)) < np.finfo(np.float32).tiny)):
        return None  # out of float's range, or below its normal numbers: strtof's ERANGE
    return f


def _cast_value(v: Any, spec: dict, key: int, name: str) -> Any:
    """One map value as CastMap casts it, as onnxruntime's kernel does: a float value is a float32;
    TO_INT64 truncates it toward zero (NaN, ±inf and values outside int64 give INT64_MIN, the x86
    conversion onnxruntime's cast compiles to), TO_STRING writes it as C's "%f" ("nan" / "-nan", "inf");
    a string value is kept for TO_STRING and read as std::stoll / std::stof read it otherwise."""
    to = spec["cast_to"]
    if spec["values"] == "string":
        if not isinstance(v, str):
            raise _error("InvalidArgument", f"input '{name}' is a map of string values; got {v!r} at key {key}")
        if to == "TO_STRING":
            return v
        n = _c_number(v, to)
        if n is None:
            raise _error("InvalidArgument", f"input '{name}': CastMap {to} cannot read the value {v!r} at key {key} as "
                         f"{'an int64' if to == 'TO_INT64' else 'a float'} (no number at its start, or out of range)")
        return n
    if not isinstance(v, (int, float, np.integer, np.floating)):
        raise _error("InvalidArgument", f"input '{name}' is a map of float values; got {v!r} at key {key}")
    try:
        d = float(v)
    except OverflowError:
        raise _error("InvalidArgument", f"input '{name}': the value at key {key} is too large for a float") from None
    with np.errstate(over="ignore"):
        f = np.float32(d)
    if to == "TO_FLOAT":
        return f
    if to == "TO_INT64":
        return int(f) if np.isfinite(f) and -2.0**63 <= float(f) < 2.0**63 else -2**63
    if np.isnan(f):
        return "-nan" if np.signbit(f) else "nan"
    return "%f" % float(f)


def _as_cast_row(value: Any, spec: dict, info: TensorInfo) -> Any:
    """A {key: value} map given for a CastMap's input as the row [1, n] the node makes, as onnxruntime's
    kernel does: DENSE, every value in key order; SPARSE, position k holds key k's value for keys below
    max_map (larger keys, and their values, are not read; a negative key is an error), the rest 0 (the
    string "0.f" for TO_STRING, onnxruntime's filler). Anything but a dict is passed on as it is (the
    row itself, say)."""
    if not isinstance(value, dict):
        return value
    items = []
    for key, v in value.items():
        if not isinstance(key, (int, np.integer)) or isinstance(key, (bool, np.bool_)) or not -2**63 <= int(key) < 2**63:
            raise _error("InvalidArgument", f"input '{info.name}' is a map with int64 keys; got the key {key!r}")
        items.append((int(key), v))
    items.sort(key=lambda kv: kv[0])
    to = spec["cast_to"]
    dtype = object if to == "TO_STRING" else np.float32 if to == "TO_FLOAT" else np.int64
    if spec["map_form"] == "DENSE":
        return np.array([[_cast_value(v, spec, k, info.name) for k, v in items]], dtype=dtype).reshape(1, len(items))
    if items and items[0][0] < 0:
        raise _error("InvalidArgument", f"input '{info.name}': a SPARSE CastMap takes keys >= 0; got {items[0][0]}")
    row = np.full((1, spec["max_map"]), "0.f" if to == "TO_STRING" else 0, dtype=dtype)
    for k, v in items:
        if k >= spec["max_map"]:
            break
        row[0, k] = _cast_value(v, spec, k, info.name)
    return row


def _as_input_row(value: Any, spec: dict, info: TensorInfo) -> Any:
    """A map given for an input a DictVectorizer or a CastMap read, as the row the engine takes."""
    return _as_cast_row(value, spec, info) if spec.get("castmap") else _as_dense_row(value, spec, info)


class NodeArg:
    """An input or output as onnxruntime describes it: name, type ("tensor(float)"), shape."""

    def __init__(self, info: TensorInfo, zipmap: dict | None = None, map_input: dict | None = None) -> None:
        self.name: str = info.name
        self.type: str = info.type
        # ints, or the symbol (str) / None where a dim is dynamic; [] when even the rank is unknown
        self.shape: list[int | str | None] = list(info.shape)
        if zipmap is not None:  # a ZipMap's output: a list of maps, as onnxruntime describes it
            self.type = f"seq(map({zipmap['keys']},tensor(float)))"
            self.shape = []
        if map_input is not None:  # a map input a DictVectorizer or CastMap reads, as onnxruntime describes it
            self.type = map_input["map_type"]
            self.shape = []

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _unknown_name(kind: str, name: str, infos: Iterable[Any]) -> KilnError:
    """InvalidArgument for an input or output name the model does not have, listing the ones it has."""
    known = ", ".join(repr(i.name) for i in infos) or "none"
    return _error("InvalidArgument", f"unknown {kind} '{name}'; the model's {kind}s are: {known}")


def _normalize_feed(infos: Sequence[TensorInfo], feed: dict[str, Any],
                    by_name: dict[str, TensorInfo] | None = None) -> dict[str, Any]:
    """Checks names; turns lists given for tensor inputs into arrays (as onnxruntime does). by_name:
    the infos by name, when the caller keeps them (a session does: this runs on every run)."""
    if by_name is None:
        by_name = {i.name: i for i in infos}
    out = {}
    for name, value in feed.items():
        info = by_name.get(name)
        if info is None:
            raise _unknown_name("input", name, infos)
        if type(value) is np.ndarray:
            out[name] = value
            continue
        if info.kind == "tensor" and isinstance(value, (list, tuple)):
            try:
                dtype = np.dtype(info.dtype) if info.dtype != "string" else object
            except TypeError:
                dtype = None  # an extended type (bfloat16, float8): numpy's own choice
            value = np.asarray(value, dtype=dtype)
        out[name] = value
    return out


def _open_engine(path_or_bytes: Any, device: str, opt_level: int, precision: str = "fp32", on_mismatch: str = "error",
                 **build: Any) -> Engine:
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        data = bytes(path_or_bytes)
        if data[4:8] == _ENGINE_MAGIC:
            return Engine.load_from_bytes(data, on_mismatch=on_mismatch)
        return Engine.build_from_bytes(data, device=device, opt_level=opt_level, precision=precision, **build)
    if isinstance(path_or_bytes, (str, os.PathLike)):
        return Engine.open(os.fspath(path_or_bytes), device=device, opt_level=opt_level, precision=precision,
                           on_mismatch=on_mismatch, **build)
    if hasattr(path_or_bytes, "SerializeToString"):  # an onnx.ModelProto
        return Engine.build_from_bytes(path_or_bytes.SerializeToString(), device=device, opt_level=opt_level,
                                         precision=precision, **build)
    raise TypeError(f"InferenceSession expects a path, bytes or ModelProto, got {type(path_or_bytes).__name__}")


class ModelMetadata:
    """What onnxruntime's InferenceSession.get_modelmeta() returns (read from the model, and kept in
    engine files)."""

    def __init__(self, meta: dict[str, str]) -> None:
        self.producer_name: str = meta.get("model.producer_name", "")
        self.graph_name: str = meta.get("model.graph_name", "")
        self.domain: str = meta.get("model.domain", "")
        self.description: str = meta.get("model.description", "")
        self.graph_description: str = meta.get("model.graph_description", "")
        try:
            self.version: int = int(meta.get("model.version", "0"))
        except ValueError:
            self.version = 0
        prefix = "model.custom."
        self.custom_metadata_map: dict[str, str] = {k[len(prefix):]: v for k, v in meta.items()
                                                    if k.startswith(prefix)
                                                    and not k.startswith((_ZIPMAP_PREFIX, _DICTVEC_PREFIX, _CASTMAP_PREFIX))}

    def __repr__(self) -> str:
        return (f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r}, "
                f"version={self.version}, custom_metadata_map={self.custom_metadata_map!r})")


def _unwritable_memory(ptr: int, nbytes: int) -> str:
    """Why the process may not write [ptr, ptr + nbytes), from its memory map: "" when it may (or when
    there is no map to read, off Linux). A raw pointer carries no writeable flag; a run writing into
    a read-only mapping (a read-only mmap) would kill the process with SIGSEGV."""
    if nbytes <= 0:
        return ""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return ""
    covered, end = ptr, ptr + nbytes
    for line in lines:  # ascending addresses
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if hi <= covered:
            continue
        if lo > covered:
            break
        if "w" not in fields[1]:
            return f"read-only memory (mapped {fields[1]}: a read-only mmap or file)"
        covered = hi
        if covered >= end:
            return ""
    return "memory that is not mapped"


class IOBinding:
    """onnxruntime's IOBinding: inputs and outputs bound to CPU or GPU memory ahead of runs.

    Inputs: numpy arrays (bind_cpu_input), kiln.Tensor / OrtValue (bind_ortvalue_input; DLPack from
    torch or CuPy through kiln.Tensor.from_dlpack), or raw device pointers (bind_input). Outputs: a
    device to leave them on (bind_output(name, "cuda")), a caller's buffer (buffer_ptr), or a
    kiln.Tensor to write in place. A CUDA engine reads GPU inputs and writes GPU outputs on the device
    with no host copy. Runs finish before run_with_iobinding returns, so synchronize_* have nothing to
    wait for.
    """

    def __init__(self, session: "InferenceSession") -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, Any] = {}  # name -> Tensor, or (device, device_id) to allocate
        self._results: dict[str, Tensor] = {}

    def _check_input(self, name: str) -> None:
        if name not in self._session._input_index:
            raise _unknown_name("input", name, self._session._inputs)

    def _check_output(self, name: str) -> None:
        if name not in self._session._output_index:
            raise _unknown_name("output", name, self._session._outputs)

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        self._check_input(name)
        self._inputs[name] = np.asarray(arr_on_cpu)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int],
                   buffer_ptr: int) -> None:
        """Binds memory the caller owns (and keeps alive while bound): a pointer on `device_type`
        ("cpu" or "cuda") holding a dense tensor of numpy dtype `element_type` and `shape`."""
        self._check_input(name)
        self._inputs[name] = Tensor.from_pointer(int(buffer_ptr), list(shape), element_type, str(device_type).lower(),
                                                 int(device_id))

    def bind_ortvalue_input(self, name: str, ortvalue: Tensor) -> None:
        self._check_input(name)
        self._inputs[name] = ortvalue

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        self._check_output(name)
        device = str(device_type).lower()
        if device not in ("cpu", "cuda"):
            raise _error("InvalidArgument", f"bind_output '{name}': unknown device type '{device_type}'")
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise _error("InvalidArgument", f"bind_output '{name}': a buffer_ptr needs element_type and shape")
            if device == "cpu":
                nbytes = int(np.prod([int(d) for d in shape], dtype=np.int64)) * np.dtype(element_type).itemsize
                why = _unwritable_memory(int(buffer_ptr), nbytes)
                if why:
                    raise _error("InvalidArgument", f"bind_output '{name}': buffer_ptr points to {why}; runs write "
                                 "their outputs there: bind writable memory (e.g. a numpy array's ctypes.data)")
            self._outputs[name] = Tensor.from_pointer(int(buffer_ptr), list(shape), element_type, device, int(device_id))
        else:
            self._outputs[name] = (device, int(device_id))

    def bind_ortvalue_output(self, name: str, ortvalue: Tensor) -> None:
        self._check_output(name)
        self._outputs[name] = ortvalue

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results.clear()

    def synchronize_inputs(self) -> None:
        pass

    def synchronize_outputs(self) -> None:
        pass

    def get_outputs(self) -> list[Tensor]:
        """The outputs of the last run, in binding order (every output when none was bound)."""
        names = list(self._outputs) or [o.name for o in self._session._outputs]
        missing = [n for n in names if n not in self._results]
        if missing:
            raise _error("InvalidArgument", f"no run has produced {missing[0]!r} yet: call run_with_iobinding first")
        return [self._results[n] for n in names]

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [t.numpy() for t in self.get_outputs()]


_async_lock = threading.Lock()
_async_workers: concurrent.futures.ThreadPoolExecutor | None = None


def _async_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The workers that run InferenceSession.run_async calls (made on first use)."""
    global _async_workers
    with _async_lock:
        if _async_workers is None:
            _async_workers = concurrent.futures.ThreadPoolExecutor(max_workers=max(4, os.cpu_count() or 1),
                                                                   thread_name_prefix="kiln-run-async")
        return _async_workers


# kiln's dtype names (ProfileEvent shapes, "float32[1,3]") as ONNX Runtime's profiles name them.
_ORT_TYPE_NAMES = {"float32": "float", "float64": "double", "bfloat16": "bfloat16", "float16": "float16", "bool": "bool",
                   "string": "string"}


def _ort_type_shape(spec: str) -> dict | None:
    """"float32[1,3,224,224]" as ONNX Runtime writes a tensor in a profile: {"float": [1, 3, 224, 224]}."""
    dtype, sep, dims = spec.partition("[")
    if not sep:
        return None
    try:
        shape = [int(d) for d in dims.rstrip("]").split(",") if d]
    except ValueError:
        return None
    return {_ORT_TYPE_NAMES.get(dtype, dtype): shape}


def _ort_profile_events(records: list[tuple[ProfileEvent, float]], pid: int, init_us: float, started: bool) -> list[dict]:
    """ONNX Runtime's profile events for (event, its context's trace start in µs after the session began)."""
    events = []
    if not started:
        events.append({"cat": "Session", "pid": pid, "tid": pid, "dur": int(init_us), "ts": 0, "ph": "X",
                       "name": "session_initialization", "args": {}})
    for ev, origin in sorted(records, key=lambda r: r[1] + r[0].start_us):
        ts = int(origin + ev.start_us)
        if ev.step < 0:
            events.append({"cat": "Session", "pid": pid, "tid": pid, "dur": int(ev.dur_us), "ts": ts, "ph": "X",
                           "name": "model_run", "args": {"run": ev.run}})
            continue
        args = {"op_name": ev.op, "provider": CUDA_PROVIDER if ev.device == "cuda" else CPU_PROVIDER,
                "node_index": str(ev.step),
                "input_type_shape": [t for t in map(_ort_type_shape, ev.inputs) if t is not None],
                "output_type_shape": [t for t in map(_ort_type_shape, ev.outputs) if t is not None],
                "output_size": str(ev.output_bytes),
                "kernel": ev.kernel, "tactic": ev.tactic, "run": ev.run}
        events.append({"cat": "Node", "pid": pid, "tid": pid, "dur": int(ev.dur_us), "ts": ts, "ph": "X",
                       "name": f"{ev.name}_kernel_time", "args": args})
    return events


class InferenceSession:
    """Runs an ONNX model (.onnx) or a kiln engine (.kiln) with onnxruntime's session API.

    providers: names or (name, options) tuples; CUDA is used when CUDAExecutionProvider comes first
    and CUDA is usable, else the CPU (an unknown or unavailable provider is skipped with a warning, as
    onnxruntime does). CUDA options kiln reads:
    "precision" ("fp32", "tf32", "fp16", "bf16", "best"; TensorRT's "trt_fp16_enable"/"trt_bf16_enable" too) and
    "enable_cuda_graph" (kiln replays CUDA graphs by default; False turns them off), and shape profiles, tuning and
    the timing cache as TensorRT's provider names them (see _build_settings). A session may be run from
    several threads at once (each concurrent run gets its own execution context).
    """

    def __init__(
        self,
        path_or_bytes: Any,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Sequence[dict] | None = None,
        **kwargs: Any,
    ) -> None:
        self._sess_options = sess_options or SessionOptions()
        opts = self._sess_options
        names = _provider_names(providers)
        device = "cuda" if names and names[0] == CUDA_PROVIDER else "cpu"
        # ORT's levels map onto kiln's: disable → 0, basic → 1 (folding, cleanup), extended/all → 2 (+ fusions).
        level = opts.graph_optimization_level
        opt_level = {GraphOptimizationLevel.ORT_DISABLE_ALL: 0, GraphOptimizationLevel.ORT_ENABLE_BASIC: 1}.get(level, 2)
        # Fusions fire only into ops the target device has kernels for (the builder checks), so
        # CUDA sessions take the same levels as CPU ones.
        self._threads = max(0, int(opts.intra_op_num_threads or 0))
        self._max_shape_plans = int(opts._config.get("kiln.max_shape_plans", "0"))
        if self._threads > 1024:  # the OpenMP runtime exits the process when it cannot make them
            raise ValueError(f"SessionOptions.intra_op_num_threads {self._threads}: at most 1024 (0: all cores)")
        if opts.optimized_model_filepath:
            warnings.warn(
                "SessionOptions.optimized_model_filepath: kiln does not write optimized .onnx models (its optimized "
                "form is the engine: session.engine.save('model.kiln')); nothing was written",
                stacklevel=2,
            )
        severity = int(opts.log_severity_level)
        if severity >= 3:
            set_default_logger_severity(severity)

        cuda_options = _cuda_provider_options(providers, provider_options)
        if str(cuda_options.get("device_id", "0")).strip() not in ("0", ""):
            # Not silently GPU 0: kiln has no device index yet (issue #42); the process's GPU is chosen
            # with CUDA_VISIBLE_DEVICES, which renumbers the GPUs it lists from 0.
            raise ValueError(f"CUDAExecutionProvider device_id {cuda_options['device_id']}: kiln runs on CUDA device 0 of "
                             f"the process; choose the GPU with CUDA_VISIBLE_DEVICES={cuda_options['device_id']} instead")
        precision, self._cuda_graphs = _cuda_settings(cuda_options)
        self._provider_options = {CUDA_PROVIDER: {str(k): str(v) for k, v in cuda_options.items()}} if device == "cuda" else {}
        self._load_start = time.time()
        self._mono_start = time.monotonic()  # profile timestamps count from here (ONNX Runtime's do from session creation)
        self._engine = _open_engine(path_or_bytes, device, opt_level, precision if device == "cuda" else "fp32",
                                    opts._config.get("kiln.on_mismatch", "error"), verbose=severity <= 1,
                                    threads=self._threads, **_build_settings(cuda_options))
        self._load_ms = (time.time() - self._load_start) * 1e3
        if device == "cuda" and self._engine.device != "cuda":
            warnings.warn("the engine file was built for the CPU: CUDAExecutionProvider does not apply to it", stacklevel=2)
        self._providers = [CUDA_PROVIDER, CPU_PROVIDER] if self._engine.device == "cuda" else [CPU_PROVIDER]
        for p in self._providers:
            self._provider_options.setdefault(p, {})
        self._all_inputs = list(self._engine.inputs)
        self._inputs_by_name = {i.name: i for i in self._all_inputs}
        # Inputs backed by an initializer (weights listed as inputs before IR 4) are overridable
        # initializers, not inputs a caller must feed.
        self._inputs = [i for i in self._all_inputs if not i.has_default]
        self._overridable = [i for i in self._all_inputs if i.has_default]
        self._input_index = {i.name: k for k, i in enumerate(self._all_inputs)}
        self._outputs = list(self._engine.outputs)
        self._output_index = {o.name: i for i, o in enumerate(self._outputs)}
        # Outputs of a ZipMap (scikit-learn classifiers' probabilities): the engine gives the [N, C]
        # tensor, run() the list of {label: probability} onnxruntime gives.
        self._zipmaps = _zipmaps(self._engine.metadata())
        # Map inputs a DictVectorizer or a CastMap reads: the engine takes the row the node makes, run()
        # the {key: value} map onnxruntime takes.
        self._map_inputs = {**_dict_vectorizers(self._engine.metadata(), self._inputs_by_name),
                            **_cast_maps(self._engine.metadata(), self._inputs_by_name)}
        self._profiling = bool(opts.enable_profiling)
        self._profile_contexts: list[tuple[ExecutionContext, float]] = []  # with its trace's start, µs after _mono_start
        self._fallback = True  # disable_fallback(): stored; kiln never retries a failed run elsewhere
        self._profile_started = False  # the first profile holds session_initialization
        self._pool_lock = threading.Lock()
        self._pool: list[ExecutionContext] = [self._new_context()]
        self._model_path = os.fspath(path_or_bytes) if isinstance(path_or_bytes, (str, os.PathLike)) else None

    # -- metadata
    @property
    def engine(self) -> Engine:
        """The kiln Engine behind this session (save it with ``sess.engine.save("model.kiln")``)."""
        return self._engine

    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(i, map_input=self._map_inputs.get(i.name)) for i in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg(o, self._zipmaps.get(o.name)) for o in self._outputs]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [NodeArg(i) for i in self._overridable]

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(self._engine.metadata())

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict]:
        return {p: dict(o) for p, o in self._provider_options.items()}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def get_profiling_start_time_ns(self) -> int:
        return int(self._load_start * 1e9)

    def set_providers(self, providers: Sequence[Any] | None = None, provider_options: Any = None) -> None:
        _provider_names(providers)  # validated; an engine's device is fixed once built

    # -- profiling
    def end_profiling(self) -> str:
        """Writes the runs recorded since profiling began (SessionOptions.enable_profiling) in ONNX
        Runtime's profile format, named <profile_file_prefix>_<date>.json, and returns its name ("" when
        profiling is off). Later runs start a new profile.

        The file is a JSON list of events with ONNX Runtime's fields (cat, name, ph, ts, dur, pid, tid,
        args), so scripts that read ONNX Runtime's profiles read it: "session_initialization" (the
        build or load) and one "model_run" per run (cat "Session"), and one "<node>_kernel_time" per
        step (cat "Node"; args op_name, provider, node_index, input_type_shape, output_type_shape,
        output_size, and kiln's kernel, tactic and run). ts and dur are microseconds from the session's
        creation. A list of complete ("X") events is also a Chrome trace: chrome://tracing and
        Perfetto open it."""
        if not self._profiling:
            return ""
        with self._pool_lock:
            contexts = list(self._profile_contexts)
        records = [(ev, origin) for ctx, origin in contexts for ev in ctx.take_profile()]
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime())
        path = f"{self._sess_options.profile_file_prefix}_{stamp}.json"
        k = 1
        while os.path.exists(path):
            k += 1
            path = f"{self._sess_options.profile_file_prefix}_{stamp}_{k}.json"
        events = _ort_profile_events(records, os.getpid(), self._load_ms * 1e3, self._profile_started)
        self._profile_started = True
        with open(path, "w", encoding="utf-8") as f:
            # Names come from the model: bytes that are not UTF-8 (surrogate-escaped) are written as \udcNN.
            f.write("[\n" + ",\n".join(json.dumps(e) for e in events) + "\n]\n")
        return path

    # -- running
    def _new_context(self) -> ExecutionContext:
        ctx = self._engine.create_context()
        if self._cuda_graphs is not None:
            ctx.set_cuda_graphs(self._cuda_graphs)
        if self._threads:
            ctx.set_num_threads(self._threads)
        if self._max_shape_plans:
            ctx.max_shape_plans = self._max_shape_plans
        if self._profiling:
            ctx.set_profiling(True)  # its events' start_us count from here
            origin_us = (time.monotonic() - self._mono_start) * 1e6
            with self._pool_lock:
                self._profile_contexts.append((ctx, origin_us))
        return ctx

    def _acquire(self) -> ExecutionContext:
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return self._new_context()

    def _release(self, ctx: ExecutionContext) -> None:
        with self._pool_lock:
            self._pool.append(ctx)

    def _with_context(self, run_options: RunOptions | None, fn):
        """fn(ctx, stop): the run on a pooled context, given the options' stop request (None without
        options)."""
        ctx = self._acquire()
        try:
            if run_options is None:
                return fn(ctx, None)
            run_options._check()  # set before the run: it does not start
            ctx.set_run_timeout(float(run_options.run_timeout_s or 0))
            try:
                result = fn(ctx, run_options._stop)
            finally:
                ctx.set_run_timeout(0.0)
            run_options._check()  # set after the run's last step: its caller still asked it to stop
            return result
        finally:
            self._release(ctx)

    def run(
        self,
        output_names: Sequence[str] | None,
        input_feed: dict[str, Any],
        run_options: RunOptions | None = None,
    ) -> list[Any]:
        """Runs the model; returns the requested outputs (all when output_names is None/empty)."""
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of name → array, got {type(input_feed).__name__}")
        indices = self._output_indices(output_names)
        if self._map_inputs:
            input_feed = {k: _as_input_row(v, self._map_inputs[k], self._inputs_by_name[k])
                          if k in self._map_inputs else v for k, v in input_feed.items()}
        feed = _normalize_feed(self._all_inputs, input_feed, self._inputs_by_name)
        if any(isinstance(v, Tensor) for v in feed.values()):
            return self.run_with_ort_values(output_names, feed, run_options)
        outputs = self._with_context(run_options, lambda ctx, stop: ctx.run(feed, stop))
        if self._zipmaps:
            outputs = [_as_zipmap(v, self._zipmaps[o.name]) if o.name in self._zipmaps else v
                       for o, v in zip(self._outputs, outputs)]
        return outputs if indices is None else [outputs[i] for i in indices]

    def run_async(self, output_names: Sequence[str] | None, input_feed: dict[str, Any], callback: Any, user_data: Any,
                  run_options: RunOptions | None = None) -> None:
        """onnxruntime's run_async: runs the model on a worker thread and returns at once; the worker then
        calls ``callback(results, user_data, err)``: the outputs run() would return and err "" on
        success; on failure results [] and err the error's message (nothing is raised to the caller).
        As in onnxruntime, a feed that is not a dict or misses a required input raises at once
        (ValueError). Runs go to a pool of workers shared by all sessions (at most max(4, cores) at
        once; more calls wait their turn)."""
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of name → array, got {type(input_feed).__name__}")
        missing = [i.name for i in self._inputs if i.name not in input_feed]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({list(input_feed)}).")

        def work() -> None:
            try:
                results, err = self.run(output_names, input_feed, run_options), ""
            except Exception as e:  # noqa: BLE001 - every failure goes to the callback, as onnxruntime does
                results, err = [], str(e)
            try:
                callback(results, user_data, err)
            except BaseException:  # the callback's own error: reported as a thread's is, not kept unseen by the pool
                threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), threading.current_thread())))

        _async_pool().submit(work)

    def disable_fallback(self) -> None:
        """onnxruntime retries a run that failed in its GPU provider on the CPU unless this is called.
        kiln never does (a session's engine is built for one device; a failed run raises): stored only."""
        self._fallback = False

    def enable_fallback(self) -> None:
        """Stored only (see disable_fallback): kiln does not retry failed runs on another device."""
        self._fallback = True

    def _output_indices(self, output_names: Sequence[str] | None) -> list[int] | None:
        if not output_names:
            return None
        indices = []
        for name in output_names:
            if name not in self._output_index:
                raise _unknown_name("output", name, self._outputs)
            indices.append(self._output_index[name])
        return indices

    def _ordered_inputs(self, feed: dict[str, Any]) -> list[Any]:
        ordered = []
        for info in self._all_inputs:
            value = feed.get(info.name)
            if value is None and not info.has_default:
                raise _error("InvalidArgument", f"input '{info.name}' was not given (the model's inputs are: "
                             + ", ".join(repr(i.name) for i in self._inputs) + ")")
            ordered.append(value)
        return ordered

    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: dict[str, Any],
                            run_options: RunOptions | None = None) -> list[Tensor]:
        """Like run(), with kiln.Tensor (OrtValue) inputs on the CPU or the engine's GPU (numpy arrays
        also accepted); returns kiln.Tensors."""
        indices = self._output_indices(output_names)
        feed = _normalize_feed(self._all_inputs, input_dict_ort_values, self._inputs_by_name)
        ordered = self._ordered_inputs(feed)
        outputs = self._with_context(run_options,
                                     lambda ctx, stop: ctx.run_into(ordered, [None] * len(self._outputs), stop))
        return outputs if indices is None else [outputs[i] for i in indices]

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None) -> None:
        """Runs with the binding's inputs; outputs go where they are bound (get_outputs() returns them)."""
        ordered = self._ordered_inputs(iobinding._inputs)
        bound: list[Any] = [None] * len(self._outputs)
        for name, target in iobinding._outputs.items():
            if isinstance(target, Tensor):
                bound[self._output_index[name]] = target
            else:
                prev = iobinding._results.get(name)  # reuse last run's device buffer when it still fits
                if prev is not None and prev.device_name() == target[0]:
                    bound[self._output_index[name]] = prev
        results = self._with_context(run_options, lambda ctx, stop: ctx.run_into(ordered, bound, stop))
        for k, o in enumerate(self._outputs):
            target = iobinding._outputs.get(o.name)
            if isinstance(target, Tensor) and results[k] is not target:
                got = results[k]
                raise _error("InvalidArgument",
                             f"output '{o.name}' is bound to a {target.data_type()} {target.shape()} tensor on "
                             f"{target.device_name()}, but the run made {got.data_type()} {got.shape()} on "
                             f"{got.device_name()}: bind a buffer of that dtype and shape (or bind the output to a device)")
        out: dict[str, Tensor] = {}
        for k, o in enumerate(self._outputs):
            t = results[k]
            target = iobinding._outputs.get(o.name)
            if isinstance(t, Tensor) and isinstance(target, tuple) and t.device_name() != target[0]:
                # Not written in place (first run, or the shape changed): move it where it was bound.
                t = Tensor.from_numpy(t.numpy(), target[0], target[1])
            out[o.name] = t
        iobinding._results = out

    def __repr__(self) -> str:
        src = self._model_path or "<bytes>"
        return f"kiln.InferenceSession({src!r}, device={self._engine.device!r})"


from . import capi  # noqa: E402  (kiln.capi.onnxruntime_pybind11_state: ONNX Runtime's module path, aliased)
