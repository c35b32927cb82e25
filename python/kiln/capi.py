"""ONNX Runtime's ``onnxruntime.capi`` module paths, spelled under kiln.

Scripts written for ONNX Runtime import its exceptions and classes from its native module::

    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, InvalidArgument
    from onnxruntime.capi._pybind_state import get_available_providers

With ``onnxruntime`` replaced by ``kiln`` these imports work: ``kiln.capi.onnxruntime_pybind11_state``
and ``kiln.capi._pybind_state`` (ONNX Runtime's re-export of it) are registered on import of ``kiln``
and hold kiln's objects under ONNX Runtime's names. ``onnxruntime_inference_collection`` holds the
session classes. kiln raises the error classes it has (``InvalidArgument``, ``InvalidGraph``,
``NotImplemented``, ``NoSuchFile``, ``EngineError``, ``RuntimeException``, ``Fail``); a malformed
model file raises ``InvalidGraph``, which ``InvalidProtobuf`` names here too. ``NoModel``,
``ModelLoaded`` and ``EPFail`` are ONNX Runtime states kiln never reaches: they are distinct
``KilnError`` subclasses, so ``except`` clauses naming them work and catch nothing kiln raises.
"""

from __future__ import annotations

import sys
import types

import kiln as _k


class NoModel(_k.KilnError):
    """ONNX Runtime's error for a session without a model: kiln's sessions always have one (never raised)."""


class ModelLoaded(_k.KilnError):
    """ONNX Runtime's error for loading a second model into a session: kiln never raises it."""


class EPFail(_k.KilnError):
    """ONNX Runtime's execution-provider failure, after which it retries on the CPU (its fallback):
    kiln's device failures are RuntimeException and are not retried (never raised)."""


# The names ONNX Runtime's scripts import from its native module, where kiln has them.
_STATE_NAMES = {
    "Fail": _k.Fail,
    "InvalidArgument": _k.InvalidArgument,
    "InvalidGraph": _k.InvalidGraph,
    "InvalidProtobuf": _k.InvalidGraph,
    "NoSuchFile": _k.NoSuchFile,
    "NotImplemented": _k.NotImplemented,
    "RuntimeException": _k.RuntimeException,
    "EngineError": _k.EngineError,
    "NoModel": NoModel,
    "ModelLoaded": ModelLoaded,
    "EPFail": EPFail,
    "ExecutionMode": _k.ExecutionMode,
    "GraphOptimizationLevel": _k.GraphOptimizationLevel,
    "InferenceSession": _k.InferenceSession,
    "ModelMetadata": _k.ModelMetadata,
    "NodeArg": _k.NodeArg,
    "OrtValue": _k.OrtValue,
    "RunOptions": _k.RunOptions,
    "SessionIOBinding": _k.IOBinding,
    "SessionOptions": _k.SessionOptions,
    "get_all_providers": _k.get_all_providers,
    "get_available_providers": _k.get_available_providers,
    "get_device": _k.get_device,
    "get_version_string": _k.get_version_string,
    "set_default_logger_severity": _k.set_default_logger_severity,
    "set_seed": _k.set_seed,
}
_COLLECTION_NAMES = ("IOBinding", "InferenceSession", "ModelMetadata", "NodeArg", "OrtValue", "RunOptions", "SessionOptions")


def _module(name: str, doc: str, names: dict) -> types.ModuleType:
    m = types.ModuleType(f"{__name__}.{name}", doc)
    m.__dict__.update(names)
    m.__all__ = sorted(names)
    sys.modules[m.__name__] = m
    globals()[name] = m
    return m


onnxruntime_pybind11_state = _module("onnxruntime_pybind11_state",
                                     "onnxruntime.capi.onnxruntime_pybind11_state's names, as kiln has them.", _STATE_NAMES)
_pybind_state = _module("_pybind_state", "onnxruntime.capi._pybind_state's names, as kiln has them.", _STATE_NAMES)
onnxruntime_inference_collection = _module(
    "onnxruntime_inference_collection", "onnxruntime.capi.onnxruntime_inference_collection's classes, as kiln has them.",
    {n: getattr(_k, n) for n in _COLLECTION_NAMES})
