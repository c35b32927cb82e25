#!/usr/bin/env bash
# Installs the kiln Python package (the module and the `kiln` command, pyproject.toml) into .venv
# from build/: pip runs scikit-build-core from .venv (--no-build-isolation), which reconfigures
# build/ with its cached choices (KILN_CUDA, KILN_TESTS, ccache) and finds everything that
# scripts/build.sh built up to date, so nothing compiles twice (about 2 s). scripts/setup.sh and
# scripts/test.sh run it after scripts/build.sh; run it yourself after changing python/kiln/.
# --no-build-isolation matters: from an isolated environment scikit-build-core would see another
# installation of itself and clear build/'s CMake cache (a full rebuild without the cached choices).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CCACHE_DIR=${CCACHE_DIR:-$root/.ccache}
# .venv current with requirements.txt (scikit-build-core is the build backend), build/ configured.
cmp -s requirements.txt .venv/.requirements.installed 2>/dev/null || scripts/setup.sh --no-build
[ -f build/build.ninja ] || scripts/build.sh
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir=build .
