"""Threads (Note [threads] in runtime/graph_module.py): one GraphModule shared by threads gives
every thread its own correct outputs, through set_input/run/get_output and through the single
call `run_with` / `m(...)`; two models run side by side on one thread pool; Ctrl-C interrupts a
long run of the main thread (Note [interrupting a run])."""

import subprocess
import sys
import threading

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.runtime import GraphModule

N = helper.make_node


def _compiled(k: int, size: int = 32, rows: int = 4):
    """y = relu(x @ w) + k, on x of shape (rows, size): parallel kernels, weights, the arena."""
    w = np.random.default_rng(k).standard_normal((size, size)).astype(np.float32)
    nodes = [
        N("MatMul", ["x", "w"], ["h"]),
        N("Relu", ["h"], ["r"]),
        N("Add", ["r", "k"], ["y"]),
    ]
    inits = {"w": w, "k": np.float32(k)}
    mod, params = from_onnx(make_model(nodes, {"x": ((rows, size), "float32")}, ["y"], inits))
    lib = tessera.build(mod, target="llvm", params=params)
    return lib, (lambda x: np.maximum(x @ w, 0) + k)


@pytest.fixture(scope="module")
def model():
    return _compiled(1)


@pytest.fixture(scope="module")
def bigger_model():
    """Runs long enough that threads sharing one executor overwrite each other's inputs (with
    one executor for all threads, as before Note [threads], 9 of 480 outputs came out wrong)."""
    return _compiled(1, size=128, rows=64)


def _in_threads(count: int, work) -> list:
    errors = []

    def guarded(t):
        try:
            work(t)
        except BaseException as err:  # noqa: BLE001 -- reported by the test
            errors.append(err)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _shared_module_runs(lib, reference, threads: int, runs: int) -> int:
    m = GraphModule(lib["default"]())
    wrong = []

    def work(t):
        rng = np.random.default_rng(t)
        for i in range(runs):
            x = rng.standard_normal((64, 128)).astype(np.float32)
            if i % 2:
                m.set_input("x", x)
                m.run()
                y = m.get_output(0).numpy()
            else:
                (y,) = m(x)
            if not np.allclose(y, reference(x), rtol=1e-4, atol=1e-4):
                wrong.append((t, i))

    assert _in_threads(threads, work) == []
    return len(wrong)


def test_a_shared_graph_module_is_correct_in_8_threads(bigger_model):
    assert _shared_module_runs(*bigger_model, threads=8, runs=40) == 0


@pytest.mark.slow
def test_8_threads_times_1000_runs_on_one_graph_module(bigger_model):
    assert _shared_module_runs(*bigger_model, threads=8, runs=1000) == 0


def test_run_with_and_call_return_copies_of_the_outputs(model):
    lib, reference = model
    m = GraphModule(lib["default"]())
    x = np.ones((4, 32), np.float32)
    (y,) = m.run_with({"x": x})
    np.testing.assert_allclose(y, reference(x), rtol=1e-5)
    (z,) = m(x=2 * x)
    np.testing.assert_allclose(y, reference(x), rtol=1e-5)  # not overwritten by the next run
    np.testing.assert_allclose(z, reference(2 * x), rtol=1e-5)
    with pytest.raises(TypeError, match="given both by position and by name"):
        m(x, x=x)
    with pytest.raises(TypeError, match="takes 1 inputs, got 2"):
        m(x, x)
    with pytest.raises(ValueError, match=r"run: input 'x' not set"):
        GraphModule(lib["default"]())()


def test_inputs_are_per_thread(model):
    lib, _ = model
    m = GraphModule(lib["default"]())
    m.set_input("x", np.ones((4, 32), np.float32))
    errors = _in_threads(1, lambda t: m.run())  # another thread has not set its input
    assert len(errors) == 1 and "input 'x' not set" in str(errors[0])


def test_two_models_run_side_by_side_on_one_thread_pool(model):
    other = _compiled(2, size=48)
    modules = [(GraphModule(lib["default"]()), ref, lib) for lib, ref in (model, other)]
    bad = []

    def work(t):
        m, reference, lib = modules[t % 2]
        size = 32 if t % 2 == 0 else 48
        rng = np.random.default_rng(t)
        for _ in range(40):
            x = rng.standard_normal((4, size)).astype(np.float32)
            (y,) = m.run_with(x=x)
            if not np.allclose(y, reference(x), rtol=1e-4, atol=1e-4):
                bad.append(t)

    assert _in_threads(8, work) == [] and bad == []


def test_ctrl_c_interrupts_a_long_run_of_the_main_thread(tmp_path):
    # a model of 40 chained 1536^2 matmuls (~290 GFLOP: seconds on any machine); SIGINT comes
    # 0.3 s into the first run. Without the watcher, run() would finish and the interrupt would
    # land only after it returned.
    code = """
import os, signal, threading, numpy as np
from onnx import helper
import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.runtime import GraphModule
# Python raises KeyboardInterrupt only if SIGINT was not ignored when it started, and a shell
# starts background jobs (`cmd &`) with SIGINT ignored: the handler is set, not inherited
signal.signal(signal.SIGINT, signal.default_int_handler)
n, depth = 1536, 40
nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", "w"], [f"h{i + 1}"])
         for i in range(depth)]
w = (np.eye(n) * 0.5).astype(np.float32)
mod, params = from_onnx(make_model(nodes, {"x": ((n, n), "float32")}, [f"h{depth}"], {"w": w}))
m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
m.set_input("x", np.ones((n, n), np.float32))
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
returned = False
try:
    m.run()
    returned = True
    threading.Event().wait(600)
except KeyboardInterrupt:
    print("interrupted; run returned:", returned, flush=True)
m2 = GraphModule(tessera.build(*from_onnx(make_model(
    [helper.make_node("Relu", ["x"], ["y"])], {"x": ((3,), "float32")}, ["y"])))["default"]())
print("still works:", m2(x=np.array([-1, 0, 2], np.float32))[0].tolist(), flush=True)
os._exit(0)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "interrupted; run returned: False" in proc.stdout, proc.stdout + proc.stderr
    assert "still works: [0.0, 0.0, 2.0]" in proc.stdout
