import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera.frontend import from_onnx
from tessera.graph import parse, run_function
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import (
    PassContext,
    Sequential,
    bind_params,
    eliminate_common_subexpr,
    eliminate_dead_code,
    fold_constant,
    fuse_ops,
    fused_groups,
    infer_types,
    plan_memory,
    simplify_inference,
)


def test_params_become_constants():
    w = np.arange(8, dtype="float32").reshape(2, 4)
    before = parse("def main(%x: f32[1, 4], %w: f32[2, 4]) { %1 = nn.dense(%x, %w); return %1 }")
    expected = parse(
        "def main(%x: f32[1, 4]) { %w = constant(...) : f32[2, 4]; %1 = nn.dense(%x, %w); "
        "return %1 }",
        constants={"w": w},
    )
    assert_structural_equal(bind_params(before, {"w": w}), expected)
    assert bind_params(before, {}) is before


def test_errors_name_the_parameter():
    func = parse("def main(%x: f32[1, 4], %w: f32[2, 4]) { %1 = nn.dense(%x, %w); return %1 }")
    with pytest.raises(ValueError, match="no parameter 'v'"):
        bind_params(func, {"v": np.zeros(1)})
    with pytest.raises(ValueError, match=r"parameter 'w' is f32\[2, 4\], got an array of float64"):
        bind_params(func, {"w": np.zeros((2, 4))})
    with pytest.raises(TypeError, match="IRModule"):
        bind_params("main", {})


def _conv_bn_model():
    rng = np.random.default_rng(0)
    arrays = {
        "w": rng.standard_normal((8, 3, 3, 3)),
        "b": rng.standard_normal(8),
        "gamma": rng.uniform(0.5, 2, 8),
        "beta": rng.standard_normal(8),
        "mean": rng.standard_normal(8),
        "var": rng.uniform(0.5, 2, 8),
    }
    inits = [onnx.numpy_helper.from_array(a.astype("f4"), n) for n, a in arrays.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization", ["c", "gamma", "beta", "mean", "var"], ["n"], name="bn"
        ),
        helper.make_node("Relu", ["n"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "x8"], ["y"], name="residual"),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_bn",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
            helper.make_tensor_value_info("x8", TensorProto.FLOAT, [1, 8, 6, 6]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def test_onnx_pipeline_folds_batch_norm_and_fuses_one_kernel():
    mod, params = from_onnx(_conv_bn_model())
    pipeline = Sequential(
        [
            bind_params_of(params),
            infer_types,
            simplify_inference,
            fold_constant,
            eliminate_common_subexpr,
            eliminate_dead_code,
            fuse_ops,
        ]
    )
    with PassContext(opt_level=3):
        fused = pipeline(mod)["main"]
    (group,) = fused_groups(fused)
    assert [c.op.name for c in group.body] == ["nn.conv2d", "add", "nn.relu", "add"]
    assert plan_memory(fused).arena_bytes == 0  # one kernel: no intermediates
    rng = np.random.default_rng(1)
    inputs = {
        "x": rng.standard_normal((1, 3, 6, 6)).astype("f4"),
        "x8": rng.standard_normal((1, 8, 6, 6)).astype("f4"),
    }
    (want,) = run_function(mod["main"], inputs, params)
    (got,) = run_function(fused, inputs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def bind_params_of(params):
    def bind(mod):
        return bind_params(mod, params)

    bind.__name__ = "bind_params"
    return bind


def test_onnx_pipeline_keeps_every_source_node_name():
    mod, params = from_onnx(_conv_bn_model())
    assert [c.span for c in mod["main"].body] == [
        ("conv",),
        ("conv",),
        ("bn",),
        ("relu",),
        ("residual",),
    ]
    pipeline = Sequential(
        [bind_params_of(params), simplify_inference, fold_constant, eliminate_common_subexpr]
    )
    with PassContext(opt_level=3):
        simplified = pipeline(mod)["main"]
        fused = fuse_ops(simplified)
    # The conv's weight holds the batch-norm's scale; the bias add, the conv's bias and bn's shift.
    assert [(c.op.name, c.span) for c in simplified.body] == [
        ("nn.conv2d", ("conv", "bn")),
        ("add", ("conv", "bn")),
        ("nn.relu", ("relu",)),
        ("add", ("residual",)),
    ]
    (call,) = fused.body
    assert call.span == ("conv", "bn", "relu", "residual")
