#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the demo: TVM's vector add and Halide's blur, built and checked.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python examples/demo.py "$@"
