"""What kiln's CPU kernels may use in this process, as kiln itself reports it (an engine's "cpu_isa"
metadata): its own copies' features under KILN_CPU_ISA, and the ISA oneDNN dispatches to under
ONEDNN_MAX_CPU_ISA. Tests whose expectations depend on the instruction set (oneDNN's int8 kernels
need VNNI, its Winograd kernels AVX-512) read it rather than /proc/cpuinfo, so a run with the CPU
capped (scripts/test.sh's weakest-ISA pass) expects what the capped process really does."""

from __future__ import annotations

import functools

from onnx import TensorProto, helper


@functools.cache
def kiln_isa() -> frozenset[str]:
    import kiln  # noqa: PLC0415

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "isa",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return frozenset(kiln.Engine.build_from_bytes(m.SerializeToString()).metadata()["cpu_isa"].split())


def onednn_isa() -> str:
    """oneDNN's effective ISA here: sse41, avx, avx2, avx2_vnni, avx512_core, avx512_core_vnni, ..."""
    return next((w.split(":", 1)[1] for w in kiln_isa() if w.startswith("onednn:")), "")


def onednn_has_vnni() -> bool:
    return "vnni" in onednn_isa() or onednn_isa() in ("avx512_core_bf16", "avx512_core_amx")


def onednn_has_avx512() -> bool:
    return onednn_isa().startswith("avx512")
