#!/usr/bin/env bash
# Set up (scripts/setup.sh), then the main job on the built-in example: compile ResNet-50 (the onnx
# package's light model with random weights) and benchmark it next to ONNX Runtime.
# Extra arguments go to `tessera bench` (e.g. a model file, --threads N).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/tessera bench --threads 2 "$@"
