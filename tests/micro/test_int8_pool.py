"""Int8 pooling of QDQ models (DQ -> AveragePool / GlobalAveragePool / MaxPool -> Q): the
average pools run as int32 window sums (qnn.sum_pool2d) and one requantize (fixed point on the
micro target), max pools on the int8 values; results within one step of ONNX Runtime's
QLinearAveragePool and equal on the host build and on boards with and without DSP."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import tessera
from tessera.runtime import GraphModule, cpu
from tessera.topi.strategy import Config

from .test_int8 import M4, needs_qemu


def qdq_pool(op, shape, *, dtype=np.int8, seed=0, **attrs):
    """x (int8/uint8) -> DQ -> op -> Q with another scale and zero point (same for MaxPool)."""
    rng = np.random.default_rng(seed)
    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    lo, hi = (-128, 128) if dtype == np.int8 else (0, 256)
    same = op == "MaxPool"
    inits = [
        nh.from_array(np.array(0.043, np.float32), "xs"),
        nh.from_array(np.array(5 if dtype == np.int8 else 131, dtype), "xz"),
        nh.from_array(np.array(0.043 if same else 0.0171, np.float32), "ys"),
        nh.from_array(np.array(5 if same else -9 if dtype == np.int8 else 118, dtype), "yz"),
    ]
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
        helper.make_node(op, ["xf"], ["yf"], **attrs),
        helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "qpool", [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, rng.integers(lo, hi, shape).astype(dtype)


def _ort(model, x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _build(model, x, target=M4, configs=None):
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    return mod, tessera.build(mod, target=target, params=params, configs=configs)


def _host(lib, x):
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy().copy()


# (op, input shape, attributes): the first three take the integer path
POOLS = {
    "avg_25x5_ds_cnn": ("AveragePool", (1, 8, 25, 5), {"kernel_shape": [25, 5]}),
    "avg_3x3_s2_pads_counted": ("AveragePool", (1, 3, 9, 8), {
        "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 0], "count_include_pad": 1}),
    "global_avg": ("GlobalAveragePool", (1, 6, 7, 5), {}),
    "avg_pads_not_counted": ("AveragePool", (1, 3, 6, 6), {
        "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # float32: windows count differently
    "max_3x3_s2": ("MaxPool", (1, 4, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2]}),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("case", sorted(POOLS))
def test_int8_pools_match_onnxruntime(case, dtype):
    op, shape, attrs = POOLS[case]
    model, x = qdq_pool(op, shape, dtype=dtype, **attrs)
    mod, lib = _build(model, x)
    text = str(mod)
    integer = case != "avg_pads_not_counted"
    assert ("nn.avg_pool2d" not in text) == integer, text  # the float32 path, only where needed
    if op == "AveragePool":
        assert ("qnn.sum_pool2d" in text) == integer, text
    expected = _ort(model, x).astype(np.int32)
    y = _host(lib, x)
    assert y.dtype == dtype and y.shape == expected.shape
    assert np.abs(y.astype(np.int32) - expected).max() <= 1, case
    if op == "MaxPool":
        np.testing.assert_array_equal(y, expected)


def test_sum_pool_requantize_is_fixed_point_on_micro_and_float_config_is_orts_rounding():
    op, shape, attrs = POOLS["avg_25x5_ds_cnn"]
    model, x = qdq_pool(op, shape, **attrs)
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    tasks = {t.workload.op: t for t in tessera.autotune.extract_tasks(mod, params, M4)}
    assert tasks["qnn.requantize"].default(tessera.Target(M4)).impl == "fixed"
    _, lib = _build(model, x, configs={tasks["qnn.requantize"]: Config("float")})
    # float: round(float32(sum) * float32(xs / (ys * count))) half to even, as ORT's quantize
    acc = (x.astype(np.int64) - 5).sum(axis=(2, 3), keepdims=True)
    ratio = np.float32(np.float32(0.043) / np.float32(0.0171) / np.float32(125))
    want = np.clip(np.round(acc.astype(np.float32) * ratio) - 9, -128, 127).astype(np.int8)
    np.testing.assert_array_equal(_host(lib, x), want)


def test_sum_pool_reference_and_kernel_agree_on_generic_cpu():
    op, shape, attrs = POOLS["avg_3x3_s2_pads_counted"]
    model, x = qdq_pool(op, shape, **attrs)
    _, lib = _build(model, x, target="llvm")
    expected = _ort(model, x).astype(np.int32)
    assert np.abs(_host(lib, x).astype(np.int32) - expected).max() <= 1


@needs_qemu
@pytest.mark.parametrize("board", ["mps2-an386", "mps2-an385"], ids=["m4_dsp", "m3_no_dsp"])
def test_int8_pools_on_boards_equal_the_host_build(board):
    from tessera.micro import Session, boards

    mcpu = boards.get_board(board).mcpu
    for case in ("avg_25x5_ds_cnn", "avg_3x3_s2_pads_counted", "global_avg"):
        op, shape, attrs = POOLS[case]
        model, x = qdq_pool(op, shape, **attrs)
        _, lib = _build(model, x, target=f"c -device=micro -mcpu={mcpu}")
        with Session(lib, board=board) as s:
            s.set_input("x", x)
            s.run()
            y = s.get_output(0)
        np.testing.assert_array_equal(y, _host(lib, x), err_msg=case)
