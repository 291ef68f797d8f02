#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the default test suite. Extra arguments go to pytest.
# Without arguments the suite runs as four pytest processes over tests/'s folders in order (a
# new process at frontend/, graph/ and tir/): one process over all of it aborted (SIGABRT) at
# the same place twice, ~1385 tests in (by today's count tests/graph/test_ops_vision.py), on an
# AVX2 host; the cause is not found yet. Ruled out: a resource that grows. Over ~1000 tests of
# one process (arith/ to dynamic/, frontend/, gpu/ + graph/) the memory mappings stay at ~950
# (loaded libraries, which never closed, are dlclosed since Note [library handles]), threads at
# <= 6, fds at 17, RSS under 700 MB. TESSERA_TEST_RESOURCE_LOG=<file> logs them per test
# (tests/conftest.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest -q "$@"
fi
mapfile -t parts < <(ls -d tests/*/ tests/test_*.py | grep -v __pycache__ | sort)
# every group runs, whatever an earlier one gave; the status is the first failure's
group=()
status=0
for part in "${parts[@]}"; do
    case "$part" in
        tests/frontend/ | tests/graph/ | tests/tir/)
            .venv/bin/python -m pytest -q "${group[@]}" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
            group=()
            ;;
    esac
    group+=("$part")
done
.venv/bin/python -m pytest -q "${group[@]}" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
exit "$status"
