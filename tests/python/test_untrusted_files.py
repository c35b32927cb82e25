"""Calibration data and caches that cannot be turned against the user (issue 50): degenerate
statistics and forged cache ranges are errors naming the tensor, and the calibration cache is never
written through a planted symlink."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kiln
from test_quantization import build_int8, images, small_cnn


def test_all_nan_calibration_data_is_refused_naming_the_tensor():
    m = small_cnn(np.random.default_rng(3))
    nan = np.full((2, 3, 12, 12), np.nan, np.float32)
    with pytest.raises(kiln.KilnError, match=r"tensor 'x' had no finite values"):
        build_int8(m, [nan, nan])
    inf = np.full((2, 3, 12, 12), np.inf, np.float32)
    with pytest.raises(kiln.KilnError, match=r"tensor 'x' had no finite values"):
        build_int8(m, [inf])


@pytest.mark.parametrize("forged,want", [("1e300", "beyond"), ("nan", "invalid range"), ("inf", "invalid range"),
                                         ("-5", "invalid range")])
def test_forged_calibration_cache_ranges_are_refused_naming_the_tensor(tmp_path, forged, want):
    rng = np.random.default_rng(5)
    m = small_cnn(rng)
    cache = tmp_path / "calib.txt"
    build_int8(m, [images(rng, 2)], calibration_cache=str(cache))
    lines = cache.read_text().splitlines()
    # "<len> <name> <lo> <hi>": the first tensor's max becomes the forged value.
    parts = lines[1].split(" ")
    name = parts[1]
    parts[-1] = forged
    lines[1] = " ".join(parts)
    cache.write_text("\n".join(lines) + "\n")
    with pytest.raises(kiln.KilnError, match=f"tensor '{name}'.*{want}"):
        kiln.Engine.build_from_bytes(m.SerializeToString(), int8=True, calibration_cache=str(cache))


def test_calibration_cache_is_not_written_through_a_symlink(tmp_path):
    rng = np.random.default_rng(6)
    m = small_cnn(rng)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    cache = tmp_path / "calib.txt"
    os.symlink(victim, cache)
    os.symlink(victim, str(cache) + ".tmp")
    build_int8(m, [images(rng, 2)], calibration_cache=str(cache))
    assert victim.read_text() == "keep me"
    assert not cache.is_symlink() and cache.read_text().startswith("kiln-calibration 1 ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calib.txt", "calib.txt.tmp", "victim.txt"]
