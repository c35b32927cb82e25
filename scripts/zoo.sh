#!/usr/bin/env bash
# The whole model zoo in one command: sets up the exporter's environment, builds kiln, exports
# every zoo model (opsets 13 and 17; files kept in build/zoo/ unless --force), then checks kiln's
# CPU outputs against ONNX Runtime's for each. Arguments go to the exporter, e.g.
#   scripts/zoo.sh --small            # the CI subset only
#   scripts/zoo.sh --models gpt2 --opsets 17
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -x .venv/bin/python ] || scripts/setup.sh --no-build
scripts/setup_zoo.sh
scripts/build.sh
scripts/install.sh
.venv-zoo/bin/python bench/zoo/export.py "$@"
.venv/bin/python -m pytest -q -rs tests/models
