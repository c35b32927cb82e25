"""The CUDA backend is loaded on demand (backends/cuda_module.h): libkiln.so, the `kiln` command and the
Python module link no CUDA library, and libkiln opens libkiln_cuda.so, beside it, the first time CUDA
is asked for. Without a loadable libkiln_cuda.so the CPU works unchanged, CUDA requests fail naming
the reason (dlopen's own), and get_available_providers() lists the CPU only, as onnxruntime-gpu's does
on a machine without CUDA. Checked on copies of the installed package without the module, with a
broken one, and with one whose CUDA runtime is missing, so it runs on any machine (a CUDA build or not,
with a GPU or not)."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import kiln

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.dirname(os.path.abspath(kiln.__file__))
MODULE = "libkiln_cuda.so"
MODEL = os.path.join(REPO, "examples", "tiny_cnn.onnx")
IMAGE = os.path.join(REPO, "examples", "tiny_cnn_input.npy")
# The libraries of CUDA's toolkit: none may be needed by what loads on a machine without CUDA.
CUDA_LIBS = re.compile(r"^lib(cudart|cublas\w*|cudnn\w*|nvrtc\w*|cuda)\.so")


def cuda_built() -> bool:
    """Whether the installed package was built with CUDA (it ships libkiln_cuda.so then)."""
    return os.path.exists(os.path.join(PACKAGE, "lib", MODULE))


def needed(path: str) -> list[str]:
    """The DT_NEEDED entries of an ELF file, by readelf."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def shipped() -> list[str]:
    """What loads where CUDA may be missing: libkiln, the command and the Python extension."""
    files = [os.path.join(PACKAGE, "lib", "libkiln.so"), os.path.join(PACKAGE, "bin", "kiln")]
    files += glob.glob(os.path.join(PACKAGE, "_kiln*.so"))
    return files


def test_the_build_folder_agrees_with_the_package():
    # A CUDA build that forgot to install the module would make every check below vacuous.
    cache = os.path.join(REPO, "build", "CMakeCache.txt")
    if not os.path.exists(cache):
        pytest.skip("no build/ here")
    with open(cache, encoding="utf-8") as f:
        cuda = "KILN_CUDA:BOOL=ON" in f.read()
    assert cuda_built() == cuda, f"KILN_CUDA={'ON' if cuda else 'OFF'} but {MODULE} is {'missing' if cuda else 'installed'}"


def test_no_cuda_library_is_needed_to_load_kiln():
    if not cuda_built():
        pytest.skip("this kiln was built without CUDA")
    files = shipped()
    assert len(files) == 3, files
    for f in files:
        libs = needed(f)
        assert "libkiln.so" in libs or f.endswith("libkiln.so"), (f, libs)
        bad = [lib for lib in libs if CUDA_LIBS.match(lib)]
        assert not bad, f"{f} needs {bad}: it would not load on a machine without CUDA"
    # The module is what links CUDA (so the pattern above matches what it would have to).
    module = needed(os.path.join(PACKAGE, "lib", MODULE))
    assert "libkiln.so" in module, module
    assert [lib for lib in module if CUDA_LIBS.match(lib)], module


# A library that needs a CUDA runtime this machine lacks, as libkiln_cuda.so is where CUDA is missing.
NEEDS_MISSING_CUDART = "libcudart.so.999"


def fake_module(tmp_path, kind: str) -> str | None:
    """A libkiln_cuda.so that cannot load, or None for none: 'missing' (no file), 'broken' (not a
    library), 'cudart' (a library whose CUDA runtime is not there: built against a stand-in that is
    then left behind)."""
    if kind == "missing":
        return None
    path = tmp_path / "module" / MODULE
    path.parent.mkdir()
    if kind == "broken":
        path.write_bytes(b"not a shared library\n")
        return str(path)
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to make a library with a missing dependency")
    (tmp_path / "stub.c").write_text("int kiln_stub_value;\n")
    dep = tmp_path / "standin" / NEEDS_MISSING_CUDART
    dep.parent.mkdir()
    subprocess.run([cc, "-shared", "-fPIC", f"-Wl,-soname,{NEEDS_MISSING_CUDART}", "-o", str(dep), str(tmp_path / "stub.c")],
                   check=True)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(path), str(tmp_path / "stub.c"), "-Wl,--no-as-needed",
                    str(dep)], check=True)
    assert NEEDS_MISSING_CUDART in needed(str(path))
    return str(path)


