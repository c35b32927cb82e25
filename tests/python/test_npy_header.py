"""kiln's .npy reader against NumPy itself (issue 50 item 9): every header below is generated here,
run through np.load and through kiln's reader (the one `kiln run -i`, calibration data and `compare`
use), and kiln must accept exactly what NumPy accepts, with the same dtype, shape and values — or,
for a dtype kiln has no type for, say Unsupported. What NumPy refuses kiln refuses, naming the file.
NumPy is the oracle, so the table needs no expected column: a case documents a rule by its name."""

from __future__ import annotations

import ast
import io
import re
import struct
import subprocess
import warnings

import numpy as np
import pytest

import kiln

from test_hostile import KILN

# Enough data for any shape below; bools need 0/1 bytes to compare as NumPy keeps them.
DATA = bytes((i * 37 + 11) % 251 for i in range(4096))
BOOL_DATA = bytes((i * 5) % 3 == 0 for i in range(4096))
# The type codes kiln reads (util/npy.cpp); NumPy takes more spellings ('float32', '<U2', ...).
KILN_DESCR = re.compile(r"[<>|=]?(f2|f4|f8|i1|i2|i4|i8|u1|u2|u4|u8|b1|c8|c16)")


def npy(header: str, version=(1, 0), data: bytes | None = None, hlen: int | None = None) -> bytes:
    raw = header.encode("latin1" if version[0] < 3 else "utf8")
    if data is None:
        data = BOOL_DATA if "b1" in header else DATA
    n = len(raw) if hlen is None else hlen
    length = struct.pack("<H", n) if version[0] == 1 else struct.pack("<I", n)
    return b"\x93NUMPY" + bytes(version) + length + raw + data


def hdr(descr="'<f4'", fortran="False", shape="(2, 3)") -> str:
    return f"{{'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, }}"


