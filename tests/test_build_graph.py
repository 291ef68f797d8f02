"""tessera.build of graph modules: ONNX models compiled on llvm and c against ONNX Runtime, fusion
into kernels, shared kernels, export/load round trips, and the errors users meet."""
# ruff: noqa: E501

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort
from tessera.graph import parse, register_op
from tessera.graph_build import LoweringError, MissingComputeError
from tessera.models import light_model, light_model_names, random_inputs
from tessera.runtime import GraphModule, cpu, load_module, nd
from tessera.transform import PassContext, PassTiming

REPO = Path(__file__).resolve().parents[1]
R = np.random.default_rng(7)
N = helper.make_node
TARGETS = ["llvm", "c"]


def f32(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def compile_model(model, target, opt_level=3, shape_dict=None):
    mod, params = from_onnx(model, shape_dict)
    with PassContext(opt_level=opt_level):
        return tessera.build(mod, target=target, params=params)


def run_lib(lib, feeds):
    m = GraphModule(lib["default"](cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def check_against_ort(model, feeds, target, rtol=1e-3, atol=1e-5, opt_level=3):
    expected = run_ort(model, feeds)
    lib = compile_model(model, target, opt_level)
    got = run_lib(lib, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return lib


# -- models ------------------------------------------------------------------------------------


def conv_bias_relu():
    inits = {"w": f32(8, 3, 3, 3, scale=0.3), "b": f32(8)}
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["y"])]
    return make_model(nodes, {"x": ((1, 3, 10, 10), "float32")}, ["y"], inits), {
        "x": f32(1, 3, 10, 10)
    }


def small_cnn():
    inits = {
        "w1": f32(8, 3, 3, 3, scale=0.3), "b1": f32(8), "w2": f32(16, 8, 3, 3, scale=0.2),
        "b2": f32(16), "wd": f32(10, 16 * 3 * 3, scale=0.1), "bd": f32(10),
    }  # fmt: skip
    nodes = [
        N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"]),
        N("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        N("Conv", ["p1", "w2", "b2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
        N("Relu", ["c2"], ["r2"]),
        N("AveragePool", ["r2"], ["p2"], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
          count_include_pad=0),
        N("Flatten", ["p2"], ["f"]), N("Gemm", ["f", "wd", "bd"], ["g"], transB=1),
        N("Softmax", ["g"], ["y"], axis=-1),
    ]  # fmt: skip
    return make_model(nodes, {"x": ((2, 3, 12, 12), "float32")}, ["y"], inits), {
        "x": f32(2, 3, 12, 12)
    }


def residual_block():
    c = 8
    bn = lambda p: {  # noqa: E731
        f"{p}_s": f32(c) * 0.2 + 1, f"{p}_b": f32(c) * 0.1, f"{p}_m": f32(c) * 0.1,
        f"{p}_v": np.abs(f32(c)) + 0.5,
    }  # fmt: skip
    inits = {
        "w1": f32(c, c, 3, 3, scale=0.15),
        "w2": f32(c, c, 3, 3, scale=0.15),
        **bn("bn1"),
        **bn("bn2"),
    }
    nodes = [
        N("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c1", "bn1_s", "bn1_b", "bn1_m", "bn1_v"], ["n1"]),
        N("Relu", ["n1"], ["r1"]),
        N("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        N("BatchNormalization", ["c2", "bn2_s", "bn2_b", "bn2_m", "bn2_v"], ["n2"]),
        N("Add", ["n2", "x"], ["s"]), N("Relu", ["s"], ["y"]),
    ]  # fmt: skip
    return make_model(nodes, {"x": ((1, c, 8, 8), "float32")}, ["y"], inits), {"x": f32(1, c, 8, 8)}


def _i64(*values):
    return np.array(values, np.int64)


def transformer_block(batch=2, seq=5, d=8, heads=2, vocab=11):
    """Embeddings (token Gather + position embedding Expanded over the batch), LayerNorm, attention
    (MatMul with batch dims, Softmax with a Where mask), Erf-GELU MLP, Split, Transpose, Reshape."""
    hd = d // heads
    inits = {
        "emb": f32(vocab, d, scale=0.5), "pos": f32(seq, d, scale=0.5), "wqkv": f32(d, 3 * d, scale=0.3),
        "wo": f32(d, d, scale=0.3), "w1": f32(d, 4 * d, scale=0.3), "w2": f32(4 * d, d, scale=0.3),
        "ln_s": f32(d) * 0.1 + 1, "ln_b": f32(d) * 0.1, "half": np.array(0.5, np.float32),
        "one": np.array(1.0, np.float32), "sqrt2": np.array(np.sqrt(2), np.float32),
        "scale": np.array(1 / np.sqrt(hd), np.float32), "neg": np.array(-1e9, np.float32),
        "bsd": _i64(batch, seq, d), "heads_shape": _i64(batch, seq, 3, heads, hd),
        "merged": _i64(0, 0, d), "split3": _i64(1, 1, 1), "sq_axes": _i64(2),
    }  # fmt: skip
    nodes = [
        N("Gather", ["emb", "ids"], ["tok"], axis=0),
        N("Gather", ["pos", "pos_ids"], ["pos_e"], axis=0),
        N("Expand", ["pos_e", "bsd"], ["pos_b"]),
        N("Add", ["tok", "pos_b"], ["h0"]),
        N("LayerNormalization", ["h0", "ln_s", "ln_b"], ["h1"], axis=-1, epsilon=1e-5),
        N("MatMul", ["h1", "wqkv"], ["qkv"]),
        N("Reshape", ["qkv", "heads_shape"], ["qkv5"]),
        N("Split", ["qkv5", "split3"], ["q5", "k5", "v5"], axis=2),
        N("Squeeze", ["q5", "sq_axes"], ["q4"]), N("Squeeze", ["k5", "sq_axes"], ["k4"]),
        N("Squeeze", ["v5", "sq_axes"], ["v4"]),
        N("Transpose", ["q4"], ["q"], perm=[0, 2, 1, 3]),
        N("Transpose", ["k4"], ["kt"], perm=[0, 2, 3, 1]),
        N("Transpose", ["v4"], ["v"], perm=[0, 2, 1, 3]),
        N("MatMul", ["q", "kt"], ["s0"]), N("Mul", ["s0", "scale"], ["s1"]),
        N("Where", ["mask", "s1", "neg"], ["s2"]),
        N("Softmax", ["s2"], ["p"], axis=-1),
        N("MatMul", ["p", "v"], ["o4"]),
        N("Transpose", ["o4"], ["o3"], perm=[0, 2, 1, 3]),
        N("Reshape", ["o3", "merged"], ["o"]),
        N("MatMul", ["o", "wo"], ["attn"]), N("Add", ["h0", "attn"], ["h2"]),
        N("MatMul", ["h2", "w1"], ["m0"]),
        N("Div", ["m0", "sqrt2"], ["g0"]), N("Erf", ["g0"], ["g1"]), N("Add", ["g1", "one"], ["g2"]),
        N("Mul", ["m0", "g2"], ["g3"]), N("Mul", ["g3", "half"], ["g4"]),
        N("MatMul", ["g4", "w2"], ["m1"]), N("Add", ["h2", "m1"], ["out"]),
    ]  # fmt: skip
    feeds = {
        "ids": R.integers(0, vocab, (batch, seq)).astype(np.int64),
        "pos_ids": np.arange(seq, dtype=np.int64)[::-1].copy(),
        # a causal mask per batch element, broadcast over the heads: [batch, 1, seq, seq]
        "mask": np.broadcast_to(np.tril(np.ones((seq, seq), bool)), (batch, 1, seq, seq)).copy(),
    }
    return make_model(nodes, feeds, ["out", "p"], inits), feeds


MODELS = {
    "conv_bias_relu": conv_bias_relu,
    "small_cnn": small_cnn,
    "residual_block": residual_block,
    "transformer_block": transformer_block,
}


# -- numerics against ONNX Runtime ---------------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", list(MODELS))
def test_model_matches_onnxruntime(name, target):
    model, feeds = MODELS[name]()
    check_against_ort(model, feeds, target)


def test_transformer_block_compiles_every_op_it_uses():
    model, feeds = transformer_block()
    lib = check_against_ort(model, feeds, "llvm")
    kernels = " ".join(c["kernel"] for c in lib.plan["calls"])
    for op in ["gather", "expand", "layer_norm", "matmul", "split", "transpose", "reshape",
               "where", "softmax", "erf"]:  # fmt: skip
        assert op in kernels, (op, kernels)


RESIDUAL_CALLS = {
    0: ["conv2d", "batch_norm", "relu", "conv2d", "batch_norm", "add", "relu"],
    1: ["conv2d", "add", "relu", "conv2d", "add", "add_2", "relu"],  # batch-norms folded
    # fused, convs in NCHW[x]c (alter_layout, llvm): layout transforms at the edges only
    2: [
        "layout_transform",
        "conv2d_nchwc_add_nn_relu",
        "conv2d_nchwc_add_add_nn_relu",
        "layout_transform_1",
    ],
}


@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_every_opt_level_gives_the_same_numbers(opt_level):
    model, feeds = residual_block()
    lib = check_against_ort(model, feeds, "llvm", opt_level=opt_level)
    kernels = [c["kernel"].removeprefix("fused_").removeprefix("nn_") for c in lib.plan["calls"]]
    assert kernels == RESIDUAL_CALLS[opt_level]
    assert lib.num_kernels == len(set(kernels))  # the two convs (and relus) share kernels


def test_conv_bias_relu_is_one_kernel():
    model, feeds = conv_bias_relu()
    lib = check_against_ort(model, feeds, "llvm")
    # the conv in NCHW[x]c (alter_layout), reading the 3-channel input as it is (block 1), with
    # a layout transform at the graph's output
    assert [c["kernel"] for c in lib.plan["calls"]] == [
        "fused_nn_conv2d_nchwc_add_nn_relu",
        "fused_layout_transform",
    ]
    lib = check_against_ort(model, feeds, "c")  # the c target keeps NCHW
    assert lib.num_kernels == 1
    # nothing intermediate but the generic conv's zero-padded input (3 x 12 x 12 floats): a
    # workspace of the kernel (lift_workspaces), its last argument, in the arena
    assert lib.plan["arena_nbytes"] == 3 * 12 * 12 * 4
    assert lib.plan["calls"][0]["args"][-1] == ["arena", 0]
    assert [c["kernel"] for c in lib.plan["calls"]] == ["fused_nn_conv2d_add_nn_relu"]


def test_3x3_convs_take_winograd_with_their_workspaces_in_the_arena():
    # 16 -> 32 -> 16 channels on 28x28: the rule picks F(4x4, 3x3) for both (topi/x86/winograd.py);
    # each kernel's transformed input and products are workspaces: arena slots past the planned
    # values, the same region for both calls (a workspace lives for one call)
    inits = {"w1": f32(32, 16, 3, 3, scale=0.2), "b1": f32(32), "w2": f32(16, 32, 3, 3, scale=0.2)}
    nodes = [
        N("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"]),
        N("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1]),
    ]  # fmt: skip
    model = make_model(nodes, {"x": ((1, 16, 28, 28), "float32")}, ["y"], inits)
    feeds = {"x": f32(1, 16, 28, 28)}
    # outputs span ~10: winograd's error is ~1e-6 of that, absolute (atol), not relative to
    # each element (a near-zero element has no 1e-3 relative accuracy to give)
    lib = check_against_ort(model, feeds, "llvm", atol=1e-4)
    calls = [c for c in lib.plan["calls"] if "winograd" in c["kernel"]]
    assert [c["kernel"] for c in calls] == [
        "fused_nn_conv2d_winograd_nchwc_add_nn_relu",
        "fused_nn_conv2d_winograd_nchwc",
    ]
    first, second = calls[0]["args"][4:], calls[1]["args"][3:]  # after data, weights, (bias), out
    assert len(first) == len(second) == 2
    assert all(kind == "arena" for kind, _ in first + second)
    assert first[0] == second[0]  # one shared workspace region
    assert first[1][1] - first[0][1] >= 36 * 49 * 16 * 4  # V: 36 x (>= 49 tiles) x 16 channels
    assert lib.plan["arena_nbytes"] >= first[1][1] + 36 * 49 * 32 * 4  # then M, in the arena
    mod, params = from_onnx(model)
    with PassContext(opt_level=3, config={"alter_layout.winograd": False}):
        direct = tessera.build(mod, target="llvm", params=params)
    kernels = " ".join(c["kernel"] for c in direct.plan["calls"])
    assert "winograd" not in kernels and "conv2d_nchwc" in kernels
    want, got = run_lib(direct, feeds)[0], run_lib(lib, feeds)[0]
    assert np.abs(got - want).max() <= 2e-5 * np.abs(want).max()  # F(4x4): ~1e-5 of the range


def test_identical_groups_share_a_kernel():
    # relu(x @ w1) then relu(that @ w2) with equal shapes: two calls of one kernel
    inits = {"w1": f32(16, 16), "w2": f32(16, 16)}
    nodes = [N("MatMul", ["x", "w1"], ["a"]), N("Relu", ["a"], ["b"]),
             N("MatMul", ["b", "w2"], ["c"]), N("Relu", ["c"], ["y"])]  # fmt: skip
    model = make_model(nodes, {"x": ((4, 16), "float32")}, ["y"], inits)
    lib = check_against_ort(model, {"x": f32(4, 16)}, "llvm")
    assert len(lib.plan["calls"]) == 2 and lib.num_kernels == 1
    assert len(lib.plan["params"]) == 2  # each weight stored once, passed to the same kernel


def test_outputs_that_are_inputs_weights_or_repeated():
    func = parse(
        "def main(%x: f32[4], %w: f32[4]) { %1 = exp(%x) : f32[4]; return %1, %x, %w, %1 }"
    )
    w = f32(4)
    lib = tessera.build(func, target="llvm", params={"w": w})
    x = f32(4)
    y, x_again, w_again, y_again = run_lib(lib, {"x": x})
    np.testing.assert_allclose(y, np.exp(x), rtol=1e-6)
    np.testing.assert_array_equal(x_again, x)
    np.testing.assert_array_equal(w_again, w)
    np.testing.assert_array_equal(y_again, y)


def test_scalar_constants_are_compiled_into_the_kernel():
    func = parse(
        "def main(%x: f32[2, 3]) { %c = constant(2.5) : f32[]; %1 = multiply(%x, %c) : f32[2, 3];"
        " %2 = add(%1, %c) : f32[2, 3]; return %2 }"
    )
    lib = tessera.build(func, target="llvm")
    assert lib.plan["params"] == []  # the scalar is a te constant, not a weight
    x = f32(2, 3)
    (y,) = run_lib(lib, {"x": x})
    np.testing.assert_allclose(y, x * 2.5 + 2.5, rtol=1e-6)


def test_graph_passes_run_under_the_pass_context():
    model, _ = residual_block()
    mod, params = from_onnx(model)
    timing = PassTiming()
    # without the compile cache, whose hits skip the tir passes of kernels compiled before
    with PassContext(opt_level=3, instruments=[timing], config={"codegen.cache": False}):
        tessera.build(mod, target="llvm", params=params)
    names = set(timing.times)
    assert {"infer_types", "simplify_inference", "fold_constant", "fuse_ops"} <= names
    assert {"eliminate_common_subexpr", "eliminate_dead_code", "flatten_storage"} <= names
    timing = PassTiming()
    with PassContext(opt_level=3, instruments=[timing], disabled_pass=["fuse_ops"]):
        lib = tessera.build(mod, target="llvm", params=params)
    assert "fuse_ops" not in timing.times
    # batch-norms folded into conv + add, nothing fused; two layout transforms (alter_layout)
    assert len(lib.plan["calls"]) == 9


# -- export and load ----------------------------------------------------------------------------

CHILD = """
import sys
import numpy as np
import tessera.runtime as rt

lib = rt.load_module(sys.argv[1])
m = rt.GraphModule(lib["default"](rt.cpu(0)))
x = np.load(sys.argv[2])
m.set_input("x", x)
m.run()
np.save(sys.argv[3], m.get_output(0).numpy())
compiler = ("tessera.te", "tessera.tir", "tessera.codegen", "tessera.ir", "tessera.graph",
            "tessera.transform", "tessera.topi", "tessera.driver", "tessera.frontend", "llvmlite",
            "onnx")
loaded = sorted(m for m in compiler if m in sys.modules)
assert not loaded, loaded
print("child ok")
"""


@pytest.mark.parametrize("target", TARGETS)
def test_export_and_load_in_a_process_without_the_compiler(target, tmp_path):
    model, feeds = small_cnn()
    lib = compile_model(model, target)
    conv = "conv2d_nchwc" if target == "llvm" else "conv2d"  # alter_layout: llvm targets only
    assert f"fused_nn_{conv}_add_nn_relu" in lib.get_source("ll" if target == "llvm" else "c")
    (expected,) = run_lib(lib, feeds)
    path = lib.export_library(tmp_path / f"model_{target}.so")
    np.save(tmp_path / "x.npy", feeds["x"])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [str(path), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)
    loaded = load_module(path)  # here too, with zero-copy weights from the library
    weights = loaded.get_params()
    assert set(weights) == set(lib.get_params())
    assert all(not w.flags.writeable for w in weights.values())
    (again,) = run_lib(loaded, feeds)
    np.testing.assert_array_equal(again, expected)


def test_big_weights_export_fast(tmp_path):
    """Weights are assembled with .incbin, not a C literal: a 32 MiB export loads and runs."""
    w = f32(2048, 4096)  # 32 MiB
    func = parse(
        "def main(%x: f32[1, 2048], %w: f32[2048, 4096]) { %1 = matmul(%x, %w) : f32[1, 4096]; return %1 }"
    )
    lib = tessera.build(func, target="llvm", params={"w": w})
    path = lib.export_library(tmp_path / "big.so")  # its time: bench/overheads.py
    assert path.stat().st_size > w.nbytes
    x = f32(1, 2048)
    (y,) = run_lib(load_module(path), {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-3, atol=1e-3)


# -- errors -------------------------------------------------------------------------------------

_no_compute = register_op("test.no_compute_for_build")
_no_compute.type_rule(lambda x: x)
_wrong_dtype = register_op("test.wrong_compute_dtype")
_wrong_dtype.type_rule(lambda x: x)


@_wrong_dtype.compute
def _(x):
    from tessera import te

    return te.compute(x.shape, lambda *i: x(*i).astype("float64"), name="wrong", tag="elemwise")


def test_ops_without_compute_rules_are_listed_at_once():
    func = parse(
        "def main(%x: f32[4]) { %1 = test.no_compute_for_build(%x) : f32[4]; %2 = exp(%1) : f32[4];"
        " %3 = test.no_compute_for_build(%2) : f32[4]; return %3 }"
    )
    with pytest.raises(MissingComputeError, match="test.no_compute_for_build: %1; %3") as err:
        tessera.build(func, target="llvm")
    assert "1 op(s) in 2 call(s)" in str(err.value)


def test_missing_compute_error_names_onnx_nodes():
    func = parse("def main(%x: f32[4]) { %1 = test.no_compute_for_build(%x) : f32[4]; return %1 }")
    call = func.body[0]
    func = type(func)(
        func.name,
        func.params,
        (type(call)(call.op, call.inputs, call.attrs, call.outputs, span=("node_7",)),),
        func.outputs,
    )
    with pytest.raises(MissingComputeError, match="no_compute_for_build: node_7"):
        tessera.build(func, target="llvm")


def test_a_compute_rule_disagreeing_with_the_type_rule_is_caught():
    func = parse("def main(%x: f32[4]) { %1 = test.wrong_compute_dtype(%x) : f32[4]; return %1 }")
    with pytest.raises(LoweringError, match=r"gives f64\[4\] for %1, whose graph type is f32\[4\]"):
        tessera.build(func, target="llvm")


def test_input_errors_at_run_time():
    model, feeds = conv_bias_relu()
    lib = compile_model(model, "llvm")
    m = GraphModule(lib["default"](cpu(0)))
    assert m.get_input_info() == ({"x": (1, 3, 10, 10)}, {"x": "float32"})
    with pytest.raises(ValueError, match="run: input 'x' not set"):
        m.run()
    with pytest.raises(
        ValueError,
        match=r"input 'x': expected float32 of shape \(1, 3, 10, 10\), got float32 of shape \(1, 3, 10, 11\)",
    ):
        m.set_input("x", np.zeros((1, 3, 10, 11), np.float32))
    with pytest.raises(ValueError, match=r"input 'x': expected float32 .* got float64"):
        m.set_input("x", np.zeros((1, 3, 10, 10)))
    with pytest.raises(ValueError, match="no input 'data'"):
        m.set_input("data", feeds["x"])
    m.set_input(0, nd.array(feeds["x"]))
    m.run()


def test_build_errors():
    func = parse("def main(%x: f32[4], %w: f32[4]) { %1 = add(%x, %w) : f32[4]; return %1 }")
    with pytest.raises(ValueError, match="no parameter 'v'"):
        tessera.build(func, target="llvm", params={"v": np.zeros(4, np.float32)})
    with pytest.raises(
        ValueError, match="parameter 'w' is f32\\[4\\], got an array of float32\\[5\\]"
    ):
        tessera.build(func, target="llvm", params={"w": np.zeros(5, np.float32)})
    with pytest.raises(TypeError, match="params are the weights of a graph module"):
        from tessera import te

        a = te.placeholder((4,))
        tessera.build(te.create_schedule(a.op), [a], params={})
    dynamic = parse("def main(%x: f32[n, 4]) { %1 = nn.relu(%x); return %1 }")
    with pytest.raises(ValueError, match=r"input %x has a symbolic shape f32\[n, 4\]: bind"):
        tessera.build(dynamic, target="llvm")  # named as the user knows it, not a group's %p0
    relu = dynamic.body[0]  # a hand-built function returning a value its body never defines
    stray = type(relu.outputs[0])("stray", relu.outputs[0].type)
    undefined = type(func)("main", dynamic.params, dynamic.body, (stray,))
    with pytest.raises(ValueError, match="output %stray is never defined"):
        tessera.build(undefined, target="llvm")


# -- the light models of the onnx package (slow) ---------------------------------------------------

LIGHT = light_model_names()


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_matches_onnxruntime(name, target, tmp_path, capsys):
    model = light_model(name, seed=0)  # random weights instead of ConstantOfShape
    feeds = random_inputs(model, seed=0)
    expected = run_ort(model, feeds)
    start = time.perf_counter()
    lib = compile_model(model, target)
    seconds = time.perf_counter() - start
    with capsys.disabled():
        print(f"\n  {name} on {target}: compiled in {seconds:.1f} s, "
              f"{lib.num_kernels} kernels, {len(lib.plan['calls'])} calls")  # fmt: skip
    for g, e in zip(run_lib(lib, feeds), expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
    loaded = load_module(lib.export_library(tmp_path / "model.so"))
    for g, e in zip(run_lib(loaded, feeds), expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)


def test_matmul_with_constant_weights_and_batch_axes_matches_ort():
    # rows fused across the batch axes: each register tile computes its own rows (the tile's
    # bound used to cover whole batch slices, a kernel unrolled in proportion to the batch)
    a = f32(3, 5, 33, 16)
    node = N("MatMul", ["a", "w"], ["y"])
    model = make_model([node], {"a": a}, ["y"], {"w": f32(16, 7)}, 17)
    check_against_ort(model, {"a": a}, "llvm")