def copy_package(tmp_path, kind: str):
    """The installed package copied under tmp_path/site/kiln with an unloadable libkiln_cuda.so
    (fake_module). Returns the folder to put on sys.path."""
    module = fake_module(tmp_path, kind)
    root = tmp_path / "site"
    shutil.copytree(PACKAGE, root / "kiln", ignore=shutil.ignore_patterns(MODULE, "__pycache__"))
    if module is not None:
        shutil.copy(module, root / "kiln" / "lib" / MODULE)
    return root


PROBE = r"""
import json, sys, warnings
import numpy as np
import kiln
assert kiln.__file__.startswith(sys.argv[1]), kiln.__file__
x = np.load(sys.argv[3])
out = {"providers": kiln.get_available_providers(), "device": kiln.get_device()}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    s = kiln.InferenceSession(sys.argv[2], providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
out["session_providers"] = s.get_providers()
out["warnings"] = [str(m.message) for m in w]
out["y"] = s.run(None, {s.get_inputs()[0].name: x})[0].tolist()
try:
    kiln.Engine.build(sys.argv[2], device="cuda")
    out["cuda_error"] = None
except kiln.KilnError as e:
    out["cuda_error"] = str(e)
print(json.dumps(out))
"""


def clean_env(site):
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_DISABLE_CUDA", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    return env


def expected_reason(kind: str) -> str:
    """A pattern of the reason a CUDA request must give: dlopen's own words."""
    if not cuda_built():
        return "built without CUDA"
    return {
        "missing": re.escape(MODULE) + r": cannot open shared object file: No such file or directory",
        "broken": r"invalid ELF header|file too short",
        "cudart": re.escape(NEEDS_MISSING_CUDART) + r": cannot open shared object file: No such file or directory",
    }[kind]


KINDS = ["missing", "broken", "cudart"]


@pytest.mark.parametrize("kind", KINDS)
def test_python_without_a_loadable_cuda_backend(tmp_path, kind):
    site = copy_package(tmp_path, kind)
    r = subprocess.run([sys.executable, "-c", PROBE, str(site), MODEL, IMAGE], capture_output=True, text=True,
                       env=clean_env(site), timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["providers"] == ["CPUExecutionProvider"]
    assert out["device"] == "CPU"
    assert out["session_providers"] == ["CPUExecutionProvider"]
    assert any("CUDAExecutionProvider" in m for m in out["warnings"]), out["warnings"]
    # The same numbers as the intact package's CPU session in this process.
    want = kiln.InferenceSession(MODEL, providers=["CPUExecutionProvider"])
    x = np.load(IMAGE)
    np.testing.assert_allclose(np.array(out["y"], np.float32), want.run(None, {want.get_inputs()[0].name: x})[0],
                               rtol=1e-6, atol=1e-6)
    assert out["cuda_error"] is not None
    assert re.search(expected_reason(kind), out["cuda_error"]), out["cuda_error"]
    if cuda_built():
        assert "CUDA backend cannot be loaded" in out["cuda_error"], out["cuda_error"]


@pytest.mark.parametrize("kind", KINDS)
def test_cli_without_a_loadable_cuda_backend(tmp_path, kind):
    site = copy_package(tmp_path, kind)
    exe = str(site / "kiln" / "bin" / "kiln")
    env = clean_env(site)
    ok = subprocess.run([exe, "run", MODEL, "--device", "cpu", "-i", f"image={IMAGE}", "--output-dir", str(tmp_path)],
                        capture_output=True, text=True, env=env, timeout=300)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert glob.glob(str(tmp_path / "*.npy")), ok.stdout
    bad = subprocess.run([exe, "run", MODEL, "--device", "cuda", "-i", f"image={IMAGE}"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode != 0, bad.stdout
    assert re.search(expected_reason(kind), bad.stdout + bad.stderr), bad.stdout + bad.stderr
    # And `kiln bench` on the CPU.
    bench = subprocess.run([exe, "bench", MODEL, "--device", "cpu", "--iterations", "3", "--warmup", "1"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert bench.returncode == 0, bench.stdout + bench.stderr
