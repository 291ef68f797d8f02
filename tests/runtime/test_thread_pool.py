"""The native thread pool (native/tessera_rt.c), driven by kernels/pool_kernels.c."""

import ctypes
import os
import signal
import threading
import time
import warnings

import numpy as np
import pytest

from tessera.runtime import native

MAX_CHUNKS_PER_THREAD = 8  # tessera_rt.c, Note [chunks]


def thread_count() -> int:
    return len(os.listdir("/proc/self/task"))


def run_fill(lib, extent):
    counts = np.zeros(max(extent, 1), np.int32)
    tids = np.zeros(max(extent, 1), np.int64)
    rc = lib.fill(extent, counts.ctypes.data, tids.ctypes.data)
    return rc, counts[:extent], tids[:extent]


@pytest.fixture(autouse=True)
def restore_threads():
    before = native.get_num_threads()
    yield
    native.set_num_threads(before)


def log_chunks(lib, extent):
    begins, ends, tids = (np.zeros(max(extent, 1), np.int64) for _ in range(3))
    calls = lib.log_chunks(extent, begins.ctypes.data, ends.ctypes.data, tids.ctypes.data)
    assert calls >= 0
    order = np.argsort(begins[:calls], kind="stable")
    return begins[:calls][order], ends[:calls][order], tids[:calls][order]


@pytest.mark.parametrize("threads", [1, 2, 3, 4])
@pytest.mark.parametrize("extent", [0, 1, 7, 1000])
def test_every_index_runs_exactly_once_in_contiguous_chunks(pool_lib, threads, extent):
    native.set_num_threads(threads)
    rc, counts, tids = run_fill(pool_lib, extent)
    assert rc == 0
    assert np.all(counts == 1)
    # a few contiguous chunks per thread (Note [chunks]), each run by one thread
    runs = 0 if extent == 0 else 1 + int(np.count_nonzero(tids[1:] != tids[:-1]))
    assert runs <= min(MAX_CHUNKS_PER_THREAD * threads, extent)
    assert len(set(tids.tolist())) <= min(threads, max(extent, 1))
    if extent:
        assert tids[0] == threading.get_native_id()  # the caller runs chunk 0
    if threads == 1:
        assert runs == min(1, extent)


