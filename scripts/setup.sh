#!/usr/bin/env bash
# Installs every dependency kiln needs on a fresh Debian 12 machine, then configures and builds
# (build/), installs the kiln package into .venv (scripts/install.sh: `import kiln` and the `kiln`
# command there) and runs the example. Idempotent: re-running only does what is missing.
# Usage: scripts/setup.sh [--no-build] (--no-build: the Debian packages and .venv only)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

sudo_=""
[ "$(id -u)" -eq 0 ] || sudo_="sudo"

pkgs=(cmake ninja-build g++ ccache pkg-config
      protobuf-compiler libprotobuf-dev
      flatbuffers-compiler libflatbuffers-dev
      libcli11-dev nlohmann-json3-dev
      libcpp-httplib-dev libgrpc++-dev protobuf-compiler-grpc  # `kiln serve`'s HTTP and gRPC servers (src/serve/)
      libdnnl-dev libgtest-dev libgmock-dev
      chromium)  # headless, for the test that opens `kiln profile`'s HTML report (tests/python/test_profile_html.py)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python: a virtual environment with pinned packages (requirements.txt).
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
if ! cmp -s requirements.txt .venv/.requirements.installed 2>/dev/null; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  cp requirements.txt .venv/.requirements.installed
fi

# cudnn-frontend: NVIDIA's header-only C++ API over cuDNN's graph API (MIT), for the CUDA backend's
# cuDNN attention tactic. Its headers come from the pinned PyPI wheel (checked by hash; its Python
# dependencies are not wanted), unpacked into .deps/.
"$root/scripts/fetch_cudnn_frontend.sh" ||
  echo "setup: warning: cudnn-frontend's headers were not fetched; the CUDA backend builds without its cuDNN attention tactic" >&2

[ "${1:-}" = "--no-build" ] && exit 0
"$root/scripts/build.sh"
"$root/scripts/install.sh"
exec "$root/scripts/quickstart.sh"