GOOD = hdr()
CASES = {
    # Duplicate keys: the last value wins, as in a Python dict (kiln took the first).
    "dup_descr": "{'descr': '<i4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "dup_shape_transposed": "{'descr': '<f4', 'shape': (3, 2), 'fortran_order': False, 'shape': (2, 3)}",
    "dup_fortran_last_true": "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'fortran_order': True}",
    "dup_fortran_last_false": "{'fortran_order': True, 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "dup_earlier_value_invalid": "{'descr': '<f4', 'fortran_order': False, 'shape': [1], 'shape': (2, 3)}",
    "dup_last_value_invalid": "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'shape': [1]}",
    "dup_earlier_value_exotic": "{'shape': {1, (2,)}, 'shape': -1+2j, 'shape': ..., 'shape': set(), 'descr': '<f4', "
                                "'fortran_order': False, 'shape': (2, 3)}",
    "dup_earlier_unhashable": "{'shape': {[1]: 2}, 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    # Dims: Python ints in any spelling, nothing else.
    "dim_float": hdr(shape="(2.0, 3)"),
    "dim_exponent": hdr(shape="(2e0, 3)"),
    "dim_hex": hdr(shape="(0x2, 3)"),
    "dim_octal_binary": hdr(shape="(0o2, 0b11)"),
    "dim_underscore": hdr(shape="(1_0, 3)"),
    "dim_bad_underscore": hdr(shape="(1__0, 3)"),
    "dim_leading_zero": hdr(shape="(02, 3)"),
    "dim_zeros": hdr(shape="(00, 3)"),
    "dim_minus_zero": hdr(shape="(-0, 3)"),
    "dim_plus": hdr(shape="(+2, 3)"),
    "dim_double_sign": hdr(shape="(--2, 3)"),
    "dim_negative": hdr(shape="(-1, 3)"),
    "dim_bool": hdr(shape="(True, 3)"),
    "dim_huge": hdr(shape="(100000000000000000000000000000, 1)"),
    "dim_parenthesized": hdr(shape="((2), 3)"),
    "dim_arithmetic": hdr(shape="(1+1, 3)"),
    "dim_string": hdr(shape="('2', 3)"),
    "dim_long_v1": hdr(shape="(2L, 3L)"),
    "dim_long_v3": ("v3", hdr(shape="(2L, 3)")),
    "dim_lowercase_long": hdr(shape="(2l, 3)"),
    # Shapes.
    "shape_scalar": hdr(shape="()"),
    "shape_one": hdr(shape="(5,)"),
    "shape_int_not_tuple": hdr(shape="(5)"),
    "shape_list": hdr(shape="[2, 3]"),
    "shape_empty_dim": hdr(shape="(0, 3)"),
    "shape_trailing_comma": hdr(shape="(2, 3,)"),
    "shape_lone_comma": hdr(shape="(,)"),
    "shape_none": hdr(shape="None"),
    # Keys.
    "missing_descr": "{'fortran_order': False, 'shape': (2, 3)}",
    "missing_fortran_order": "{'descr': '<f4', 'shape': (2, 3)}",
    "missing_shape": "{'descr': '<f4', 'fortran_order': False}",
    "extra_key": "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}",
    "empty_dict": "{}",
    "not_a_dict": "[('descr', '<f4'), ('fortran_order', False), ('shape', (2, 3))]",
    "bytes_key": "{b'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "int_key": "{1: 2, 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    # Spelling: whitespace, commas, quotes, prefixes, escapes, comments.
    "spaces": "{ 'descr' : '<f4' ,\t'fortran_order' :False,'shape':(  2 ,3 ) }",
    "newlines_inside": "{'descr': '<f4',\n  'fortran_order': False,  # a comment\n 'shape': (2,\n 3)}\n",
    "no_trailing_comma": "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "double_trailing_comma": "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3),,}",
    "leading_comma": "{, 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "leading_spaces": "   " + GOOD,
    "leading_comment_line": "# hi\n" + GOOD,
    "leading_newline_indented": "\n  " + GOOD,
    "trailing_spaces_newline": GOOD + "   \n",
    "trailing_garbage": GOOD + " ;",
    "trailing_second_dict": GOOD + " {}",
    "missing_close": GOOD[:-1],
    "double_quotes": '{"descr": "<f4", "fortran_order": False, "shape": (2, 3)}',
    "u_and_r_prefix": "{u'descr': r'<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "bytes_descr": hdr(descr="b'<f4'"),
    "f_string": hdr(descr="f'<f4'"),
    "concatenated_key": "{'de' 'scr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "str_bytes_concat": "{'de' b'scr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",
    "escaped_descr": hdr(descr="'\\x3cf4'"),
    "triple_quoted": hdr(descr="'''<f4'''"),
    "unclosed_string": hdr(descr="'<f4"),
    "fortran_int": hdr(fortran="0"),
    "fortran_string": hdr(fortran="'True'"),
    "fortran_lowercase": hdr(fortran="true"),
    "nul_byte": GOOD + "\0",
    "latin1_in_descr": hdr(descr="'<f4\xe9'"),
    "non_ascii_outside_strings": GOOD + "\xe9",
    # Dtypes: either byte order, bools, complex; other spellings NumPy takes.
    "big_endian_f4": hdr(descr="'>f4'"),
    "big_endian_i8": hdr(descr="'>i8'"),
    "big_endian_f2": hdr(descr="'>f2'"),
    "big_endian_c8": hdr(descr="'>c8'"),
    "little_c16": hdr(descr="'<c16'"),
    "native_i4": hdr(descr="'=i4'"),
    "no_order_f8": hdr(descr="'f8'"),
    "pipe_u1": hdr(descr="'|u1'"),
    "pipe_i8": hdr(descr="'|i8'"),
    "bool_pipe": hdr(descr="'|b1'"),
    "bool_little": hdr(descr="'<b1'"),
    "bool_big": hdr(descr="'>b1'"),
    "dtype_name": hdr(descr="'float32'"),
    "dtype_unicode": hdr(descr="'<U2'"),
    "dtype_invalid": hdr(descr="'<f3'"),
    "dtype_structured": hdr(descr="[('a', '<f4')]", shape="(2,)"),
    "dtype_empty": hdr(descr="''"),
    # Fortran order: the same values as NumPy, in C order.
    "fortran_3d": hdr(fortran="True", shape="(2, 3, 4)"),
    "fortran_1d": hdr(fortran="True", shape="(5,)"),
    "fortran_scalar": hdr(fortran="True", shape="()"),
    "fortran_empty": hdr(fortran="True", shape="(0, 3)"),
    "fortran_big_endian": hdr(descr="'>i2'", fortran="True", shape="(3, 4)"),
}

