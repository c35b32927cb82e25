#!/usr/bin/env bash
# Puts cudnn-frontend's headers (NVIDIA's header-only C++ API over cuDNN's graph API, MIT licensed)
# into .deps/cudnn-frontend/include, where CMake looks for them (KILN_CUDNN_FRONTEND_INCLUDE). They
# come from the pinned wheel on PyPI, checked against its SHA-256; only include/ and the licenses are
# kept. Idempotent. Without them the CUDA backend builds without its cuDNN attention tactic.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=1.32.0
wheel=nvidia_cudnn_frontend-$version-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
sha256=c6006556017a4d1c914c52a556c71b1267f2d6a0500f742e7b4edef539878df0
dest=$root/.deps/cudnn-frontend
[ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ] && exit 0
py=$root/.venv/bin/python
[ -x "$py" ] || py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The same file whatever the local Python: the wheel's headers do not depend on it.
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$version"
[ -f "$tmp/$wheel" ] || { echo "fetch_cudnn_frontend: pip did not download $wheel" >&2; exit 1; }
echo "$sha256  $tmp/$wheel" | sha256sum -c --quiet
rm -rf "$dest.new"
mkdir -p "$dest.new"
"$py" - "$tmp/$wheel" "$dest.new" <<'PY'
import sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/") or "/licenses/" in name:
            z.extract(name, dest)
PY
echo "$version" > "$dest.new/VERSION"
rm -rf "$dest"
mv "$dest.new" "$dest"
echo "fetch_cudnn_frontend: cudnn-frontend $version headers in .deps/cudnn-frontend/include"
