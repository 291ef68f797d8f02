"""The measurement worker: `python -m tessera.autotune.worker`, started by a `Measurer`.

It reads jobs (a picklable function and its arguments, length-prefixed pickles) from stdin and
writes each result to the stdout it was started with; fd 1 itself is pointed at stderr, so that
anything a build or a kernel prints cannot corrupt the results. A job that raises is returned as
a failed MeasureResult; a job that kills the process is the Measurer's to notice.
"""

from __future__ import annotations

import os
import sys

from tessera.autotune.measure import MeasureResult, _recv, _send


def main() -> None:
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # prints (Python's or native code's) go to stderr
    sys.stdout = sys.stderr
    jobs = sys.stdin.buffer
    while True:
        try:
            job = _recv(jobs)
        except EOFError:
            return
        if job is None:
            return
        fn, args = job
        try:
            result = fn(*args)
        except Exception as e:  # a config that fails to build or run: not a crash of the worker
            result = MeasureResult(error=f"{type(e).__name__}: {str(e)[:500]}")
        _send(results, result)


if __name__ == "__main__":
    main()