BLOBS = {
    # Versions: 1.0, 2.0 and 3.0 only.
    "version_2": npy(GOOD, (2, 0)),
    "version_3": npy(GOOD, (3, 0)),
    "version_3_utf8_descr": npy(hdr(descr="'<f4\u00e9'"), (3, 0)),
    "version_3_invalid_utf8": npy(GOOD, (3, 0))[:12] + GOOD.encode()[:-1] + b"\xff" + DATA,
    "version_0": npy(GOOD, (0, 0)),
    "version_1_1": npy(GOOD, (1, 1)),
    "version_4": npy(GOOD, (4, 0)),
    # The length field against the header.
    "hlen_past_end_of_file": npy(GOOD, data=b"", hlen=len(GOOD) + 10),
    "hlen_cuts_the_dict": npy(GOOD, hlen=len(GOOD) - 5),
    "hlen_takes_data_in": npy(GOOD, hlen=len(GOOD) + 7),
    "hlen_takes_spaces_in": npy(GOOD, data=b"    " + DATA, hlen=len(GOOD) + 4),
    "header_too_long": npy(GOOD + " " * 10001),
    "header_at_the_limit": npy(GOOD + " " * (10000 - len(GOOD))),
    # Data against the shape.
    "data_short": npy(GOOD, data=DATA[:23]),
    "data_exact": npy(GOOD, data=DATA[:24]),
    "data_extra": npy(GOOD, data=DATA[:30]),
    "no_magic": b"\x93NUMPX\x01\x00" + npy(GOOD)[8:],
    "truncated_magic": b"\x93NUMPY\x01",
    "truncated_length": b"\x93NUMPY\x02\x00\x10\x00",
}
for name, case in CASES.items():
    if isinstance(case, tuple):
        BLOBS[name] = npy(case[1], (3, 0))
    else:
        BLOBS[name] = npy(case)


def numpy_load(blob: bytes):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Python 2 headers: NumPy warns and reads them
        try:
            return np.load(io.BytesIO(blob), allow_pickle=False), None
        except Exception as e:  # noqa: BLE001 - NumPy refuses with ValueError, TypeError, TokenError, ...
            return None, e


def spelled_descr(blob: bytes):
    """The descr as the header spells it (the last one given), read as NumPy reads the header text."""
    f = io.BytesIO(blob)
    version = np.lib.format.read_magic(f)
    (n,) = struct.unpack("<H" if version == (1, 0) else "<I", f.read(2 if version == (1, 0) else 4))
    text = f.read(n).decode("utf8" if version == (3, 0) else "latin1")
    try:
        d = ast.literal_eval(text)
    except SyntaxError:
        d = ast.literal_eval(np.lib.format._filter_header(text))  # Python 2's 2L, as NumPy does for 1.0/2.0
    return d["descr"]


@pytest.mark.parametrize("name", sorted(BLOBS))
def test_kiln_reads_npy_headers_as_numpy_does(tmp_path, name):
    blob = BLOBS[name]
    path = tmp_path / f"{name}.npy"
    path.write_bytes(blob)
    want, _ = numpy_load(blob)
    if want is None:
        with pytest.raises(kiln.KilnError) as e:
            kiln._kiln._read_npy(str(path))
        assert str(path) in str(e.value), e.value
        return
    descr = spelled_descr(blob)
    if not (isinstance(descr, str) and KILN_DESCR.fullmatch(descr)):
        with pytest.raises(kiln.KilnError, match="not supported") as e:
            kiln._kiln._read_npy(str(path))
        assert e.value.code == "Unsupported" and str(path) in str(e.value)
        return
    got = kiln._kiln._read_npy(str(path))
    native = want.astype(want.dtype.newbyteorder("="), order="C")  # ascontiguousarray makes a 0-d array 1-d
    assert got.dtype == native.dtype and got.shape == native.shape, (got.dtype, got.shape, native.dtype, native.shape)
    assert got.tobytes() == native.tobytes()


def test_duplicate_shape_no_longer_transposes(tmp_path):
    """The audit's case: the first 'shape' was taken, so a (2, 3) array came back as (3, 2)."""
    path = tmp_path / "dup.npy"
    path.write_bytes(npy(CASES["dup_shape_transposed"]))
    assert kiln._kiln._read_npy(str(path)).shape == (2, 3)


def test_the_kiln_command_names_the_file_and_the_fault(tmp_path):
    from test_hostile import X, model, y_out
    from onnx import helper as h
    p = model(tmp_path, "m.onnx", [h.make_node("Relu", ["x"], ["y"])], [X], [y_out()])
    bad = tmp_path / "bad.npy"
    bad.write_bytes(npy(hdr(shape="(2.0, 3)")))
    r = subprocess.run([KILN, "run", str(p), "-i", f"x={bad}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert str(bad) in r.stderr and "shape (2.0, 3) holds a float (2.0), not an int" in r.stderr, r.stderr
    gone = tmp_path / "v0.npy"
    gone.write_bytes(npy(GOOD, (0, 0)))
    r = subprocess.run([KILN, "run", str(p), "-i", f"x={gone}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "format version 0.0 does not exist" in r.stderr, r.stderr
