#!/usr/bin/env bash
# Makes .venv-ray, a virtual environment for kiln.ray_serve (Ray Serve deployments of kiln models) and
# its test (tests/ray/): the pins in tests/ray/requirements.txt (ray[serve], numpy, requests, pytest)
# plus the kiln package built from build/. The package is a wheel made by .venv's scikit-build-core
# from build/ (as scripts/install.sh and scripts/check_install.sh do, so nothing compiles again),
# installed into .venv-ray without its dependencies. Needs scripts/setup.sh first (build/ and .venv);
# rerun after changing python/kiln/. Usage: scripts/setup_ray.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -x .venv/bin/python ] && [ -f build/build.ninja ] || { echo "setup_ray: run scripts/setup.sh first" >&2; exit 2; }

# The same interpreter as .venv's: the kiln module is built for it.
reqs=tests/ray/requirements.txt
if [ ! -x .venv-ray/bin/python ]; then
  "$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv .venv-ray
fi
if ! cmp -s "$reqs" .venv-ray/.requirements.installed 2>/dev/null; then
  .venv-ray/bin/python -m pip install -q --disable-pip-version-check -r "$reqs"
  cp "$reqs" .venv-ray/.requirements.installed
fi

rm -rf build/ray-dist
.venv/bin/python -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir=build -w build/ray-dist .
.venv-ray/bin/python -m pip install -q --disable-pip-version-check --no-deps --force-reinstall build/ray-dist/kiln-*.whl
.venv-ray/bin/python -c "import kiln, ray; print('setup_ray: kiln', kiln.__version__, 'ray', ray.__version__)"
