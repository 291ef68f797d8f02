"""pack_weights: constant dense/matmul weights become packed constants of nn.dense_packed, for
llvm targets only; the rewritten graph computes the same numbers."""

import numpy as np
import pytest

import tessera
from tessera.graph.builder import GraphBuilder
from tessera.graph.ir import Constant
from tessera.topi.x86.dense import pack_weight_np, panel_width
from tessera.transform import infer_types
from tessera.transform.pack_weights import pack_weights

RNG = np.random.default_rng(7)
TARGET = tessera.Target("llvm")


def randn(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _graph(build):
    b = GraphBuilder()
    out = build(b)
    return infer_types(b.finish(out if isinstance(out, (list, tuple)) else [out]))


def _ops(func):
    return [c.op.name for c in func.body]


def test_matmul_with_a_constant_weight_is_packed():
    w = randn(20, 70)
    func = _graph(lambda b: b.call("matmul", b.param("x", (3, 5, 20), "float32"), b.const(w)))
    new = pack_weights(func, TARGET)
    assert _ops(new) == ["nn.dense_packed"]
    call = new.body[0]
    nr = panel_width(TARGET, 70)
    packed = call.inputs[1]
    assert isinstance(packed, Constant) and call.attrs["units"] == 70
    np.testing.assert_array_equal(packed.array, pack_weight_np(w, nr, transposed=False))
    assert [c.array.shape for c in new.constants] == [packed.array.shape]  # the old one dropped
    assert new.outputs[0].type == func.outputs[0].type


def test_dense_weight_is_packed_transposed_and_shared_weights_once():
    w = randn(9, 16)  # (units, in)

    def build(b):
        wc = b.const(w)
        return [
            b.call("nn.dense", b.param("x", (4, 16), "float32"), wc),
            b.call("nn.dense", b.param("y", (16,), "float32"), wc),
        ]

    new = pack_weights(_graph(build), TARGET)
    assert _ops(new) == ["nn.dense_packed", "nn.dense_packed"]
    assert new.body[0].inputs[1] is new.body[1].inputs[1]
    nr = panel_width(TARGET, 9)
    np.testing.assert_array_equal(new.body[0].inputs[1].array, pack_weight_np(w, nr, True))


@pytest.mark.parametrize(
    "build",
    [
        lambda b: b.call(
            "matmul", b.param("x", (3, 4), "float32"), b.param("w", (4, 5), "float32")
        ),  # not constant
        lambda b: b.call(
            "matmul", b.param("x", (2, 3, 4), "float32"), b.const(randn(2, 4, 5))
        ),  # 3-D
        lambda b: b.call(
            "matmul", b.param("x", (3, 4), "float64"), b.const(randn(4, 5).astype("float64"))
        ),
        lambda b: b.call("nn.relu", b.param("x", (3, 4), "float32")),
    ],
)
def test_other_calls_are_unchanged(build):
    func = _graph(build)
    assert pack_weights(func, TARGET) is func


def test_needs_an_llvm_target():
    func = _graph(lambda b: b.call("matmul", b.param("x", (3, 4), "float32"), b.const(randn(4, 5))))
    assert pack_weights(func) is func  # no target entered
    assert pack_weights(func, "c") is func
    with TARGET:
        assert _ops(pack_weights(func)) == ["nn.dense_packed"]


def test_packed_graph_computes_the_same_numbers():
    x, w, bias = randn(2, 7, 30), randn(30, 45), randn(45)

    def build(b):
        return b.call(
            "add", b.call("matmul", b.param("x", x.shape, "float32"), b.const(w)), b.const(bias)
        )

    mod = tessera.ir.module.IRModule({"main": _graph(build)})
    with tessera.transform.PassContext(opt_level=3):
        lib = tessera.build(mod, target="llvm")
    assert "dense_packed" in " ".join(c["kernel"] for c in lib.plan["calls"])
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), x @ w + bias, rtol=1e-4, atol=1e-4)
