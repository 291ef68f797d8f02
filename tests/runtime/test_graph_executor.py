"""GraphExecutorFactory / GraphModule with a hand-written executor plan over the C test kernels
(no compiler involved): running, inputs and outputs, errors, export with weights, overhead."""

import copy
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tessera.runtime import (
    GraphExecutorFactory,
    GraphModule,
    Module,
    artifact,
    cc,
    cpu,
    load_module,
    native,
    nd,
)
from tessera.runtime.graph_executor import PARAMS_SYMBOL

KERNEL_SOURCE = (Path(__file__).parent / "kernels" / "module_kernels.c").read_text()
REPO = Path(__file__).resolve().parents[2]
N = 8


def _aligned_blob(*arrays) -> tuple[np.ndarray, list[int]]:
    offsets, size = [], 0
    for a in arrays:
        offsets.append(size)
        size += -(-a.nbytes // 64) * 64
    raw = np.zeros(size + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    blob = raw[start : start + size]
    for a, off in zip(arrays, offsets, strict=True):
        blob[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
    return blob, offsets


W = np.linspace(-1, 1, N, dtype=np.float32)


def _plan() -> dict:
    """y = (x + w) + x through one arena slot; outputs also x itself and the weight w."""
    f32 = {"dtype": "float32", "shape": [N]}
    return {
        "version": 1,
        "inputs": [{"name": "x", **f32}],
        "outputs": [
            {"name": "y", **f32, "storage": ["output", 0]},
            {"name": "x_again", **f32, "storage": ["input", 0]},
            {"name": "w", **f32, "storage": ["param", 0]},
            {"name": "y_again", **f32, "storage": ["output", 0]},
        ],
        "params": [{"name": "w", **f32, "offset": 0}],
        "params_nbytes": 64,
        "arena_nbytes": 64,
        "calls": [
            {"kernel": "myadd", "args": [["input", 0], ["param", 0], ["arena", 0]], "vars": [N]},
            {"kernel": "myadd", "args": [["arena", 0], ["input", 0], ["output", 0]], "vars": [N]},
        ],
    }


@pytest.fixture(scope="module")
def kernels(module_lib_path, module_infos):
    return Module.from_library(
        module_lib_path, module_infos, {"c": KERNEL_SOURCE}, c_sources=[KERNEL_SOURCE]
    )


@pytest.fixture
def factory(kernels):
    blob, _ = _aligned_blob(W)
    return GraphExecutorFactory(kernels, _plan(), blob)


def test_runs_the_plan(factory):
    m = GraphModule(factory["default"](cpu(0)))
    x = np.arange(N, dtype=np.float32)
    m.set_input("x", x)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), (x + W) + x)
    np.testing.assert_array_equal(m.get_output(1).numpy(), x)
    np.testing.assert_array_equal(m.get_output(2).numpy(), W)
    assert m.get_output(3) is m.get_output(0)
    assert m.get_num_outputs() == 4 and m.get_num_inputs() == 1 and m.num_calls == 2
    m.run(x=nd.array(-x))  # keywords, and an NDArray
    np.testing.assert_array_equal(m.get_output(0).numpy(), (W - x) - x)
    out = nd.empty((N,), "float32")
    assert m.get_output(0, out) is out
    np.testing.assert_array_equal(out.numpy(), (W - x) - x)


def test_inputs_info_and_independent_executors(factory):
    a, b = GraphModule(factory["default"](cpu(0))), GraphModule(factory.create())
    assert a.get_input_info() == ({"x": (N,)}, {"x": "float32"})
    a.set_input(0, np.ones(N, np.float32))
    b.set_input("x", np.zeros(N, np.float32))
    a.run()
    b.run()
    np.testing.assert_array_equal(a.get_output(0).numpy(), (1 + W) + 1)
    np.testing.assert_array_equal(b.get_output(0).numpy(), W)
    np.testing.assert_array_equal(a.get_input("x").numpy(), np.ones(N))
    assert factory.num_kernels == len(factory.get_lib().function_names)
    assert list(factory.get_params()) == ["w"]
    np.testing.assert_array_equal(factory.get_params()["w"], W)


def test_input_errors_name_the_input(factory):
    m = GraphModule(factory["default"](cpu(0)))
    with pytest.raises(ValueError, match=r"input 'x': expected float32 of shape \(8,\), got "
                       r"float32 of shape \(9,\)"):  # fmt: skip
        m.set_input("x", np.zeros(9, np.float32))
    with pytest.raises(ValueError, match=r"input 'x': expected float32 .* got float64"):
        m.set_input("x", np.zeros(N))
    with pytest.raises(ValueError, match=r"no input 'y' \(inputs: x\)"):
        m.set_input("y", np.zeros(N, np.float32))
    with pytest.raises(ValueError, match="input index 3 out of range"):
        m.set_input(3, np.zeros(N, np.float32))
    with pytest.raises(TypeError, match="numpy array or an NDArray"):
        m.set_input("x", [0.0] * N)
    with pytest.raises(
        ValueError, match=r"output index 4 out of range \(the model has 4 outputs\)"
    ):
        m.get_output(4)
    with pytest.raises(TypeError, match="expects lib\\['default'\\]"):
        GraphModule(factory)
    with pytest.raises(KeyError, match="'default'"):
        factory["main"]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda p: p["calls"][0]["args"].pop(), "myadd takes 3 buffers, the plan passes 2"),
        (lambda p: p["calls"][0].update(vars=[]), "myadd takes 1 vars"),
        (lambda p: p["calls"][0]["args"][2].__setitem__(1, 64), "arena slot at 64 is out"),
        (lambda p: p["calls"][0]["args"][2].__setitem__(0, "heap"), "unknown argument kind"),
        (lambda p: p["calls"][0].update(vars=[4]), "argument 'A' of myadd is float32\\[8\\]"),
        (lambda p: p["calls"][0].update(kernel="nope"), "no function 'nope'"),
    ],
)
def test_a_bad_plan_fails_when_the_executor_is_made(kernels, edit, message):
    plan = copy.deepcopy(_plan())
    edit(plan)
    factory = GraphExecutorFactory(kernels, plan, _aligned_blob(W)[0])
    with pytest.raises((ValueError, KeyError), match=message):
        factory["default"](cpu(0))


