"""Blocked (NCHW[x]c) convolutions, Winograd and pools over symbolic dims that are dim
expressions: each model compiled once, run at five sizes against ONNX Runtime, and checked to
run the blocked kernels (not the generic NCHW fallback); the kernels alone against their
references at several sizes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
from tessera import te
from tessera.frontend import from_onnx
from tessera.graph.ops import nn_ref
from tessera.ir.module import IRModule
from tessera.runtime import GraphModule
from tessera.topi import layout as topi_layout
from tessera.topi.x86 import pooling, winograd

WIDTHS = (9, 16, 33, 64, 101)


def blocked_kernels_only(m: GraphModule) -> str:
    """The kernels one run of `m` calls (its inputs set), checked to hold the blocked convs
    and pools and no conv on the generic NCHW schedule."""
    kernels = " ".join(c.kernel for c in m.profile(repeat=1))
    assert "nchwc" in kernels and "nn_conv2d_add" not in kernels, kernels
    return kernels


def _conv_node(nodes, inits, rng, name, x, cin, cout, k, **attrs):
    groups = attrs.get("group", 1)
    w = rng.standard_normal((cout, cin // groups, k, k)).astype(np.float32) / np.sqrt(cin * k * k)
    inits.append(helper.make_tensor(f"{name}_w", TensorProto.FLOAT, w.shape, w.ravel()))
    b = rng.standard_normal(cout).astype(np.float32) * 0.1
    inits.append(helper.make_tensor(f"{name}_b", TensorProto.FLOAT, b.shape, b))
    nodes.append(
        helper.make_node(
            "Conv", [x, f"{name}_w", f"{name}_b"], [name], kernel_shape=[k, k], **attrs
        )
    )
    nodes.append(helper.make_node("Relu", [name], [f"{name}_r"]))
    return f"{name}_r"


def _blocks_model():
    """Over a dynamic width: a strided padded 3x3 conv (width -> floordiv(width + 1, 2)), a
    3x3 stride-1 conv (Winograd at these channels), a depthwise 3x3, a grouped 1x1, a padded
    3x3 max pool of stride 2 with ceil_mode, an average pool (count_include_pad 0)."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    x = _conv_node(nodes, inits, rng, "stem", "x", 8, 32, 3, pads=[1] * 4, strides=[2, 2])
    x = _conv_node(nodes, inits, rng, "body", x, 32, 32, 3, pads=[1] * 4)
    x = _conv_node(nodes, inits, rng, "dw", x, 32, 32, 3, pads=[1] * 4, group=32)
    x = _conv_node(nodes, inits, rng, "grouped", x, 32, 32, 1, group=4)
    pool = dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    nodes.append(helper.make_node("MaxPool", [x], ["mp"], ceil_mode=1, **pool))
    nodes.append(helper.make_node("AveragePool", ["mp"], ["y"], **pool))
    graph = helper.make_graph(
        nodes,
        "blocks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, "width"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_blocked_convs_and_pools_over_width_expressions_match_ort(ort_of):
    model = _blocks_model()
    mod, params = from_onnx(model, {"x": (1, 8, 16, ("width", 8, 512))})
    lib = tessera.build(mod, target="llvm", params=params)
    m, ort = GraphModule(lib["default"]()), ort_of(model)
    rng = np.random.default_rng(1)
    for width in WIDTHS:
        ort.check(m, {"x": rng.standard_normal((1, 8, 16, width)).astype(np.float32)})
    kernels = blocked_kernels_only(m)
    for kernel in ("winograd_nchwc", "max_pool2d_nchwc", "avg_pool2d_nchwc"):
        assert kernel in kernels


def _run(f, *arrays):
    f(*arrays)
    return arrays[-1]


@pytest.mark.parametrize("axis", ["batch", "width"])
def test_winograd_kernel_over_a_symbolic_dim(axis):
    """F(4x4, 3x3) built once with the batch or the width symbolic (the products' rows a
    symbolic count of tiles, rounded to the micro-kernel's rows): every size matches the
    direct convolution."""
    target = tessera.Target("llvm")
    v = te.var("v")
    shape = (v, 2, 6, 10, 8) if axis == "batch" else (1, 2, 6, v, 8)
    x = te.placeholder(shape, name="x")
    w = np.random.default_rng(0).standard_normal((16, 16, 3, 3)).astype(np.float32)
    u_np = winograd.transform_weight_np(w, 4, 16)
    u = te.placeholder(u_np.shape, name="u")
    y = winograd.conv2d_winograd_nchwc(x, u, (1, 1, 1, 1), 4, 16, 8, rows=6)
    with target:
        s = winograd.schedule_conv2d_winograd_nchwc([y], target)
    f = tessera.build(IRModule({"wino": te.lower(s, [x, u, y], name="wino")}), target=target)
    for size in (1, 2, 3, 7, 13):
        n, width = (size, 10) if axis == "batch" else (1, size)
        data = np.random.default_rng(size).standard_normal((n, 16, 6, width)).astype(np.float32)
        xb = topi_layout.transform_array(data, "NCHW", "NCHW8c")
        out = np.empty((n, 2, 6, width, 8), np.float32)
        got = topi_layout.transform_array(_run(f["wino"], xb, u_np, out), "NCHW8c", "NCHW")
        want = nn_ref.conv(data, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["max", pytest.param("avg", marks=pytest.mark.slow)])
def test_blocked_pool_kernel_over_a_symbolic_width(kind):
    """A padded 3x3 stride-2 ceil-mode pool built once over a symbolic width, down to width 1
    (the windows' bounds tests over a symbolic width take the simplifier seconds to compile:
    the average pool, the same code path, runs with the slow tests)."""
    target = tessera.Target("llvm")
    v = te.var("w")
    x = te.placeholder((1, 2, 7, v, 8), name="x")
    attrs = dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=1)
    y = pooling.pool_nchwc(x, kind, count_include_pad=0, **attrs)
    with target:
        s = pooling.schedule_pool_nchwc([y], target)
    f = tessera.build(IRModule({"pool": te.lower(s, [x, y], name="pool")}), target=target)
    ref = nn_ref.max_pool if kind == "max" else nn_ref.avg_pool
    for width in (1, 2, 5, 16, 31):
        data = np.random.default_rng(width).standard_normal((1, 16, 7, width)).astype(np.float32)
        want = ref(data, dilation=(1, 1), **attrs)
        out = np.empty((1, 2, *want.shape[2:], 8), np.float32)
        _run(f["pool"], topi_layout.transform_array(data, "NCHW", "NCHW8c"), out)
        got = topi_layout.transform_array(out, "NCHW8c", "NCHW")
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_blocked_conv_too_small_for_its_symbolic_width_is_a_clear_error():
    from tessera.graph.dims import dim_var
    from tessera.graph.ir import TensorType
    from tessera.graph.op import get_op

    w = dim_var("width", 1, 64)
    x = TensorType((1, 2, 8, w, 8), "float32")
    weight = TensorType((2, 2, 3, 3, 8, 8), "float32")
    attrs = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1))
    with pytest.raises(TypeError, match=r"larger than the padded input.*width >= 1"):
        get_op("nn.conv2d_nchwc").infer_type([x, weight], attrs)
