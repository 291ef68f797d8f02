"""pack_qnn_weights: an int8 conv whose strategy picks the "channels" kernel (Note [int8 conv
rule]) gets its weight re-packed in blocks of output channels (qnn.conv2d_packed); the others,
grouped convs and targets without layout strategies keep qnn.conv2d; a built model computes the
same integers either way."""

import numpy as np
import pytest

import tessera
from tessera.graph.builder import GraphBuilder
from tessera.graph.op import get_op
from tessera.runtime import GraphModule, cpu
from tessera.topi import qnn
from tessera.topi.strategy import Task
from tessera.transform import PassContext, infer_types
from tessera.transform.pack_qnn_weights import pack_qnn_weights

RNG = np.random.default_rng(3)
TARGET = tessera.Target("llvm -mcpu=cascadelake")


def _conv_graph(c, h, oc, k, groups=1, stride=1):
    b = GraphBuilder()
    x = b.param("x", (1, c, h, h), "uint8")
    w8 = RNG.integers(-127, 128, (oc, c // groups, k, k)).astype(np.int8)
    attrs = dict(strides=[stride, stride], padding=[k // 2] * 4, dilation=[1, 1], groups=groups,
                 pad_value=2)  # fmt: skip
    y = b.call("qnn.conv2d", x, b.const(qnn.pack_conv_weight(w8)), **attrs)
    return infer_types(b.finish([y])), w8, attrs


def _ops(func):
    return [c.op.name for c in func.body]


@pytest.mark.parametrize(
    "c,h,oc,k,groups,impl",
    [
        (64, 7, 64, 3, 1, "channels"),  # 7-wide rows waste half the lanes
        (256, 7, 48, 1, 1, "channels"),  # 1x1, 64 words per output, oc padded to 64
        (16, 32, 16, 1, 1, "rows"),  # full rows, 4 words: the strided stores would dominate
        (16, 7, 16, 3, 4, "rows"),  # grouped: rows only
    ],
)
def test_the_rule_picks_the_kernel_and_the_pass_follows(c, h, oc, k, groups, impl):
    func, w8, attrs = _conv_graph(c, h, oc, k, groups)
    task = Task.of(func.body[0], TARGET)
    assert task.default(TARGET).impl == impl
    new = pack_qnn_weights(func, TARGET)
    if impl == "rows":
        assert new is func
        return
    assert _ops(new) == ["qnn.conv2d_packed"]
    call = new.body[0]
    wb = call.inputs[1].array
    assert wb.shape == (-(-oc // 16), -(-c // 4), k, k, 16)
    np.testing.assert_array_equal(qnn.unpack_conv_weight_blocked(wb, oc, c), w8)
    assert call.attrs["channels"] == oc and "config" not in call.attrs  # the default config
    x = RNG.integers(0, 256, (1, c, h, h)).astype(np.uint8)
    want = get_op("qnn.conv2d").evaluate([x, qnn.pack_conv_weight(w8)], attrs)[0]
    got = get_op("qnn.conv2d_packed").evaluate([x, wb], dict(call.attrs.items()))[0]
    np.testing.assert_array_equal(got, want)


def test_targets_without_layout_strategies_keep_qnn_conv2d():
    func, _, _ = _conv_graph(64, 7, 64, 3)
    assert pack_qnn_weights(func, tessera.Target("c")) is func


def _run(func, x, disabled=()):
    with PassContext(opt_level=3, disabled_pass=disabled):
        lib = tessera.build(func, target="llvm")
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_built_model_is_the_same_with_either_kernel():
    func, w8, attrs = _conv_graph(24, 7, 40, 3, stride=1)
    x = RNG.integers(0, 256, (1, 24, 7, 7)).astype(np.uint8)
    want = get_op("qnn.conv2d").evaluate([x, qnn.pack_conv_weight(w8)], attrs)[0]
    np.testing.assert_array_equal(_run(func, x), want)
    np.testing.assert_array_equal(_run(func, x, ["pack_qnn_weights"]), want)