def test_plan_version_and_blob_checks(kernels):
    with pytest.raises(ValueError, match="plan version 2"):
        GraphExecutorFactory(kernels, {**_plan(), "version": 2}, _aligned_blob(W)[0])
    with pytest.raises(ValueError, match="blob has 32 bytes, the plan needs 64"):
        GraphExecutorFactory(kernels, _plan(), W)
    raw = np.zeros(65 + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + 1  # misaligned on purpose: the factory copies it
    raw[start : start + 32] = W.view(np.uint8)
    factory = GraphExecutorFactory(kernels, _plan(), raw[start : start + 64])
    assert factory.get_params()["w"].ctypes.data % 64 == 0


def test_a_failing_kernel_is_reported(kernels):
    plan = {
        **_plan(),
        "calls": [{"kernel": "always_fails", "args": [["arena", 0]], "vars": []}],
        "outputs": [],
    }
    plan["arena_nbytes"] = 64
    m = GraphModule(GraphExecutorFactory(kernels, plan, _aligned_blob(W)[0])["default"](cpu(0)))
    with pytest.raises(RuntimeError, match="kernel always_fails failed"):
        m.run(x=np.zeros(N, np.float32))


CHILD = """
import sys
import numpy as np
import tessera.runtime as rt

lib = rt.load_module(sys.argv[1])
assert isinstance(lib, rt.GraphExecutorFactory), lib
w = lib.get_params()["w"]
assert not w.flags.writeable and w.ctypes.data % 64 == 0
m = rt.GraphModule(lib["default"](rt.cpu(0)))
x = np.arange(8, dtype="float32")
m.set_input("x", x)
m.run()
assert (m.get_output(0).numpy() == (x + np.linspace(-1, 1, 8, dtype="float32")) + x).all()
compiler = ("tessera.te", "tessera.tir", "tessera.codegen", "tessera.ir", "tessera.graph",
            "tessera.driver", "llvmlite", "onnx")
loaded = sorted(m for m in compiler if m in sys.modules)
assert not loaded, loaded
print("child ok")
"""


def test_export_holds_plan_and_weights_and_runs_without_the_compiler(factory, tmp_path):
    path = factory.export_library(tmp_path / "model.so")
    out = subprocess.run(["nm", "-D", str(path)], capture_output=True, text=True)
    if out.returncode == 0:
        assert PARAMS_SYMBOL in out.stdout
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert "child ok" in proc.stdout
    loaded = load_module(path)  # and in this process, re-exported by copying
    again = loaded.export_library(tmp_path / "copy.so")
    assert again.read_bytes() == path.read_bytes()


def test_a_plan_of_many_calls_runs(kernels):
    """A run of 401 calls of a kernel that does almost nothing, ping-ponging two arena slots (the
    executor's own cost per call is measured by bench/overheads.py, not asserted here)."""
    calls = 400
    f32 = {"dtype": "float32", "shape": [1]}
    plan = {
        "version": 1,
        "inputs": [{"name": "x", **f32}],
        "outputs": [{"name": "y", **f32, "storage": ["output", 0]}],
        "params": [],
        "params_nbytes": 0,
        "arena_nbytes": 128,
        "calls": [
            {"kernel": "myadd", "args": [["input", 0], ["arena", 64 * (k % 2)],
                                         ["arena", 64 * (1 - k % 2)]], "vars": [1]}
            for k in range(calls)
        ] + [{"kernel": "myadd", "args": [["input", 0], ["input", 0], ["output", 0]], "vars": [1]}],
    }  # fmt: skip
    m = GraphModule(GraphExecutorFactory(kernels, plan, np.zeros(0, np.uint8)).create())
    with pytest.raises(ValueError, match="run: input 'x' not set"):
        m.run()
    m.set_input("x", np.ones(1, np.float32))
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), np.full(1, 2, np.float32))


