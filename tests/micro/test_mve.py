"""The Cortex-M55's MVE int8 kernels (topi/micro/mve.py): qnn.conv2d and qnn.dense re-packed for
a contiguous reduction (Note [MVE layouts]) on cores with MVE only, giving the same integers
as the M4's DSP kernels on the host build and on the emulated M55, and ORT's within one step."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import autotune
from tessera.topi.micro import mve
from tessera.topi.strategy import Config

from .test_int8 import CASES, _build, _host, _ort, qconv_model
from .test_int8_pool import POOLS, qdq_pool

M4 = "c -device=micro -mcpu=cortex-m4"
M55 = "c -device=micro -mcpu=cortex-m55"
needs_qemu = pytest.mark.skipif(
    shutil.which("arm-none-eabi-gcc") is None or shutil.which("qemu-system-arm") is None,
    reason="arm-none-eabi-gcc or qemu-system-arm is not installed (scripts/setup.d/40-micro.sh)",
)

# more than CASES: runs over 16 bytes with a tail (40 channels: 16 + 16 + 8), a dilated conv
# (the taps form), a channel multiplier of 2 (planes form, two outputs per plane)
MVE_CASES = {
    **CASES,
    "rows_40_channels": (40, 6, (1, 1), 1, 1, (0, 0, 0, 0)),
    "rows_3x3_20_channels": (20, 5, (3, 3), 1, 1, (1, 1, 1, 1)),
    "planes_multiplier_2": (4, 8, (3, 3), 4, 1, (1, 1, 1, 1)),
    "rows_1x1_stride2": (20, 6, (1, 1), 1, 2, (0, 0, 0, 0)),  # only the pixels read are copied
}


def _model(case, dtype=np.int8, dilation=1):
    cin, cout, kernel, group, stride, pads = MVE_CASES[case]
    model, x = qconv_model(cin, cout, kernel, group=group, stride=stride, pads=pads, dtype=dtype)
    if dilation != 1:
        model.graph.node[0].attribute.append(helper.make_attribute("dilations", [dilation] * 2))
    return model, x


def _ops(model, x, target) -> list[str]:
    from tessera.transform.pack_qnn_weights import pack_qnn_weights

    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    func = tessera.transform.fold_constant(tessera.transform.bind_params(mod, params))["main"]
    return [c.op.name for c in pack_qnn_weights(func, target=target).body]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("case", sorted(MVE_CASES))
def test_mve_conv_equals_dsp_kernels_and_onnxruntime(case, dtype):
    model, x = _model(case, dtype)
    assert "qnn.conv2d_mve" in _ops(model, x, M55)
    assert "qnn.conv2d_mve" not in _ops(model, x, M4)  # no MVE: the DSP kernels stay
    got = _host(_build(model, x, target=M55), x)
    np.testing.assert_array_equal(got, _host(_build(model, x, target=M4), x))
    assert np.abs(got.astype(np.int32) - _ort(model, x).astype(np.int32)).max() <= 1


@pytest.mark.parametrize("case", ["dot4_3x3_stride2", "bytes_depthwise", "dot4_grouped"])
def test_mve_dilated_convs_take_the_taps_form(case):
    model, x = _model(case, dilation=2)
    got = _host(_build(model, x, target=M55), x)
    np.testing.assert_array_equal(got, _host(_build(model, x, target=M4), x))
    assert np.abs(got.astype(np.int32) - _ort(model, x).astype(np.int32)).max() <= 1


def _dense_model(k, n, dtype):
    from onnx import TensorProto
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(k * n)
    elem = TensorProto.INT8 if dtype == np.int8 else TensorProto.UINT8
    inits = [
        nh.from_array(np.array(0.03, np.float32), "as"),
        nh.from_array(np.array(-5 if dtype == np.int8 else 120, dtype), "az"),
        nh.from_array(rng.integers(-127, 128, (k, n)).astype(np.int8), "b"),
        nh.from_array(np.array(0.004, np.float32), "bs"),
        nh.from_array(np.array(0, np.int8), "bz"),
        nh.from_array(np.array(0.3, np.float32), "ys"),
        nh.from_array(np.array(2, dtype), "yz"),
    ]
    node = helper.make_node("QLinearMatMul", ["x", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    graph = helper.make_graph(
        [node],
        "qdense",
        [helper.make_tensor_value_info("x", elem, [1, k])],
        [helper.make_tensor_value_info("y", elem, [1, n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    lo, hi = (-128, 128) if dtype == np.int8 else (0, 256)
    return model, rng.integers(lo, hi, (1, k)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("k, n", [(640, 128), (30, 12), (8, 5), (16, 9)])
def test_mve_dense_equals_dsp_kernels_and_onnxruntime(k, n, dtype):
    model, x = _dense_model(k, n, dtype)
    assert "qnn.dense_mve" in _ops(model, x, M55)
    got = _host(_build(model, x, target=M55), x)
    np.testing.assert_array_equal(got, _host(_build(model, x, target=M4), x))
    assert np.abs(got.astype(np.int32) - _ort(model, x).astype(np.int32)).max() <= 1


def test_strategy_mve_only_where_the_core_has_it_and_every_tile_is_right():
    model, x = _model("rows_3x3_20_channels")
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    tasks = {t.workload.op: t for t in autotune.extract_tasks(mod, params, tessera.Target(M55))}
    task = tasks["qnn.conv2d"]
    m55, m4 = tessera.Target(M55), tessera.Target(M4)
    assert task.default(m55).impl == "mve" and task.default(m4).impl == "dot4"
    assert "mve" not in task.implementations(m4)
    expected = _host(_build(model, x, target=M4), x)
    for ocb, nw in ((1, 1), (3, 4), (4, 6)):  # any tile of the space, the end tiles included
        config = Config("mve", ocb=ocb, nw=nw)
        assert task.valid(config, m55)
        got = _host(_build(model, x, target=M55, configs={task: config}), x)
        np.testing.assert_array_equal(got, expected, err_msg=str(config))
    # the M55 may still take the DSP kernels (a config of the space)
    dsp = _build(model, x, target=M55, configs={task: Config("dot4", ocb=2, nw=3)})
    np.testing.assert_array_equal(_host(dsp, x), expected)


def test_pack_round_trips_and_compensates():
    rng = np.random.default_rng(0)
    for groups, cg, dw, o in ((1, 5, 1, 3), (4, 1, 1, 8), (2, 3, 2, 4)):
        w = rng.integers(-127, 128, (o, cg, 3, 2)).astype(np.int8)
        wm, comp = mve.pack_conv(w, groups, dw)
        assert wm.shape[-1] % 16 == 0 and wm.dtype == np.int8
        np.testing.assert_array_equal(mve.unpack_conv(wm, cg * groups, groups, dw, (3, 2)), w)
        np.testing.assert_array_equal(comp, 128 * w.astype(np.int64).reshape(o, -1).sum(1))
    assert mve.conv_form(1, 7, 1) == "rows" and mve.conv_form(4, 1, 1) == "planes"
    assert mve.conv_form(2, 3, 1) == "taps" and mve.conv_form(1, 8, 2) == "taps"


def test_default_mve_tile_fits_the_even_registers():
    from tessera.topi.micro.strategy import EVEN_REGISTERS, default_mve_tile

    for oc, ow, depthwise in ((64, 5, False), (8, 48, True), (16, 32, False), (3, 1, False)):
        tile = default_mve_tile(oc, ow, depthwise)
        assert tile["ocb"] * tile["nw"] <= EVEN_REGISTERS - 1
        assert tile["ocb"] == 1 or not depthwise


def _kernel_source(lib) -> str:
    (source,) = [s for s in lib.kernel_sources.values() if "tessera_dot16_s8" in s]
    return source


def test_mve_source_accumulates_in_vmladava():
    model, x = _model("rows_40_channels")
    source = _kernel_source(_build(model, x, target=M55))
    assert "vmladavaq_s8(" in source and "vctp8q(" in source and "<arm_mve.h>" in source
    assert "#if defined(__ARM_FEATURE_MVE)" in source
    assert "tessera_dot16_s8(0," not in source  # the accumulator goes into the dot itself


@pytest.mark.skipif(shutil.which("arm-none-eabi-gcc") is None, reason="no arm-none-eabi-gcc")
def test_mve_source_compiles_to_vmladava_on_m55_only(tmp_path):
    from tessera.micro import toolchain

    model, x = _model("bytes_depthwise")
    path = tmp_path / "kernel.c"
    path.write_text(_kernel_source(_build(model, x, target=M55)))
    for mcpu, expect in (("cortex-m55", True), ("cortex-m4", False)):
        cmd = [toolchain.GCC, *toolchain.cpu_flags(mcpu), *toolchain.OPT_FLAGS,
               *toolchain.WARNING_FLAGS, "-S", "-o", "-", str(path)]  # fmt: skip
        asm = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        assert ("vmladava.s8" in asm) == expect, mcpu


@needs_qemu
def test_mve_kernels_on_the_m55_board_equal_the_host_build():
    from tessera.micro import Session

    for case in ("rows_40_channels", "bytes_depthwise_stride2", "bytes_one_channel_10x4"):
        model, x = _model(case)
        lib = _build(model, x, target=M55)
        with Session(lib, board="mps3-an547") as s:
            s.set_input("x", x)
            counts = s.run()
            y = s.get_output(0)
        assert min(counts) > 0
        np.testing.assert_array_equal(y, _host(lib, x), err_msg=case)
        assert np.abs(y.astype(np.int32) - _ort(model, x).astype(np.int32)).max() <= 1, case
    dense = _dense_model(30, 12, np.int8)
    pools = [qdq_pool(*POOLS[c][:2], **POOLS[c][2]) for c in ("avg_25x5_ds_cnn",
                                                                 "avg_3x3_s2_pads_counted")]
    for model, x in [dense, *pools]:
        lib = _build(model, x, target=M55)
        with Session(lib, board="mps3-an547") as s:
            s.set_input("x", x)
            s.run()
            np.testing.assert_array_equal(s.get_output(0), _host(lib, x))


# pools (Note [MVE pool]): a global window as one run, windows of KW bytes per row, pads
POOL_CASES = {
    **{k: v for k, v in POOLS.items() if v[0] != "MaxPool"},
    "avg_2x20_long_rows": ("AveragePool", (1, 2, 20, 40),
                           {"kernel_shape": [2, 20], "strides": [2, 3]}),
}  # fmt: skip


@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
@pytest.mark.parametrize("case", sorted(POOL_CASES))
def test_mve_pools_equal_the_m4_kernels_and_onnxruntime(case, dtype):
    op, shape, attrs = POOL_CASES[case]
    model, x = qdq_pool(op, shape, dtype=dtype, **attrs)
    lib = _build(model, x, target=M55)
    # avg_pads_not_counted: float32 (its windows count differently); global_avg: the frontend's
    # cast and sum over the plane, not qnn.sum_pool2d
    if case not in ("avg_pads_not_counted", "global_avg"):
        assert any("sum_pool_mve" in s for s in lib.kernel_sources.values()), case
    got = _host(lib, x)
    np.testing.assert_array_equal(got, _host(_build(model, x, target=M4), x))
    assert np.abs(got.astype(np.int32) - _ort(model, x).astype(np.int32)).max() <= 1


@pytest.mark.parametrize("k", [3, 16, 40])
def test_dot16_s8_intrinsic_in_c(k):
    # acc + the products of up to 16 int8 pairs from two addresses; a tail of k % 16 bytes
    from tessera import te
    from tessera.tir import op

    rng = np.random.default_rng(k)
    a8 = rng.integers(-128, 128, (3, k), dtype=np.int8)
    b8 = rng.integers(-128, 128, (5, -(-k // 16) * 16), dtype=np.int8)
    a8[0], b8[0] = -128, -128  # the largest products
    a = te.placeholder((3, k), "int8", name="a")
    b = te.placeholder(b8.shape, "int8", name="b")
    r = te.reduce_axis((0, b8.shape[1] // 16), name="r")

    def body(i, j):
        n = op.min(16, k - r * 16)
        return te.sum(op.dot16_s8(0, a[i, r * 16], a[i, r * 16 + n - 1], b[j, r * 16], n), axis=r)

    c = te.compute((3, 5), body, name="c")
    f = tessera.build(te.create_schedule(c.op), [a, b, c], target="c")
    out = np.zeros((3, 5), np.int32)
    f(a8, b8, out)
    expected = a8.astype(np.int64) @ b8[:, :k].astype(np.int64).T
    np.testing.assert_array_equal(out, expected.astype(np.int32))


def test_mve_ops_reference_equals_the_qnn_ops():
    # the graph-level references of qnn.conv2d_mve / qnn.dense_mve (numpy) against qnn.conv2d's
    # and qnn.dense's, on weights packed by the strategy's layout functions
    from tessera.graph.op import get_op
    from tessera.topi import qnn as topi_qnn
    from tessera.topi.micro import ops  # noqa: F401  (registers the MVE ops)

    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 6, 7, 5)).astype(np.int8)
    attrs = dict(strides=[2, 1], padding=[1, 0, 1, 2], dilation=[1, 2], groups=2, pad_value=131)
    w = rng.integers(-127, 128, (4, 3, 3, 2)).astype(np.int8)
    wm, comp = mve.pack_conv(w, 2, 2)
    want = get_op("qnn.conv2d").evaluate([x, topi_qnn.pack_conv_weight(w)], attrs)[0]
    got = get_op("qnn.conv2d_mve").evaluate([x, wm, comp], {**attrs, "kernel": [3, 2]})[0]
    np.testing.assert_array_equal(got, want)
    xd = rng.integers(0, 256, (3, 21)).astype(np.uint8)
    wd = rng.integers(-127, 128, (5, 21)).astype(np.int8)
    wm, comp = mve.pack_dense(wd)
    want = get_op("qnn.dense").evaluate([xd, topi_qnn.pack_dense_weight(wd)], {"units": 5})[0]
    got = get_op("qnn.dense_mve").evaluate([xd, wm, comp], {"units": 5})[0]
    np.testing.assert_array_equal(got, want)
