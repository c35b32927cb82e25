#!/usr/bin/env bash
# Configures and builds kiln (Release, Ninja) into build/. CUDA is built when nvcc is found
# (override with KILN_CUDA=ON/OFF). Usage: scripts/build.sh [ninja targets...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export CCACHE_DIR=${CCACHE_DIR:-$root/.ccache}
cuda_flag=()
if [ -n "${KILN_CUDA:-}" ]; then
  cuda_flag=(-DKILN_CUDA="$KILN_CUDA")
elif ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [ ! -f build/build.ninja ]; then
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${cuda_flag[@]}"
fi
ninja -C build "$@"
