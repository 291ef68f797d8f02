"""bench/process_group.py (Note [worker process groups]): a benchmark's compile worker, and the
processes the worker starts, stop when the benchmark stops: SIGTERM, SIGKILL, a timeout."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from process_group import run_in_group  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl, /proc")

# a worker as bench/models.py starts one: it forks (its pool) and both wait; it writes both pids
WORKER = """
import os, sys, time
sys.path.insert(0, {bench!r})
from process_group import die_with_parent
die_with_parent(int(sys.argv[1]))
child = os.fork()
if child == 0:
    time.sleep(600)
    os._exit(0)
with open({pids!r} + ".tmp", "w") as f:
    f.write(f"{{os.getpid()}} {{child}}")
os.rename({pids!r} + ".tmp", {pids!r})
time.sleep(600)
"""

# the benchmark: runs the worker in its group and waits for it
# (SIGINT's handler set, not inherited: a suite started as a background job (cmd &) hands its
# children SIGINT ignored, and Python then raises no KeyboardInterrupt)
SUITE = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, {bench!r})
from process_group import run_in_group, stop_on_signals
stop_on_signals()
run_in_group([sys.executable, "-c", {worker!r}, str(os.getpid())], timeout=600)
"""


def _worker(pids: Path) -> str:
    return WORKER.format(bench=str(BENCH), pids=str(pids))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def _wait_for(predicate, seconds: float = 20.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _start_suite(tmp_path) -> tuple[subprocess.Popen, list[int]]:
    pids = tmp_path / "pids"
    code = SUITE.format(bench=str(BENCH), worker=_worker(pids))
    suite = subprocess.Popen([sys.executable, "-c", code])
    assert _wait_for(pids.exists), "the worker did not start"
    workers = [int(p) for p in pids.read_text().split()]
    assert all(_alive(p) for p in workers)
    return suite, workers


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_worker_and_its_children_stop_with_the_suite(tmp_path, sig):
    suite, workers = _start_suite(tmp_path)
    try:
        suite.send_signal(sig)
        suite.wait(timeout=20)
        assert _wait_for(lambda: not any(_alive(p) for p in workers))
    finally:
        for p in workers:
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    if sig == signal.SIGTERM:
        assert suite.returncode == 128 + signal.SIGTERM  # it unwound (SystemExit), not just died


def test_a_timeout_kills_the_worker_and_its_children(tmp_path):
    pids = tmp_path / "pids"
    cmd = [sys.executable, "-c", _worker(pids), str(os.getpid())]
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_group(cmd, timeout=3)
    workers = [int(p) for p in pids.read_text().split()]
    assert _wait_for(lambda: not any(_alive(p) for p in workers))
