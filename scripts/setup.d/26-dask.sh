#!/usr/bin/env bash
# Distributed tuning's optional dependency (`tessera tune --cluster tcp://host:8786`): candidates
# are built and measured as tasks on a dask.distributed cluster. Skipped when already installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! .venv/bin/python -c "import dask, distributed" 2>/dev/null; then
    .venv/bin/python -m pip install -q dask distributed
fi
