"""Whole-model tests of the ONNX frontend: shape folding, errors, a transformer block, and (slow)
the light models that ship with the onnx package, through the interpreter against ORT."""
# ruff: noqa: E501

import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera.frontend import UnsupportedOpError, from_onnx
from tessera.frontend.testing import check_model, make_model, run_ort
from tessera.graph import run_function
from tessera.models import randomize_weights

R = np.random.default_rng(3)


def _i64(name, values):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name, TensorProto.INT64, [len(values)], values))  # fmt: skip


def test_shape_chain_folds_to_one_reshape():
    # y = reshape(x, concat(shape(x)[0], [-1])): the shape subgraph folds away.
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        _i64("zero", [0]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        _i64("minus1", [-1]),
        helper.make_node("Concat", ["n", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["y"]),
    ]
    x = R.standard_normal((3, 4, 5)).astype(np.float32)
    model = make_model(nodes, {"x": ((None, 4, 5), "float32")}, ["y"])
    func = check_model(model, {"x": x}, shape_dict={"x": (3, 4, 5)})
    assert [c.op.name for c in func.body] == ["reshape"]
    assert func.body[0].attrs["newshape"] == (3, 20)
    assert func.constants == ()
    assert str(func).count("reshape") == 1


def test_dynamic_dim_is_symbolic_unless_shape_dict_sizes_it():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], {"x": (("N", 4), "float32")}, ["y"]
    )
    mod, _ = from_onnx(model)  # a symbolic dim (tests/dynamic)
    (n, four) = mod["main"].params[0].type.shape
    assert n.name == "N" and four == 4
    with pytest.raises(ValueError, match="not an input"):
        from_onnx(model, {"y": (1, 4)})
    mod, _ = from_onnx(model, {"x": (2, 4)})
    assert mod["main"].params[0].type.shape == (2, 4)


def test_unsupported_ops_reported_at_once():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="ok"),
        helper.make_node("ImageDecoder", ["a"], ["b"], name="dec_1"),
        helper.make_node("FooBar", ["a"], ["c"], name="custom_1"),
        helper.make_node("Gemm", ["a", "a"], ["d"], name="msft", domain="com.microsoft"),
    ]
    model = make_model(nodes, {"x": ((2, 2), "float32"), "w": ((1, 2), "float32"),
                               "r": ((1, 2), "float32")}, ["b", "c", "d"])  # fmt: skip
    with pytest.raises(UnsupportedOpError) as info:
        from_onnx(model)
    message = str(info.value)
    for text in ("dec_1: ImageDecoder", "custom_1: FooBar", "msft: Gemm", "3 node(s)"):
        assert text in message
    assert [n for n, _, _ in info.value.nodes] == ["dec_1", "custom_1", "msft"]
    assert isinstance(info.value, ValueError)


def test_malformed_models_give_clear_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"this is not a protobuf \x00\xff")
    with pytest.raises(ValueError, match="cannot read ONNX model"):
        from_onnx(str(bad))
    with pytest.raises(TypeError, match="ModelProto"):
        from_onnx(42)
    nodes = [helper.make_node("Relu", ["missing"], ["y"], name="r")]
    with pytest.raises(ValueError, match="'missing', which no input"):
        from_onnx(make_model(nodes, {"x": ((2,), "float32")}, ["y"]))
    nodes = [helper.make_node("Add", ["x", "x"], ["y"], name="add")]
    model = make_model(nodes, {"x": ((2,), "float32")}, ["z"])
    with pytest.raises(ValueError, match="output 'z'"):
        from_onnx(model)
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")]
    model = make_model(nodes, {"x": ((2, 2), "float32"), "s": ((2,), "int64")}, ["y"])
    with pytest.raises(ValueError, match=r"node 'rs' \(Reshape.*must be a constant"):
        from_onnx(model)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="c")]
    model = make_model(
        nodes, {"x": ((1, 3, 4, 4), "float32")}, ["y"], {"w": np.ones((2, 4, 3, 3), np.float32)}
    )
    with pytest.raises(ValueError, match=r"node 'c' \(Conv.*channels"):
        from_onnx(model)


def test_interpreter_checks_inputs():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": ((2, 3), "float32")}, ["y"])
    mod, params = from_onnx(model)
    with pytest.raises(ValueError, match=r"input 'x' must have shape \[2, 3\], got \[3, 2\]"):
        run_function(mod["main"], {"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(TypeError, match="input 'x' must have dtype float32"):
        run_function(mod["main"], {"x": np.zeros((2, 3), np.int64)})
    with pytest.raises(ValueError, match="missing input 'x'"):
        run_function(mod["main"], {})


def test_initializers_become_params():
    w = R.standard_normal((4, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, {"x": ((2, 4), "float32")}, ["y"], {"w": w})
    mod, params = from_onnx(model)
    assert list(params) == ["w"] and np.array_equal(params["w"], w)
    assert [p.name for p in mod["main"].params] == ["x", "w"]


def _transformer_block(batch=2, seq=5, d=8, heads=2, vocab=11):
    """Embedding + one attention block + GELU MLP, in the ops that exporters emit."""
    hd = d // heads
    f = lambda *s: (R.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    inits = {
        "emb": f(vocab, d), "wqkv": f(d, 3 * d), "wo": f(d, d), "w1": f(d, 4 * d), "w2": f(4 * d, d),
        "ln_s": f(d) + 1, "ln_b": f(d), "half": np.array(0.5, np.float32),
        "one": np.array(1.0, np.float32), "sqrt2": np.array(np.sqrt(2), np.float32),
        "scale": np.array(1 / np.sqrt(hd), np.float32), "neg": np.array(-1e9, np.float32),
        "heads_shape": np.array([batch, seq, 3, heads, hd], np.int64),
        "merged": np.array([0, 0, d], np.int64), "split3": np.array([1, 1, 1], np.int64),
        "causal": np.tril(np.ones((seq, seq), bool)), "sq_axes": np.array([2], np.int64),
        "mask_shape": np.array([batch, heads, seq, seq], np.int64),
    }  # fmt: skip
    N = helper.make_node
    nodes = [
        N("Gather", ["emb", "ids"], ["h0"], axis=0),
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
        N("Expand", ["causal", "mask_shape"], ["mask"]),
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
    ids = R.integers(0, vocab, (batch, seq)).astype(np.int64)
    return make_model(nodes, {"ids": ids}, ["out"], inits), {"ids": ids}


def test_transformer_block_matches_onnxruntime():
    model, feeds = _transformer_block()
    func = check_model(model, feeds)
    ops = {c.op.name for c in func.body}
    assert {"gather", "nn.layer_norm", "matmul", "nn.softmax", "erf", "where", "split"} <= ops
    assert "expand" not in ops  # the causal mask is constant: folded


LIGHT = sorted(
    glob.glob(os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_*.onnx"))
)


@pytest.mark.slow
@pytest.mark.parametrize("path", LIGHT, ids=lambda p: os.path.basename(p)[6:-5])
def test_light_models_match_onnxruntime(path):
    model = onnx.load(path)
    rng = np.random.default_rng(0)
    randomize_weights(model, rng)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name not in inits:
            shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    expected = run_ort(model, feeds)
    mod, params = from_onnx(model)
    got = run_function(mod["main"], feeds, params)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-5)
