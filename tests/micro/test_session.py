"""tessera.micro.Session on QEMU boards: the model's outputs equal the host build's, instruction
counts per call are exact and repeatable, and what goes wrong says so clearly."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tessera import te
from tessera.graph import parse, register_op
from tessera.micro import MicroError, Session

pytestmark = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="arm-none-eabi-gcc or qemu-system-arm is not installed (scripts/setup.d/40-micro.sh)",
)


def test_start_set_run_read_close(lib, sample_input, host_output):
    x = sample_input(1)
    with Session(lib, board="mps2-an386") as s:
        s.set_input("x", x)
        counts = s.run()
        y = s.get_output(0)
        assert len(counts) == len(lib.plan["calls"]) and min(counts) > 0
        s.set_input(0, x)
        assert s.run() == counts  # the same instructions on every run: exact, not timed
        single = s.call(0)
    np.testing.assert_allclose(y, host_output(lib, x), rtol=1e-5, atol=1e-6)
    assert single == counts[0]
    s.start()  # a closed session starts again, with a fresh board
    try:
        s.set_input("x", x)
        assert s.run() == counts
    finally:
        s.close()


@pytest.mark.parametrize("board, mcpu", [("mps2-an500", "cortex-m7"), ("mps3-an547", "cortex-m55")])
def test_other_boards_match_the_host(board, mcpu, compiled, sample_input, host_output):
    lib = compiled(mcpu)
    x = sample_input(2)
    with Session(lib, board=board) as s:
        s.set_input("x", x)
        s.run()
        y = s.get_output("y")
    np.testing.assert_allclose(y, host_output(lib, x), rtol=1e-5, atol=1e-6)


def test_not_started_and_wrong_tensors_are_clear_errors(lib, sample_input):
    s = Session(lib, board="mps2-an386")
    with pytest.raises(MicroError, match="not started: call start"):
        s.set_input("x", sample_input())
    with pytest.raises(MicroError, match="not started"):
        s.run()
    with s:
        with pytest.raises(
            MicroError, match=r"input 'x' is float32\[1, 2, 8, 8\], got float32\[1, 2, 8\]"
        ):
            s.set_input("x", np.zeros((1, 2, 8), np.float32))
        with pytest.raises(MicroError, match="got float64"):
            s.set_input("x", np.zeros((1, 2, 8, 8)))
        with pytest.raises(MicroError, match=r"no input 'z' \(inputs: \['x'\]\)"):
            s.set_input("z", sample_input())
        with pytest.raises(MicroError, match="call 99 is out of range"):
            s.call(99)
        s.set_input("x", sample_input())  # the session still works after refused requests
        assert s.run()


def test_a_board_of_another_cpu_is_refused(lib):
    with pytest.raises(MicroError, match="compiled for -mcpu=cortex-m4, board mps2-an500 is"):
        Session(lib, board="mps2-an500").start()
    with pytest.raises(ValueError, match="unknown board 'pc'"):
        Session(lib, board="pc")


# A kernel that reads where its input tells it to, unchecked: an index far out of its buffer
# makes the core fault, as a buggy kernel would.
_unchecked = register_op("test.micro_unchecked_take")
_unchecked.type_rule(lambda x, i: x)


@_unchecked.compute
def _(x, i):
    return te.compute(x.shape, lambda j: x(i(j)), name="unchecked_take", tag="injective")


def test_a_faulting_kernel_is_reported_with_its_call(compiled):
    import tessera

    func = parse(
        "def main(%x: f32[4], %i: i32[4]) {"
        " %1 = test.micro_unchecked_take(%x, %i) : f32[4]; return %1 }"
    )
    lib = tessera.build(func, target="c -device=micro -mcpu=cortex-m4")
    with Session(lib, board="mps2-an386") as s:
        s.set_input("x", np.arange(4, dtype=np.float32))
        s.set_input("i", np.array([2, 1, 0, 3], np.int32))
        s.run()
        np.testing.assert_array_equal(s.get_output(0), [2, 1, 0, 3])
        s.set_input("i", np.array([0, 0x10000000, 0, 0], np.int32))  # 1 GiB past x: no memory
        with pytest.raises(MicroError, match=r"BusFault at pc 0x[0-9a-f]+ in call 0 of the plan"):
            s.run()
        with pytest.raises(MicroError, match="not started"):  # the board is gone
            s.run()


def test_integer_only_model_is_exact_on_the_board():
    import tessera
    from tessera.runtime import GraphModule, cpu

    func = parse(
        "def main(%x: i32[16], %y: i32[16]) {"
        " %1 = multiply(%x, %y) : i32[16]; %2 = subtract(%1, %x) : i32[16];"
        " %3 = divide(%2, %y) : i32[16]; %4 = mod(%3, %y) : i32[16]; return %4 }"
    )
    lib = tessera.build(func, target="c -device=micro -mcpu=cortex-m3")
    rng = np.random.default_rng(0)
    x = rng.integers(-1000, 1000, 16).astype(np.int32)
    y = rng.integers(1, 50, 16).astype(np.int32) * rng.choice([-1, 1], 16).astype(np.int32)
    with Session(lib, board="mps2-an385") as s:
        s.set_input("x", x)
        s.set_input("y", y)
        s.run()
        board = s.get_output(0)
    host = GraphModule(lib["default"](cpu(0)))
    host.set_input("x", x)
    host.set_input("y", y)
    host.run()
    np.testing.assert_array_equal(board, host.get_output(0).numpy())  # exactly
    assert "float" not in "".join(lib.kernel_sources.values()).split("*/", 1)[1]


def test_outputs_that_are_inputs_are_copied_on_the_board():
    import tessera

    func = parse("def main(%x: f32[4]) { %1 = exp(%x) : f32[4]; return %1, %x, %1 }")
    lib = tessera.build(func, target="c -device=micro -mcpu=cortex-m4")
    x = np.arange(4, dtype=np.float32)
    with Session(lib) as s:
        s.set_input("x", x)
        s.run()
        outputs = [s.get_output(k) for k in range(3)]
    np.testing.assert_allclose(outputs[0], np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(outputs[1], x)
    np.testing.assert_array_equal(outputs[2], outputs[0])


def test_board_project_builds_and_runs_with_make(lib, tmp_path, sample_input, host_output):
    import subprocess

    folder = lib.export_library(tmp_path / "kws_m4", board="mps2-an386")
    assert {"Makefile", "board.ld", "tessera_fw_startup.c", "tessera_fw_standalone.c"} <= {
        p.name for p in folder.iterdir()
    }
    x = sample_input(4)
    x.tofile(folder / "input_00.bin")
    result = subprocess.run(["make", "-s", "run"], cwd=folder, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    y = np.fromfile(folder / "output_00.bin", np.float32).reshape(1, 3)
    np.testing.assert_allclose(y, host_output(lib, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="compiled for -mcpu=cortex-m4, board mps2-an500"):
        lib.export_library(tmp_path / "other", board="mps2-an500")


def test_quantized_int8_model_is_exact_on_the_board():
    # an already quantized ONNX model (QLinearConv): the board's int8 outputs (the micro int8
    # kernels, requantized in fixed point) equal the host build's exactly and ONNX Runtime's
    # within one step
    import onnx
    from onnx import TensorProto, helper
    from onnx import numpy_helper as nh

    import tessera

    rng = np.random.default_rng(0)
    scalars = {"xs": 0.05, "ws": 0.01, "ys": 0.2}
    inits = [nh.from_array(np.array(v, np.float32), k) for k, v in scalars.items()]
    inits += [nh.from_array(np.array(z, np.int8), k) for k, z in (("xz", 0), ("wz", 0), ("yz", 3))]
    inits.append(nh.from_array(rng.integers(-127, 127, (8, 4, 3, 3)).astype(np.int8), "w"))
    node = helper.make_node(
        "QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1]
    )
    graph = helper.make_graph(
        [node],
        "qconv",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 8, 8, 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    mod, params = tessera.frontend.from_onnx(model, {"x": (1, 4, 8, 8)})
    lib = tessera.build(mod, target="c -device=micro -mcpu=cortex-m4", params=params)
    x = rng.integers(-128, 127, (1, 4, 8, 8)).astype(np.int8)
    with Session(lib) as s:
        s.set_input("x", x)
        s.run()
        y = s.get_output(0)
    from tessera.micro.host import HostBuild

    np.testing.assert_array_equal(y, HostBuild(lib.c_sources(), lib.plan).invoke([x])[0])
    ort = pytest.importorskip("onnxruntime")
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    assert np.abs(y.astype(np.int32) - expected).max() <= 1
