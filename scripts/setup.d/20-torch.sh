#!/usr/bin/env bash
# The PyTorch frontend's optional dependency. torch is pinned exactly: this version installs as a
# CPU build from the local package mirror in seconds, while any other version or range pulls a
# multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! .venv/bin/python -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" \
    2>/dev/null; then
    .venv/bin/python -m pip install -q 'torch==2.13.0'
fi
