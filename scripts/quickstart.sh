#!/usr/bin/env bash
# kiln's main job on the bundled example: build an engine from examples/tiny_cnn.onnx, then run it
# on the bundled input and print outputs and timing. (scripts/setup.sh ends by running this.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
device=${KILN_DEVICE:-cpu}
./build/kiln info examples/tiny_cnn.onnx
./build/kiln build examples/tiny_cnn.onnx -o build/tiny_cnn.kiln --device "$device"
./build/kiln run build/tiny_cnn.kiln --input image=examples/tiny_cnn_input.npy --output-dir build/tiny_cnn_out
./build/kiln bench build/tiny_cnn.kiln --input image=examples/tiny_cnn_input.npy -n 100
