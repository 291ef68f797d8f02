"""The benchmark's fair turns (tessera/cli/bench.py, Note [fair turns]): who runs when, and the
wait for the other engine's threads to go idle. No timings of models are asserted."""

import sys
import threading
import time

import pytest

from tessera.cli import bench


def recorder(log: list, name: str):
    return lambda: log.append(name)


def test_turns_are_blocks_with_an_untimed_first_run():
    log: list[str] = []
    runners = {"a": recorder(log, "a"), "b": recorder(log, "b")}
    times, waits = bench.measure_in_blocks(runners, repeat=7, warmup=2, duration=None, block=3)
    assert [len(times["a"]), len(times["b"])] == [7, 7]
    assert [len(waits["a"]), len(waits["b"])] == [3, 3]  # turns of 3, 3 and 1 timed runs
    turn = lambda n, k: [n] * (1 + k)  # noqa: E731 - the untimed run, then k timed ones
    expected = ["a", "a", "b", "b"] + turn("a", 3) + turn("b", 3) + turn("a", 3) + turn("b", 3)
    assert log == expected + turn("a", 1) + turn("b", 1)


def test_duration_stops_after_at_least_three_runs_each():
    log: list[str] = []
    times, _ = bench.measure_in_blocks({"a": recorder(log, "a")}, None, 0, 0.0, block=1)
    assert len(times["a"]) == 3


@pytest.mark.parametrize("kwargs", [{"block": 0}, {"repeat": None, "duration": None}])
def test_bad_arguments_are_refused(kwargs):
    args = {"repeat": 3, "warmup": 0, "duration": None, "block": 2} | kwargs
    with pytest.raises(ValueError, match="measure_in_blocks"):
        bench.measure_in_blocks({"a": lambda: None}, **args)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_wait_until_quiet_outlasts_a_spinning_thread():
    stop = time.perf_counter() + 0.15

    def spin():  # a pool thread that keeps spinning after its run, as ONNX Runtime's do
        while time.perf_counter() < stop:
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    waited = bench.wait_until_quiet()
    spinner.join()
    assert waited >= 0.1  # it waited for the spinner to end, not a fixed sleep
    assert bench.wait_until_quiet(limit=0.5) < 0.5  # nothing runs now: quiet within the limit


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_wait_until_quiet_gives_up_at_its_limit():
    done = threading.Event()

    def spin():
        while not done.is_set():
            pass

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:  # on a loaded machine the spinner may not get a core in a step (and looks quiet):
        waits = []  # it must keep the wait to its limit at least once in a few tries
        for _ in range(5):
            waits.append(bench.wait_until_quiet(limit=0.1))
            if waits[-1] >= 0.1:
                break
    finally:
        done.set()
        spinner.join()
    assert 0.1 <= waits[-1] < 2.0, waits