def guided_chunks(extent, threads):
    """The chunk bounds of Note [chunks], written out in Python."""
    most = threads * MAX_CHUNKS_PER_THREAD
    min_chunk = -(-extent // most)
    bounds, begin = [], 0
    while begin < extent:
        end = min(extent, begin + max(min_chunk, (extent - begin) // (2 * threads)))
        bounds.append((begin, end))
        begin = end
    return bounds


@pytest.mark.parametrize("threads, extent", [(3, 1000), (2, 7), (4, 3), (2, 64), (2, 100003)])
def test_chunks_tile_the_loop_big_first_then_small(pool_lib, threads, extent):
    native.set_num_threads(threads)
    begins, ends, tids = log_chunks(pool_lib, extent)
    assert list(zip(begins.tolist(), ends.tolist(), strict=True)) == guided_chunks(extent, threads)
    assert len(begins) <= min(MAX_CHUNKS_PER_THREAD * threads, extent)
    assert begins[0] == 0 and ends[-1] == extent and np.all(begins[1:] == ends[:-1])
    sizes = ends - begins
    assert np.all(sizes[1:-1] <= sizes[:-2])  # shrinking, but for the cut-off last one
    assert sizes.min() >= 1
    assert tids[0] == threading.get_native_id()  # the caller runs the first chunk


def test_repeated_calls_do_not_create_threads(pool_lib):
    native.set_num_threads(4)
    run_fill(pool_lib, 100)
    steady = thread_count()
    for _ in range(200):
        rc, counts, _ = run_fill(pool_lib, 100)
        assert rc == 0 and np.all(counts == 1)
    assert thread_count() == steady


def test_resizing_the_pool_replaces_workers(pool_lib):
    native.set_num_threads(1)
    run_fill(pool_lib, 10)
    base = thread_count()  # with one thread the pool has no workers
    native.set_num_threads(4)
    run_fill(pool_lib, 10)
    assert thread_count() == base + 3
    native.set_num_threads(2)
    rc, counts, tids = run_fill(pool_lib, 10)
    assert rc == 0 and np.all(counts == 1) and len(set(tids.tolist())) <= 2
    assert thread_count() == base + 1


def test_nested_parallel_for_runs_inline(pool_lib):
    native.set_num_threads(4)
    rows, cols = 9, 33
    counts = np.zeros(rows * cols, np.int32)
    inline_ok = np.zeros(rows, np.int32)
    assert pool_lib.nested(rows, cols, counts.ctypes.data, inline_ok.ctypes.data) == 0
    assert np.all(counts == 1)
    assert np.all(inline_ok == 1)


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("bad_index", [0, 500, 999])
def test_nonzero_return_code_is_reported(pool_lib, threads, bad_index):
    native.set_num_threads(threads)
    assert pool_lib.fail_at(1000, bad_index, 17) == 17
    assert pool_lib.fail_at(1000, 5000, 17) == 0  # no chunk fails


def test_first_nonzero_code_wins_when_several_chunks_fail(pool_lib):
    native.set_num_threads(4)
    begins = {b for b, _ in guided_chunks(1000, 4)}  # every chunk returns its begin + 1
    for _ in range(20):
        assert pool_lib.fail_at(1000, -1, 0) - 1 in begins
    assert pool_lib.fail_at(1000, 5000, 3) == 0  # the previous code does not leak


def test_concurrent_callers_each_get_their_loop_done(pool_lib):
    native.set_num_threads(3)
    errors = []

    def work():
        for _ in range(50):
            rc, counts, _ = run_fill(pool_lib, 301)
            if rc != 0 or not np.all(counts == 1):
                errors.append((rc, counts))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_pool_works_in_a_forked_child(pool_lib):
    native.set_num_threads(4)
    run_fill(pool_lib, 100)  # the parent's workers exist before the fork
    with warnings.catch_warnings():  # Python 3.12+ warns about fork() with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: a hang is killed by the alarm
        signal.alarm(20)
        rc, counts, tids = run_fill(pool_lib, 100)
        ok = rc == 0 and np.all(counts == 1) and len(set(tids.tolist())) <= 4
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("nbytes", [0, 1, 63, 64, 1000, 1 << 20])
def test_alloc_is_64_byte_aligned(pool_lib, nbytes):
    assert pool_lib.alloc_alignment(nbytes) == 0


def test_set_num_threads_checks_its_argument():
    with pytest.raises(ValueError, match="positive"):
        native.set_num_threads(0)
    with pytest.raises(ValueError, match="positive"):
        native.set_num_threads(2.5)
    native.set_num_threads(3)
    assert native.get_num_threads() == 3


def test_idle_workers_use_no_cpu(pool_lib):
    native.set_num_threads(4)
    run_fill(pool_lib, 1000)
    time.sleep(0.05)  # let the workers finish spinning and block
    start = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - start < 0.03


def test_many_tiny_loops_back_to_back(pool_lib):
    # Races between publishing a job and workers acknowledging the last one show up here.
    for threads in (2, 3, 4):
        native.set_num_threads(threads)
        counts = np.zeros(5, np.int32)
        tids = np.zeros(5, np.int64)
        for _ in range(2000):
            assert pool_lib.fill(5, counts.ctypes.data, tids.ctypes.data) == 0
        assert np.all(counts == 2000)


def test_a_slow_worker_does_not_hold_the_rest_of_the_loop(pool_lib):
    # A worker stuck in its chunk (100 ms, as if preempted) keeps that chunk only: the caller
    # claims every other chunk, then waits for the worker to leave (that it sleeps rather than
    # spins while it waits is a timing question: bench/threadpool.py measures the busy case).
    pool_lib.slow_worker.argtypes = [
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    native.set_num_threads(2)
    extent = 1000
    counts = np.zeros(extent, np.int32)
    tids = np.zeros(extent, np.int64)
    assert pool_lib.slow_worker(extent, 100_000_000, counts.ctypes.data, tids.ctypes.data) == 0
    assert np.all(counts == 1)
    caller = threading.get_native_id()
    worker_chunks = [(b, e) for b, e in guided_chunks(extent, 2) if tids[b] != caller]
    assert 1 <= len(worker_chunks) <= 2  # 2 only if the caller lost its core for 100 ms


def hold_up(pool_lib, sleep_s: float) -> None:
    """A 2-thread loop whose worker sleeps `sleep_s` in its chunk: the caller waits for it."""
    pool_lib.slow_worker.argtypes = [
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    counts = np.zeros(1000, np.int32)
    tids = np.zeros(1000, np.int64)
    assert pool_lib.slow_worker(1000, int(sleep_s * 1e9), counts.ctypes.data, tids.ctypes.data) == 0
    assert np.all(counts == 1)


def backoff_ns() -> int:
    lib = native.load()
    lib.tessera_backoff_ns.restype = ctypes.c_int64
    return lib.tessera_backoff_ns()


MAX_BACKOFF_S = 0.064  # tessera_rt.c, Note [backing off]: 1 ms, doubling, at most 64 ms


def held_up_in_a_row(pool_lib, loops: int) -> list[int]:
    """The back-off (ns) after each of `loops` held-up loops in a row, each the first loop after
    the last back-off. A worker that starts late (a loaded machine) makes the caller's own part
    long, and then the loop does not count as held up: retry until a whole row was."""
    for _ in range(10):
        native.set_num_threads(2)  # forgives
        backoffs = []
        for _ in range(loops):
            hold_up(pool_lib, 0.03)  # much longer than a late worker start
            backoffs.append(backoff_ns())
            if backoffs[-1] == 0:
                break
            if len(backoffs) < loops:
                time.sleep(backoffs[-1] / 1e9 + 0.005)
        if len(backoffs) == loops and all(backoffs):
            return backoffs
    pytest.fail(f"no {loops} loops in a row were held up in 10 tries")


def test_the_back_off_starts_at_1_ms_and_doubles_while_loops_are_held_up(pool_lib):
    backoffs = held_up_in_a_row(pool_lib, 8)
    assert [b // 1_000_000 for b in backoffs] == [1, 2, 4, 8, 16, 32, 64, 64]
    # A loop that is not held up forgives (the machine's load can hold one up too: retry).
    for _ in range(20):
        time.sleep(MAX_BACKOFF_S + 0.01)
        log_chunks(pool_lib, 1000)
        if backoff_ns() == 0:
            break
    assert backoff_ns() == 0


def test_loops_in_the_back_off_run_on_the_caller(pool_lib):
    held_up_in_a_row(pool_lib, 7)  # backing off for 64 ms
    begins, ends, tids = log_chunks(pool_lib, 1000)
    assert begins.tolist() == [0] and ends.tolist() == [1000]
    assert tids[0] == threading.get_native_id()
    native.set_num_threads(2)  # a new setting forgives
    assert backoff_ns() == 0
    begins, _, _ = log_chunks(pool_lib, 1000)
    assert len(begins) == len(guided_chunks(1000, 2))


def test_the_back_off_is_a_time_not_a_number_of_loops(pool_lib):
    # A neighbour that took the core for a while costs a while on one thread, then the pool
    # runs loops in parallel again, however many loops ran alone meanwhile (a count of loops
    # carried the back-off over several inferences of a small model).
    held_up_in_a_row(pool_lib, 7)
    for _ in range(300):  # more than the 256 loops the old count backed off for
        log_chunks(pool_lib, 1000)
    time.sleep(MAX_BACKOFF_S + 0.03)
    begins, _, _ = log_chunks(pool_lib, 1000)  # over: in parallel (it forgives or doubles)
    assert len(begins) == len(guided_chunks(1000, 2))
