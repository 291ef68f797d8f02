#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the default test suite. Extra arguments go to pytest.
# Without arguments the suite runs as four pytest processes over tests/'s folders in order (a
# new process at frontend/, graph/ and tir/): one process over all of it aborted (SIGABRT) at
# the same place twice, ~1385 tests in, on an AVX2 host; the cause is not found yet (the
# closing note of 2026-12-06).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest -q "$@"
fi
mapfile -t parts < <(ls -d tests/*/ tests/test_*.py | grep -v __pycache__ | sort)
group=()
for part in "${parts[@]}"; do
    case "$part" in
        tests/frontend/ | tests/graph/ | tests/tir/)
            .venv/bin/python -m pytest -q "${group[@]}"
            group=()
            ;;
    esac
    group+=("$part")
done
exec .venv/bin/python -m pytest -q "${group[@]}"
