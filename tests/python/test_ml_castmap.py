"""ai.onnx.ml CastMap reading a map input (map(int64, float) or map(int64, string)). kiln's values hold
no maps, so the importer makes the input the row [1, n] the node makes (src/onnx/importer.cpp) and
records the node's attributes; the Python session makes that row from the map it is given. Checked
against onnxruntime on the same maps for every cast_to and map_form (exact: the same floats, the same
strings, the same integers, NaN where onnxruntime has NaN), and the engine taking the row itself.
onnxruntime's Python binding cannot feed a map of strings, so those are checked against their meaning."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import kiln

OUT_TYPE = {"TO_FLOAT": TensorProto.FLOAT, "TO_STRING": TensorProto.STRING, "TO_INT64": TensorProto.INT64}


def castmap_model(cast_to: str, map_form: str, max_map: int | None = None, values=TensorProto.FLOAT, keys=TensorProto.INT64) -> bytes:
    attrs = {"cast_to": cast_to, "map_form": map_form}
    if max_map is not None:
        attrs["max_map"] = max_map
    node = helper.make_node("CastMap", ["m"], ["y"], domain="ai.onnx.ml", **attrs)
    mt = helper.make_map_type_proto(keys, helper.make_tensor_type_proto(values, None))
    out = helper.make_tensor_value_info("y", OUT_TYPE.get(cast_to, TensorProto.FLOAT), None)
    g = helper.make_graph([node], "castmap", [helper.make_value_info("m", mt)], [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 10
    return m.SerializeToString()


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    if want.dtype == object:
        assert got.tolist() == want.tolist()
    else:
        np.testing.assert_array_equal(got, want)  # NaN equals NaN here


# keys out of order, a NaN of each sign, ±inf, a value past int64, a float32 rounding, a tiny negative
MAPS = [
    {3: 1.5, 0: -2.25, 5: 1e10, 1: float("nan"), 2: 0.1, 4: 123456789.0},
    {0: float("inf"), 1: -float("nan"), 2: 3e30, 3: -1e-9, 9: 7.0, 6: -float("inf")},
    {8: 4.0},
]


@pytest.mark.parametrize("cast_to", ["TO_FLOAT", "TO_STRING", "TO_INT64"])
@pytest.mark.parametrize("map_form,max_map", [("DENSE", None), ("SPARSE", None), ("SPARSE", 4), ("SPARSE", 12)])
def test_castmap_matches_onnxruntime(cast_to, map_form, max_map):
    onx = castmap_model(cast_to, map_form, max_map)
    sess = kiln.InferenceSession(onx)
    for m in MAPS:
        # a fresh onnxruntime session per map: its binding keeps state after a failed feed
        want = ort.InferenceSession(onx, providers=["CPUExecutionProvider"]).run(None, {"m": m})[0]
        same(sess.run(None, {"m": m})[0], want)
    ref = ort.InferenceSession(onx, providers=["CPUExecutionProvider"])
    assert [(i.name, i.type) for i in sess.get_inputs()] == [(i.name, i.type) for i in ref.get_inputs()]
    assert not any("castmap" in k for k in sess.get_modelmeta().custom_metadata_map)


def test_castmap_engine_takes_the_row():
    """The engine (C++ API, the CLI) takes the row the node makes; a session of the saved engine takes
    the map."""
    onx = castmap_model("TO_FLOAT", "SPARSE", 5)
    engine = kiln.Engine.build_from_bytes(onx, base_dir=".")
    row = np.array([[1.0, 0.0, -3.5, 0.0, 2.0]], np.float32)
    np.testing.assert_array_equal(engine.create_context().run({"m": row})[0], row)
    got = kiln.InferenceSession(engine.serialize()).run(None, {"m": {4: 2.0, 2: -3.5, 0: 1.0, 7: 9.0}})[0]
    np.testing.assert_array_equal(got, row)
    dense = kiln.Engine.build_from_bytes(castmap_model("TO_INT64", "DENSE"), base_dir=".")
    for n in (1, 3):  # DENSE rows are as long as the map
        r = np.arange(n, dtype=np.int64).reshape(1, n)
        np.testing.assert_array_equal(dense.create_context().run({"m": r})[0], r)


def test_castmap_errors_name_what_is_wrong():
    sess = kiln.InferenceSession(castmap_model("TO_FLOAT", "SPARSE", 4))
    with pytest.raises(kiln.KilnError, match=r"input 'm': a SPARSE CastMap takes keys >= 0; got -1"):
        sess.run(None, {"m": {-1: 2.0, 1: 3.0}})
    for bad in ("x", True, 2**64):
        with pytest.raises(kiln.KilnError, match=r"input 'm' is a map with int64 keys; got the key"):
            sess.run(None, {"m": {bad: 1.0}})
    with pytest.raises(kiln.KilnError, match=r"input 'm' is a map of float values; got 'a' at key 0"):
        sess.run(None, {"m": {0: "a"}})
    for attrs, why in (((("TO_DOUBLE", "DENSE", None)), r"cast_to 'TO_DOUBLE' is not TO_FLOAT, TO_STRING or TO_INT64"),
                       (("TO_FLOAT", "ROWS", None), r"map_form 'ROWS' is not DENSE or SPARSE"),
                       (("TO_FLOAT", "SPARSE", 0), r"max_map 0 must be between 1 and 2\^31 - 1"),
                       (("TO_FLOAT", "SPARSE", 2**40), r"max_map 1099511627776 must be between")):
        with pytest.raises(kiln.KilnError, match=why):
            kiln.InferenceSession(castmap_model(*attrs))
    with pytest.raises(kiln.KilnError, match=r"reads map\(int64, float\) or map\(int64, string\); 'm' is a map of string keys"):
        kiln.InferenceSession(castmap_model("TO_FLOAT", "DENSE", keys=TensorProto.STRING))


def test_castmap_of_strings():
    """A map of strings (onnxruntime's binding cannot feed one): TO_STRING keeps them, TO_FLOAT and
    TO_INT64 read the number at each one's start as std::stof / std::stoll do (onnxruntime's kernel
    calls them): white space first, "12abc" is 12, "1.5" as an integer 1, hex floats; a value with no
    number at its start, or out of the type's range, is an error naming it."""
    m = {2: " 1.5", 0: "-2", 1: "7e3"}
    got = kiln.InferenceSession(castmap_model("TO_STRING", "DENSE", values=TensorProto.STRING)).run(None, {"m": m})[0]
    assert got.tolist() == [["-2", "7e3", " 1.5"]]
    sess = kiln.InferenceSession(castmap_model("TO_FLOAT", "SPARSE", 6, values=TensorProto.STRING))
    got = sess.run(None, {"m": {**m, 3: "0x1p3", 4: "12abc", 5: "-inf"}})[0]
    np.testing.assert_array_equal(got, np.array([[-2.0, 7000.0, 1.5, 8.0, 12.0, -np.inf]], np.float32))
    for bad in ("abc", "1e50", "1e-40", ""):
        with pytest.raises(kiln.KilnError, match=r"CastMap TO_FLOAT cannot read the value .* at key 0 as a float"):
            sess.run(None, {"m": {0: bad}})
    sess = kiln.InferenceSession(castmap_model("TO_INT64", "DENSE", values=TensorProto.STRING))
    got = sess.run(None, {"m": {1: " 42 ", 0: "-7", 2: "1.5", 3: "12abc", 4: "+9223372036854775807"}})[0]
    np.testing.assert_array_equal(got, np.array([[-7, 42, 1, 12, 2**63 - 1]], np.int64))
    for bad in ("x1", "9223372036854775808", " - 1"):
        with pytest.raises(kiln.KilnError, match=r"CastMap TO_INT64 cannot read the value .* at key 2 as an int64"):
            sess.run(None, {"m": {2: bad}})


def test_castmap_values_it_cannot_take():
    """Values that are no numbers, or too large for a float, are errors naming the key; a SPARSE row
    reads no value at or past max_map (onnxruntime's kernel stops there), so a bad one there is not
    looked at."""
    sess = kiln.InferenceSession(castmap_model("TO_FLOAT", "SPARSE", 4))
    np.testing.assert_array_equal(sess.run(None, {"m": {0: 1.0, 9: "junk"}})[0], np.array([[1.0, 0, 0, 0]], np.float32))
    for bad, why in ((None, r"is a map of float values; got None at key 1"), ([1, 2], r"is a map of float values; got \[1, 2\] at key 1"),
                     ("2", r"is a map of float values; got '2' at key 1"), (10**400, r"the value at key 1 is too large for a float")):
        with pytest.raises(kiln.KilnError, match=why):
            sess.run(None, {"m": {0: 1.0, 1: bad}})
    np.testing.assert_array_equal(sess.run(None, {"m": {1: np.float64(1e300), 2: np.int32(7)}})[0],
                                  np.array([[0, np.inf, 7, 0]], np.float32))