# -- the native entry and the per-call profile ----------------------------------------------------

# A hand-written entry with the contract of the generated one (RUN_SYMBOL in graph_executor.py):
# the plan of _plan() in one native call; it reports fixed call times, so the profile is exact.
ENTRY_SOURCE = """
int32_t my_entry(void** inputs, void** outputs, const void* params, void* arena,
                 int64_t* call_ns) {
  void* b[3];
  int64_t v[1] = {8};
  b[0] = inputs[0]; b[1] = (void*)params; b[2] = arena;
  if (myadd(b, v) != 0) return 1;
  if (call_ns) call_ns[0] = 5000;
  b[0] = arena; b[1] = inputs[0]; b[2] = outputs[0];
  if (myadd(b, v) != 0) return 2;
  if (call_ns) call_ns[1] = 15000;
  return 0;
}
"""


def _with_nodes(plan: dict) -> dict:
    for k, call in enumerate(plan["calls"]):
        call["nodes"] = [f"node{k}", "shared"]
    return plan


def test_profile_without_an_entry_times_the_python_loop(kernels):
    blob, _ = _aligned_blob(W)
    plan = _with_nodes(_plan())
    m = GraphModule(GraphExecutorFactory(kernels, plan, blob).create())
    assert not m._ex.use_native
    m.set_input("x", np.ones(N, np.float32))
    rows = m.profile(repeat=2)
    assert [(r.index, r.kernel, r.nodes) for r in rows] == [
        (0, "myadd", ["node0", "shared"]),
        (1, "myadd", ["node1", "shared"]),
    ]
    assert all(r.seconds > 0 for r in rows) and abs(sum(r.share for r in rows) - 1) < 1e-9


def test_an_exported_entry_runs_the_model_and_reports_call_times(tmp_path, module_infos):
    source = KERNEL_SOURCE + ENTRY_SOURCE
    lib_path = tmp_path / "kernels_entry.so"
    (tmp_path / "k.c").write_text(source)
    raw = tmp_path / "kernels_entry.raw.so"
    cc.compile_shared(raw, sources=[tmp_path / "k.c"], flags=["-I", str(native.include_dir())])
    artifact.seal(raw, lib_path)
    kernels = Module.from_library(lib_path, module_infos, {"c": source}, c_sources=[source])
    blob, _ = _aligned_blob(W)
    plan = {**_with_nodes(_plan()), "entry": "my_entry"}
    path = GraphExecutorFactory(kernels, plan, blob).export_library(tmp_path / "model.so")
    m = GraphModule(load_module(path).create())
    assert m._ex.use_native
    x = np.arange(N, dtype=np.float32)
    m.set_input("x", x)
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), (x + W) + x)
    rows = m.profile(repeat=3)
    assert [(r.kernel, r.nodes, r.seconds, r.share) for r in rows] == [
        ("myadd", ["node0", "shared"], 5e-6, 0.25),
        ("myadd", ["node1", "shared"], 15e-6, 0.75),
    ]
    m._ex.use_native = False  # the Python loop gives the same outputs
    m.run()
    np.testing.assert_array_equal(m.get_output(0).numpy(), (x + W) + x)

    plan["entry"] = "no_such_entry"
    path = GraphExecutorFactory(kernels, plan, blob).export_library(tmp_path / "bad.so")
    with pytest.raises(ValueError, match="no_such_entry"):
        load_module(path)
