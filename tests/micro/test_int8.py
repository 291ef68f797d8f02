"""The Cortex-M int8 convolution (topi/micro): both forms (dot4 on SMLAD, bytes) give ONNX
Runtime's int8 results exactly on the host build, and the same integers on boards with the DSP
extension (M4) and without (M3); the strategy's space, default tile and configs."""

from __future__ import annotations

import random
import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx import numpy_helper as nh

import tessera
from tessera import autotune
from tessera.runtime import GraphModule, cpu
from tessera.topi.strategy import Config

M4 = "c -device=micro -mcpu=cortex-m4"
needs_qemu = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="arm-none-eabi-gcc or qemu-system-arm is not installed (scripts/setup.d/40-micro.sh)",
)


def qconv_model(cin, cout, kernel, *, group=1, stride=1, pads=(0, 0, 0, 0), hw=(7, 6),
                dtype=np.int8, seed=0):  # fmt: skip
    """One QLinearConv (per-channel weight scales, a bias, nonzero zero points) + its input."""
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    lo, hi = (-128, 128) if dtype == np.int8 else (0, 256)
    inits = [
        nh.from_array(np.array(0.05, np.float32), "xs"),
        nh.from_array(np.array(7 if dtype == np.int8 else 131, dtype), "xz"),
        nh.from_array(rng.integers(-127, 128, (cout, cin // group, kh, kw)).astype(np.int8), "w"),
        nh.from_array((rng.random(cout) * 0.02 + 0.002).astype(np.float32), "ws"),
        nh.from_array(np.zeros(cout, np.int8), "wz"),
        nh.from_array(np.array(0.25, np.float32), "ys"),
        nh.from_array(np.array(-3 if dtype == np.int8 else 120, dtype), "yz"),
        nh.from_array(rng.integers(-2000, 2000, cout).astype(np.int32), "b"),
    ]
    node = helper.make_node(
        "QLinearConv",
        ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
        ["y"],
        group=group,
        strides=[stride, stride],
        pads=list(pads),
    )
    shape = (1, cin, *hw)
    graph = helper.make_graph(
        [node],
        "qconv",
        [helper.make_tensor_value_info("x", elem, list(shape))],
        [helper.make_tensor_value_info("y", elem, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, rng.integers(lo, hi, shape).astype(dtype)


# (cin, cout, kernel, group, stride, pads): which form each takes is in the id
CASES = {
    "dot4_pointwise": (8, 12, (1, 1), 1, 1, (0, 0, 0, 0)),
    "dot4_3x3_stride2": (4, 5, (3, 3), 1, 2, (1, 1, 1, 1)),
    "dot4_grouped": (8, 6, (3, 3), 2, 1, (1, 0, 1, 2)),
    "bytes_depthwise": (6, 6, (3, 3), 6, 1, (1, 1, 1, 1)),
    "bytes_depthwise_stride2": (5, 5, (3, 3), 5, 2, (0, 1, 1, 0)),
    "bytes_one_channel_10x4": (1, 7, (5, 4), 1, 2, (2, 1, 3, 1)),
    "bytes_three_channels": (3, 4, (3, 3), 1, 1, (1, 1, 1, 1)),
}


def _build(model, x, target=M4, configs=None):
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    return tessera.build(mod, target=target, params=params, configs=configs)


def _host(lib, x):
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy().copy()


def _ort(model, x):
    """ORT's answer, or onnx.reference's where ORT's uint8 x int8 products saturate here."""
    pytest.importorskip("onnxruntime")
    from tessera.frontend.testing import run_int8_reference

    return run_int8_reference(model, {"x": x})[0]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_micro_int8_conv_matches_onnxruntime(case, dtype):
    # by default the requantize is in fixed point (within one step of ORT); with the float
    # requantize (the strategy's other implementation) the results are ORT's exactly
    cin, cout, kernel, group, stride, pads = CASES[case]
    model, x = qconv_model(cin, cout, kernel, group=group, stride=stride, pads=pads, dtype=dtype)
    expected = _ort(model, x).astype(np.int32)
    tasks = _tasks(model, x)
    form = case.split("_")[0]
    assert tasks["qnn.conv2d"].default(tessera.Target(M4)).impl == form, "the rule's form"
    assert tasks["qnn.requantize"].default(tessera.Target(M4)).impl == "fixed"
    fixed = _host(_build(model, x), x).astype(np.int32)
    assert np.abs(fixed - expected).max() <= 1
    exact = _build(model, x, configs={tasks["qnn.requantize"]: Config("float")})
    np.testing.assert_array_equal(_host(exact, x), expected)


def _tasks(model, x) -> dict:
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    return {t.workload.op: t for t in autotune.extract_tasks(mod, params, tessera.Target(M4))}


def test_fixed_point_requantize_rounds_half_up_exactly():
    from fractions import Fraction

    from tessera.topi.micro.requantize import fixed_point, reference

    rng = np.random.default_rng(0)
    scales = np.array([0.0, 1e-9, 2.0**-40, 3.1e-4, 0.0123, 0.2, 0.2499], np.float32)
    mult, shift = fixed_point(scales)
    acc = np.concatenate([rng.integers(-(2**31), 2**31, 2000), [0, 1, -1, 2**31 - 1, -(2**31)]])
    acc = acc.astype(np.int32)
    for s, m, t in zip(scales, mult, shift, strict=True):
        got = reference(acc, np.full_like(acc, m), np.full_like(acc, t), 0, "int8")
        for a, y in zip(
            acc[:300].tolist() + acc[-5:].tolist(),
            got[:300].tolist() + got[-5:].tolist(),
            strict=True,
        ):
            exact = Fraction(a) * Fraction(float(s))
            want = min(127, max(-128, int((exact + Fraction(1, 2)).__floor__())))
            assert y == want, (float(s), a)
    assert fixed_point(np.float32([0.25])) is None  # no exact form: the float requantize stays
    assert fixed_point(np.float32([-0.5])) is None and fixed_point(np.float32([np.nan])) is None


def test_dsp_source_accumulates_in_smlad():
    model, x = qconv_model(8, 4, (1, 1))
    lib = _build(model, x)
    (source,) = [s for s in lib.kernel_sources.values() if "tessera_dot_u8i8" in s]
    assert "__smlad(" in source and "#if defined(__ARM_FEATURE_DSP)" in source
    assert "tessera_dot_u8i8(0," not in source  # the accumulator goes into the dot itself
    assert "nearbyintf(" not in source  # rounding without libm (Note [micro rounding])


def test_strategy_space_default_and_a_given_config():
    model, x = qconv_model(8, 12, (1, 1), hw=(6, 7))
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    target = tessera.Target(M4)
    (task,) = [t for t in autotune.extract_tasks(mod, params, target)
               if t.workload.op == "qnn.conv2d"]  # fmt: skip
    spaces = task.implementations(target)
    assert set(spaces) == {"dot4"}  # 8 channels fill words: the bytes form does not apply
    default = task.default(target)
    assert default.impl == "dot4" and spaces["dot4"].valid(dict(default.knobs()))
    configs = list(task.configs(target))
    assert len(configs) > 4 and all(c.impl == "dot4" for c in configs)
    other = next(c for c in configs if c != default)
    assert task.valid(other, target)
    expected = _ort(model, x)
    lib = _build(model, x, configs={task: other})
    np.testing.assert_array_equal(_host(lib, x), expected)
    sampled = task.sample(target, random.Random(3))
    np.testing.assert_array_equal(_host(_build(model, x, configs={task: sampled}), x), expected)


def test_depthwise_tiles_one_channel():
    model, x = qconv_model(6, 6, (3, 3), group=6, pads=(1, 1, 1, 1))
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    target = tessera.Target(M4)
    (task,) = [t for t in autotune.extract_tasks(mod, params, target)
               if t.workload.op == "qnn.conv2d"]  # fmt: skip
    assert {c["ocb"] for c in task.configs(target)} == {1}
    assert not task.valid(Config("bytes", ocb=2, nw=2), target)


@needs_qemu
@pytest.mark.parametrize(
    "board", ["mps2-an386", "mps2-an385"], ids=["m4_dsp", "m3_no_dsp"]
)  # fmt: skip
def test_int8_convs_on_boards_with_and_without_dsp(board):
    from tessera.micro import Session, boards

    mcpu = boards.get_board(board).mcpu
    for case in ("dot4_3x3_stride2", "bytes_depthwise", "bytes_one_channel_10x4"):
        cin, cout, kernel, group, stride, pads = CASES[case]
        model, x = qconv_model(cin, cout, kernel, group=group, stride=stride, pads=pads)
        lib = _build(model, x, target=f"c -device=micro -mcpu={mcpu}")
        with Session(lib, board=board) as s:
            s.set_input("x", x)
            counts = s.run()
            y = s.get_output(0)
        assert min(counts) > 0
        np.testing.assert_array_equal(y, _host(lib, x), err_msg=case)
        expected = _ort(model, x).astype(np.int32)
        assert np.abs(y.astype(np.int32) - expected).max() <= 1, case


def test_fixed_point_requantize_pass_only_where_the_strategy_asks():
    from tessera.transform.fixed_point_requantize import fixed_point_requantize

    model, x = qconv_model(8, 4, (1, 1))
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    func = tessera.transform.fold_constant(tessera.transform.bind_params(mod, params))["main"]
    assert fixed_point_requantize(func, target="llvm") is func  # no micro strategy: unchanged
    new = fixed_point_requantize(func, target=M4)
    ops = [c.op.name for c in new.body]
    assert "qnn.requantize_fixed" in ops and "qnn.requantize" not in ops


@pytest.mark.parametrize("k, n", [(640, 128), (30, 12), (8, 5)])
def test_micro_int8_dense_matches_onnxruntime(k, n):
    rng = np.random.default_rng(k + n)
    inits = [
        nh.from_array(np.array(0.03, np.float32), "as"),
        nh.from_array(np.array(-5, np.int8), "az"),
        nh.from_array(rng.integers(-127, 128, (k, n)).astype(np.int8), "b"),
        nh.from_array(np.array(0.004, np.float32), "bs"),
        nh.from_array(np.array(0, np.int8), "bz"),
        nh.from_array(np.array(0.3, np.float32), "ys"),
        nh.from_array(np.array(2, np.int8), "yz"),
    ]
    node = helper.make_node(
        "QLinearMatMul", ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"], name="fc"
    )
    graph = helper.make_graph(
        [node],
        "qdense",
        [helper.make_tensor_value_info("x", TensorProto.INT8, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, [1, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    x = rng.integers(-128, 128, (1, k)).astype(np.int8)
    expected = _ort(model, x).astype(np.int32)
    task = _tasks(model, x)["qnn.dense"]
    target = tessera.Target(M4)
    assert task.valid(task.default(target), target)
    for config in list(task.configs(target)):
        got = _host(_build(model, x, configs={task: config}), x).astype(np.int32)
        assert np.abs(got - expected).max() <= 1, config


@needs_qemu
@pytest.mark.slow
def test_ds_cnn_int8_fits_mlperf_tiny_budget_and_matches():
    # MLPerf Tiny's keyword spotting bar: DS-CNN int8 in <= 64 KB of RAM and <= 128 KB of flash
    # (code included); the board's output equals the host build's, and ORT's within one step
    from tessera.micro import Session, mlperf_tiny

    pytest.importorskip("onnxruntime")
    model = mlperf_tiny.quantize_int8(mlperf_tiny.kws_ds_cnn())
    x = np.random.default_rng(1).integers(-128, 128, (1, 1, 49, 10)).astype(np.int8)
    mod, params = tessera.frontend.from_onnx(model, {"input": x.shape})
    lib = tessera.build(mod, target=M4, params=params)
    report = lib.memory_report()
    assert report["ram_bytes"]["total"] <= 64 * 1024
    assert report["flash_bytes"]["total"] <= 128 * 1024 and report["flash_bytes"]["code"] > 0
    with Session(lib, board="mps2-an386") as s:
        s.set_input("input", x)
        s.run()
        y = s.get_output(0)
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("input", x)
    m.run()
    np.testing.assert_array_equal(y, m.get_output(0).numpy())
    session = __import__("onnxruntime").InferenceSession(model.SerializeToString())
    expected = session.run(None, {"input": x})[0]
    assert np.abs(y.astype(np.int32) - expected.astype(np.int32)).max() <= 1


@needs_qemu
def test_tune_on_board_picks_fewer_instructions_with_equal_outputs():
    from tessera.micro.tune import tune_on_board

    model, x = qconv_model(4, 6, (3, 3), pads=(1, 1, 1, 1), hw=(5, 6))
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    result = tune_on_board(mod, params, M4, board="mps2-an386", max_trials=2)
    assert result.best_instructions <= result.default_instructions
    tried = [t for t in result.trials if t[0].workload.op == "qnn.conv2d"]
    assert len(tried) == 1 and all(count is not None for _, _, count in tried)
    assert all(task.workload.op != "qnn.requantize" for task, _, _ in result.trials)
    if result.configs:  # a tuned build runs what was measured
        lib = _build(model, x, configs=result.configs)
        np.testing.assert_array_equal(_host(lib, x), _host(_build(model, x), x))
