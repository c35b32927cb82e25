#!/usr/bin/env bash
# The sanitizer jobs' compilers (scripts/sanitize.sh, scripts/tsan.sh): clang-14, its sanitizer
# runtimes and LLVM's OpenMP, installed when missing; and the .venv the build takes onnx.proto from.
set -euo pipefail
sudo_=""
[ "$(id -u)" -eq 0 ] || sudo_="sudo"
missing=()
for p in clang-14 libclang-rt-14-dev libomp-14-dev; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ -x .venv/bin/python ] || scripts/setup.sh --no-build
