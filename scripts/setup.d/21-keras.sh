#!/usr/bin/env bash
# The Keras frontend's optional dependencies: h5py reads the weights; keras itself (on the torch
# backend of 20-torch.sh, so no tensorflow) builds the models the tests compare against.
set -euo pipefail
cd "$(dirname "$0")/../.."
# find_spec, not import: keras imports its default backend (tensorflow) when imported bare
if ! .venv/bin/python -c "import h5py, importlib.util as u, sys
sys.exit(u.find_spec('keras') is None)" 2>/dev/null; then
    .venv/bin/python -m pip install -q 'h5py>=3' 'keras>=3'
fi
