"""Suite-wide pytest hooks.

``TESSERA_TEST_RESOURCE_LOG=<file>`` logs, after every test, the process's memory mappings,
threads, open file descriptors and RSS (tab-separated), to find a resource that grows over a
long single-process run (Note [library handles] in tessera/runtime/module.py).

tests/ itself goes on sys.path, so that tests in any folder import its shared helpers
(`from bench_modules import load_bench`): with --import-mode=importlib (pyproject.toml) pytest
puts no test folder there.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last: it shadows nothing


def _resources() -> dict[str, int]:
    with open("/proc/self/maps") as f:
        maps = sum(1 for _ in f)
    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            status[key] = value.split()[0] if value.split() else "0"
    return {
        "maps": maps,
        "threads": int(status.get("Threads", 0)),
        "py_threads": threading.active_count(),
        "fds": len(os.listdir("/proc/self/fd")),
        "rss_mb": int(status.get("VmRSS", 0)) // 1024,
        "time": int(time.time()),
    }


_LOG = os.environ.get("TESSERA_TEST_RESOURCE_LOG")


if _LOG:

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(nodeid, location):
        row = _resources()
        with open(_LOG, "a") as f:
            f.write(nodeid + "\t" + "\t".join(f"{k}={v}" for k, v in row.items()) + "\n")
