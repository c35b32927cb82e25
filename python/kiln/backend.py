"""kiln as an onnx backend (``onnx.backend.base.Backend``).

    import kiln.backend
    rep = kiln.backend.prepare(model, device="CPU")
    outputs = rep.run([x, y])           # positional: the graph inputs that are not initializers

This is what onnx's own conformance runner drives (``onnx.backend.test.BackendTest(kiln.backend)``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from . import Engine, _normalize_feed, cuda_available


def _device_name(device: str) -> str:
    dev = Device(device)
    if dev.type == DeviceType.CPU:
        return "cpu"
    if dev.type == DeviceType.CUDA:
        return "cuda"
    raise ValueError(f"kiln: unsupported device {device!r}")


def _runtime_inputs(model: ModelProto) -> list[str]:
    """Names of the graph inputs a caller feeds: those not backed by an initializer."""
    initializers = {i.name for i in model.graph.initializer}
    initializers |= {i.values.name for i in model.graph.sparse_initializer}
    return [i.name for i in model.graph.input if i.name not in initializers]


class KilnBackendRep(BackendRep):
    """A prepared model: run() takes inputs positionally (or a dict by name)."""

    def __init__(self, engine: Engine, input_names: Sequence[str]) -> None:
        self.engine = engine
        self.input_names = list(input_names)
        self.output_names = [o.name for o in engine.outputs]
        self._infos = list(engine.inputs)
        self._context = engine.create_context()

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            if len(inputs) > len(self.input_names):
                raise ValueError(
                    f"kiln: got {len(inputs)} inputs, the model takes {len(self.input_names)} "
                    f"({', '.join(self.input_names)})"
                )
            feed = dict(zip(self.input_names, inputs))
        outputs = self._context.run(_normalize_feed(self._infos, feed))
        return namedtupledict("Outputs", self.output_names)(*outputs)


class KilnBackend(Backend):
    @classmethod
    def is_compatible(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            name = _device_name(device)
        except (ValueError, AttributeError):
            return False
        return name == "cpu" or cuda_available()

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> KilnBackendRep:
        """Builds an engine for `model` (a ModelProto, its serialized bytes, or a path to an .onnx).

        A ModelProto's external data must already be loaded (onnx.load does that by default).
        kwargs: opt_level (default 1), verbose.
        """
        dev = _device_name(device)
        opt_level = int(kwargs.get("opt_level", 1))
        verbose = bool(kwargs.get("verbose", False))
        if isinstance(model, (bytes, bytearray)):
            model = onnx.load_model_from_string(bytes(model))
        elif isinstance(model, str):
            engine = Engine.build(model, device=dev, opt_level=opt_level, verbose=verbose)
            return KilnBackendRep(engine, _runtime_inputs(onnx.load(model, load_external_data=False)))
        engine = Engine.build_from_bytes(model.SerializeToString(), device=dev, opt_level=opt_level, verbose=verbose)
        return KilnBackendRep(engine, _runtime_inputs(model))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Runs one node: inputs are given positionally for the node's non-empty inputs (or by name)."""
        model = make_node_model(node, inputs, outputs_info, kwargs.get("opset_version"))
        return cls.prepare(model, device, **kwargs).run(
            inputs if isinstance(inputs, dict) else list(inputs)
        )


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if isinstance(value, (list, tuple)):
        elem = np.asarray(value[0]) if value else np.zeros(0, np.float32)
        return helper.make_tensor_sequence_value_info(
            name, helper.np_dtype_to_tensor_dtype(elem.dtype), None
        )
    arr = np.asarray(value)
    elem_type = helper.np_dtype_to_tensor_dtype(arr.dtype)
    return helper.make_tensor_value_info(name, elem_type, arr.shape)


def make_node_model(
    node: NodeProto,
    inputs: Any,
    outputs_info: Sequence[tuple[Any, Sequence[int]]] | None = None,
    opset_version: int | None = None,
) -> ModelProto:
    """A one-node model whose input types come from the numpy `inputs`."""
    names = [n for n in node.input if n]
    if isinstance(inputs, dict):
        values = [inputs[n] for n in names]
    else:
        values = list(inputs)
        if len(values) != len(names):
            raise ValueError(f"kiln: node {node.op_type} has {len(names)} inputs, got {len(values)} values")
    graph_inputs = [_value_info(n, v) for n, v in zip(names, values)]
    if outputs_info:
        graph_outputs = [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
            for n, (dt, shape) in zip(node.output, outputs_info)
        ]
    else:
        graph_outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
    graph = helper.make_graph([node], f"kiln_run_node_{node.op_type}", graph_inputs, graph_outputs)
    opsets = [helper.make_opsetid("", opset_version or onnx.defs.onnx_opset_version())]
    if node.domain not in ("", "ai.onnx"):
        opsets.append(helper.make_opsetid(node.domain, 1 if node.domain != "ai.onnx.ml" else 5))
    model = helper.make_model(graph, opset_imports=opsets)
    if not outputs_info:
        try:  # give the outputs their types where onnx can infer them
            inferred = onnx.shape_inference.infer_shapes(model)
            if all(o.type.HasField("tensor_type") or o.type.HasField("sequence_type") for o in inferred.graph.output):
                model = inferred
        except Exception:  # noqa: BLE001 - kiln infers types itself; this is only a help
            pass
    return model


prepare = KilnBackend.prepare
run_model = KilnBackend.run_model
run_node = KilnBackend.run_node
supports_device = KilnBackend.supports_device
is_compatible = KilnBackend.is_compatible
