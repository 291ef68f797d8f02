"""Graph passes over symbolic dims: type rules with shape expressions, layout passes that ask
the strategy at representative sizes and rewrite only what lowers, the dims' helpers."""

from __future__ import annotations

import importlib

import pytest

import tessera
from tessera import tir
from tessera.frontend import from_onnx
from tessera.graph import dims
from tessera.graph.ir import TensorType
from tessera.models_dynamic import detector, mlp
from tessera.transform import PassContext


def test_dim_expressions_simplify_to_one_form():
    b, s = dims.dim_var("b", 1, 16), dims.dim_var("s", 1, 512)
    assert dims.same_dim(b * s, s * b)
    assert dims.same_dim(dims.simplify_dim(b * s * 64 // (s * 4)), b * 16)
    assert dims.simplify_dim(b - b + 3) == 3
    assert TensorType((b * 2 // 2, 3), "f32").shape[0] is b
    assert dims.dim_to_json(b * 64 + 1) == ["+", ["*", "b", 64], 1]
    assert dims.lower_bound(s - 2) == -1
    assert dims.representative(b * s) == 16 * 512


def test_dim_bounds_are_checked():
    with pytest.raises(ValueError, match="not 0 <= min <= max"):
        dims.dim_var("n", 4, 2)
    with pytest.raises(ValueError, match="identifier"):
        dims.dim_var("n m")


def _ops(func):
    return [c.op.name for c in func.body]


def test_layout_passes_keep_a_symbolic_call_whose_kernel_cannot_take_it(monkeypatch):
    """A conv whose blocked form does not lower with the symbolic batch stays in NCHW and the
    layout transforms emitted for it are taken back; a dense keeps its weight unpacked."""
    al = importlib.import_module("tessera.transform.alter_layout")
    pw = importlib.import_module("tessera.transform.pack_weights")
    monkeypatch.setattr(al, "lowers_symbolic", lambda call, target: False)
    monkeypatch.setattr(pw, "lowers_symbolic", lambda call, target: False)
    for model in (detector(), mlp()):
        mod, params = from_onnx(model)
        with PassContext(opt_level=3):
            from tessera.driver import fused_function

            func = fused_function(mod, tessera.Target("llvm"), params)
        members = [m.op.name for c in func.body for m in c.attrs["func"].body]
        assert "layout_transform" not in members
        assert not any("nchwc" in n or "packed" in n for n in members)


def test_layout_passes_rewrite_a_symbolic_call_whose_kernel_lowers(monkeypatch):
    pw = importlib.import_module("tessera.transform.pack_weights")
    monkeypatch.setattr(pw, "lowers_symbolic", lambda call, target: True)
    mod, params = from_onnx(mlp())
    with PassContext(opt_level=3), tessera.Target("llvm"):
        from tessera.transform.bind_params import bind_params

        func = pw.pack_weights(bind_params(mod, params))["main"]
    assert "nn.dense_packed" in _ops(func)
    packed = next(c for c in func.body if c.op.name == "nn.dense_packed")
    assert not packed.outputs[0].type.is_static  # the rows stay symbolic


def test_lowers_symbolic_answers_for_an_elementwise_call():
    mod, _ = from_onnx(mlp())
    relu = next(c for c in mod["main"].body if c.op.name == "nn.relu")
    assert dims.lowers_symbolic(relu, tessera.Target("llvm"))
    assert isinstance(relu.outputs[0].type.shape[0], tir.Var)


def test_an_op_that_cannot_take_a_symbolic_dim_is_named_with_the_dim():
    from onnx import TensorProto, helper

    def model(node, x_shape):
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    size = helper.make_node("Size", ["x"], ["y"], name="size_1")
    with pytest.raises(ValueError, match=r"'size_1' \(Size.*symbolic dim\(s\) n.*shape_dict"):
        from_onnx(model(size, ["n", 4]))
    from_onnx(model(size, ["n", 4]), {"x": (3, 4)})  # sized: it converts


def test_lowering_gives_the_kernel_rules_the_bounds_of_symbolic_dims(monkeypatch):
    """Note [size hints]: a group over bounded symbolic dims is lowered inside
    topi.symbolic.sizes({name: (min, max)}) where the kernels' side provides it."""
    import contextlib
    import sys
    import types

    seen = []
    fake = types.ModuleType("tessera.topi.symbolic")
    fake.sizes = lambda values: seen.append(dict(values)) or contextlib.nullcontext()
    monkeypatch.setitem(sys.modules, "tessera.topi.symbolic", fake)
    import tessera.topi

    monkeypatch.setattr(tessera.topi, "symbolic", fake, raising=False)
    from tessera.graph_build.lower_group import distinct_groups, lower_group

    mod, params = from_onnx(mlp(), {"x": (("batch", 1, 32), 64)})
    with PassContext(opt_level=3, config={"codegen.cache": False}):
        from tessera.driver import fused_function

        func = fused_function(mod, tessera.Target("llvm"), params)
        for group in distinct_groups(func)[0]:
            lower_group(group, tessera.Target("llvm"))
    assert seen and all(s == {"batch": (1, 32)} for s in seen)
