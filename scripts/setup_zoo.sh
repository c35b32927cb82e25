#!/usr/bin/env bash
# Installs what the model zoo needs on a fresh Debian 12 machine (on top of scripts/setup.sh):
# Debian's PyTorch (python3-torch 1.13.1, python3-torchvision 0.14.1) and a virtual environment
# .venv-zoo that sees them (--system-site-packages) plus the pins in bench/zoo/requirements.txt.
# Idempotent: re-running only does what is missing. Usage: scripts/setup_zoo.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

sudo_=""
[ "$(id -u)" -eq 0 ] || sudo_="sudo"

pkgs=(python3-torch python3-torchvision python3-venv python3-pip)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_zoo: installing Debian packages: ${missing[*]}"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Debian's torch is built for Debian's python3 (3.11) and numpy 1.x: the venv must use that
# interpreter and keep the system numpy (the pins below never upgrade it).
reqs=bench/zoo/requirements.txt
if [ ! -x .venv-zoo/bin/python ]; then
  /usr/bin/python3 -m venv --system-site-packages .venv-zoo
fi
if ! cmp -s "$reqs" .venv-zoo/.requirements.installed 2>/dev/null; then
  .venv-zoo/bin/python -m pip install -q --disable-pip-version-check -r "$reqs"
  cp "$reqs" .venv-zoo/.requirements.installed
fi
.venv-zoo/bin/python -c "import torch, torchvision, transformers; print('setup_zoo: torch', torch.__version__, 'torchvision', torchvision.__version__, 'transformers', transformers.__version__)"
