"""Measuring candidates on a Dask cluster (`dask.distributed`): `tune(..., cluster=...)`.

    tessera tune model.onnx --cluster tcp://scheduler:8786 --db tune.db
    results = tessera.autotune.tune(mod, params, "llvm", cluster="tcp://scheduler:8786")

`ClusterMeasurer` has a `Measurer`'s interface (`measure`, `close`) and one more method,
`measure_each`, which measures a batch of candidates at once, one Dask task each, and yields
their results as they arrive (the tuner appends each to the records database there and then:
a killed run loses no finished measurement, and a rerun resumes, as with local workers).

Note [measuring on a cluster]
Each Dask task runs on a worker machine, in a `Measurer` of that worker process (one per
worker thread, kept between tasks so that a worker's imports are paid once): the candidate is
built and timed in a subprocess there, so that a config whose kernel crashes, hangs past the
timeout or computes wrong values is recorded as failed exactly as it is locally, and costs
the subprocess, never the Dask worker. A Dask task that fails anyway (its worker lost, a
pickling error) is a failed result too ("crash: ..."). The database is the driver's own file:
workers only measure. Measurements in one batch run at once on different workers, so the
workers should be machines of one kind (the records are keyed by the driver's target) with
one thread each (`dask worker --nthreads 1`): two kernels timed at once on one machine share
its cores and caches. The measurements that compare two configs (each task's default, and the
confirmation of a winner against it) go to one worker, the first in address order, so that
its time and the candidate's are read on the same machine.

dask is optional (`scripts/setup.d/26-dask.sh`); without it, `cluster=` raises an error that
says how to install it. No tracker of our own: Dask's scheduler places the tasks.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from tessera.autotune.measure import Measurer, MeasureResult, run_config
from tessera.topi.strategy import Config, Task

_local = threading.local()
_measurers: list[Measurer] = []
_lock = threading.Lock()


def _worker_measurer(timeout: float, run, seed: int) -> Measurer:
    """This worker thread's Measurer (a new one when the timeout, runner or seed changed)."""
    m = getattr(_local, "measurer", None)
    if m is None or (m.timeout, m.run, m.seed) != (timeout, run, seed):
        if m is not None:
            m.close()
        m = _local.measurer = Measurer(timeout=timeout, run=run, seed=seed)
        with _lock:
            _measurers.append(m)
    return m


def measure_on_worker(timeout: float, run, seed: int, args: tuple) -> MeasureResult:
    """The Dask task: `run(*args)` in this worker's measurement subprocess (Note [measuring on
    a cluster])."""
    return _worker_measurer(timeout, run, seed).call(run, args)


def close_worker_measurers() -> int:
    """Stop this worker process's measurement subprocesses (the driver's `close`)."""
    with _lock:
        ms, _measurers[:] = list(_measurers), []
    for m in ms:
        m.close()
    _local.__dict__.clear()
    return len(ms)


def connect(cluster):
    """A distributed.Client for `cluster`: a Client (used as it is), a scheduler address
    ("tcp://host:8786"), or a cluster object (LocalCluster, ...)."""
    try:
        from distributed import Client
    except ImportError as e:
        raise ImportError(
            "measuring on a cluster needs dask.distributed: run scripts/setup.d/26-dask.sh "
            "(or pip install dask distributed)"
        ) from e
    if isinstance(cluster, Client):
        return cluster, False
    return Client(cluster), True


class ClusterMeasurer:
    """Measures configs as Dask tasks on the workers of `cluster` (see `connect`), each in a
    measurement subprocess there with `timeout` (Note [measuring on a cluster]). `run`: what
    the subprocess calls, as for a Measurer."""

    builds_locally = False  # the workers build: the driver's build pool only lowers (features)

    def __init__(self, cluster, timeout: float = 60.0, run=run_config, seed: int = 0):
        self.client, self._own = connect(cluster)
        self.timeout = timeout
        self.run = run
        self.seed = seed

    def __enter__(self) -> ClusterMeasurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def workers(self) -> list[str]:
        return sorted(self.client.scheduler_info()["workers"])

    @property
    def width(self) -> int:
        """How many measurements run at once: the cluster's worker threads (at least 1)."""
        return max(1, sum(self.client.nthreads().values()))

    def close(self) -> None:
        try:
            if self.client.status == "running":
                self.client.run(close_worker_measurers)
        finally:
            if self._own:
                self.client.close()

    def _args(self, task, config, target, reference, model_context) -> tuple:
        from tessera.transform import PassContext

        ctx = PassContext.current()
        context = (ctx.opt_level, tuple(sorted(ctx.disabled_pass)))
        return (task, config, str(target), reference, self.seed, context, model_context)

    def _submit(self, args: tuple, pin: bool):
        where = {}
        if pin and self.workers:
            where = {"workers": self.workers[:1], "allow_other_workers": True}
        fn = measure_on_worker
        return self.client.submit(fn, self.timeout, self.run, self.seed, args, pure=False, **where)

    def measure(
        self, task: Task, config: Config, target, reference=None, model_context=None
    ) -> MeasureResult:
        """One config, on the first worker (where the comparisons of a task are measured)."""
        args = self._args(task, config, target, reference, model_context)
        return _result(self._submit(args, pin=True))

    def measure_each(
        self, task: Task, configs: list[Config], target, reference=None, model_context=None
    ) -> Iterator[tuple[int, MeasureResult]]:
        """(index in `configs`, result) of each config, in the order the results arrive; the
        configs are measured at once, one Dask task each."""
        from distributed import as_completed

        futures = {
            self._submit(self._args(task, c, target, reference, model_context), False): i
            for i, c in enumerate(configs)
        }
        for future in as_completed(list(futures)):
            yield futures[future], _result(future)


def _result(future) -> MeasureResult:
    try:
        return future.result()
    except Exception as e:  # the Dask task failed: its worker died, or a pickling error
        return MeasureResult(error=f"crash: the Dask task failed ({type(e).__name__}: {e})"[:500])
