"""Child processes of a benchmark that stop when the benchmark stops, however it stops.

    stop_on_signals()                               # in the benchmark: SIGTERM/SIGHUP unwind
    proc = run_in_group(cmd, env=env, timeout=600)  # a child and all it starts, killed at the end
    die_with_parent(parent_pid)                     # first thing in the child

Note [worker process groups]
A compile worker is a fresh Python process that itself forks a pool (tessera.build compiles
kernels in parallel) and runs the C compiler: killing the worker alone leaves its pool blocked
forever on a queue no one writes, and a benchmark killed by SIGTERM runs no cleanup at all (the
default action ends the process at once). So: the worker leads a process group of its own
(start_new_session), and the benchmark kills that whole group when the call returns, times out
or unwinds (Ctrl-C, an exception, SIGTERM or SIGHUP turned into SystemExit by
stop_on_signals). If the benchmark is killed outright (SIGKILL), the kernel sends the worker
SIGTERM (prctl PR_SET_PDEATHSIG, Linux), and the worker kills its own group. Its own group,
not the terminal's: a worker in its own session does not see the terminal's Ctrl-C, the
benchmark's unwinding kills it instead.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def stop_on_signals(signals=(signal.SIGTERM, signal.SIGHUP)) -> None:
    """Turn `signals` into SystemExit(128 + signal) in this process, so `finally` blocks and
    context managers run (they kill the worker groups)."""

    def _exit(signum, frame):
        raise SystemExit(128 + signum)

    for s in signals:
        signal.signal(s, _exit)


def run_in_group(cmd, timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs) with the
    child leading a process group of its own, which is killed (SIGKILL) when this returns or
    raises: the child and everything it started (Note [worker process groups])."""
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        **kwargs,
    ) as proc:  # fmt: skip
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.communicate()
            raise
        finally:
            kill_group(proc.pid)  # the child's leftovers too, when the child itself has ended
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def kill_group(pgid: int) -> None:
    """SIGKILL every process of the group `pgid`; nothing if none is left."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def die_with_parent(parent: int) -> None:
    """In a child started by run_in_group from the process `parent`: end, with its process
    group, when the parent dies (Linux; elsewhere only when it ends the group) or on SIGTERM."""

    def _end_group(signum, frame):
        kill_group(os.getpgid(0))  # this process too

    signal.signal(signal.SIGTERM, _end_group)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl: no signal will come
        _end_group(signal.SIGTERM, None)
