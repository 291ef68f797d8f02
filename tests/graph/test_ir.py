"""Graph IR: text round trips, parser errors, verifier, op registry rules, interpreter."""
# ruff: noqa: E501

import re

import numpy as np
import pytest

from tessera.graph import (
    Constant,
    GraphBuilder,
    OpKind,
    TensorType,
    Value,
    get_op,
    list_ops,
    parse,
    register_op,
    run_function,
)
from tessera.graph.parser import ParseError, parse_module
from tessera.graph.verify import VerifyError
from tessera.ir import assert_structural_equal, structural_equal

TEXT = """def main(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 3, 3]) {
  %shape = constant([1, -1]) : i64[2];
  %1 = nn.conv2d(%x, %w, dilation=[1, 1], groups=1, padding=[1, 1, 1, 1], strides=[2, 2]) : f32[1, 4, 4, 4];
  %2 = nn.relu(%1) : f32[1, 4, 4, 4];
  %3 = reshape(%2, newshape=[1, 64]) : f32[1, 64];
  %4, %5 = split(%3, axis=1, sections=[16, 48]) : (f32[1, 16], f32[1, 48]);
  %6 = cast(%4, dtype=float16) : f16[1, 16];
  %7 = image.resize(%2, coordinate_transformation_mode="align_corners", mode="linear", scales=[1.0, 1.0, 2.0, 0.5], size=[1, 4, 8, 2]) : f32[1, 4, 8, 2];
  return %6, %5, %7
}"""


def test_text_round_trip():
    f = parse(TEXT)
    assert str(f) == TEXT
    assert_structural_equal(parse(str(f)), f)
    g = parse(re.sub(r"%2\b", "%r", TEXT.replace("%1", "%conv")))
    assert structural_equal(f, g)  # names do not matter, structure does
    h = parse(TEXT.replace("strides=[2, 2]", "strides=[1, 1]").replace("4, 4, 4]", "4, 8, 8]")
              .replace("[1, 64]", "[1, 256]").replace("[16, 48]", "[16, 240]")
              .replace("f32[1, 48]", "f32[1, 240]").replace("size=[1, 4, 8, 2]", "size=[1, 4, 16, 4]")
              .replace("f32[1, 4, 8, 2]", "f32[1, 4, 16, 4]"))  # fmt: skip
    assert not structural_equal(f, h)


def test_odd_names_and_values_round_trip():
    b = GraphBuilder(fold=False)
    x = b.param("input:0", (2, 3), "float32")
    c = b.const(np.array([[np.inf, -0.0, 1e-30]], np.float32), name="conv1/7x7 w")
    y = b.call("add", x, c)
    z = b.call("clip", y, a_min=None, a_max=0.5)
    m = b.call("mean", z, axis=(0,), keepdims=True)
    f = b.finish([m, b.call("isnan", z)])
    text = str(f)
    assert '%"input:0"' in text and '%"conv1/7x7 w"' in text and "a_min=none" in text
    assert_structural_equal(parse(text), f)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4), (1, 1, 0)])
def test_zero_size_constants_round_trip(shape):
    c = Constant.of("c", np.zeros(shape, "float32"))
    f = parse(f"def main(%x: f32[2]) {{ %c = constant({{}}) : {c.type}; return %x, %c }}"
              .replace("{}", "[]" if shape[0] == 0 else str(np.zeros(shape).tolist())))  # fmt: skip
    assert f.constants[0].array.shape == shape
    assert_structural_equal(parse(str(f)), f)


def test_tensor_data_equality_agrees_with_its_hash():
    from tessera.graph import TensorData

    zero, minus_zero = TensorData(np.float32([0.0])), TensorData(np.float32([-0.0]))
    assert zero != minus_zero  # 1 / x tells them apart: a pass must not merge them
    nan = TensorData(np.float32([np.nan]))
    assert nan == TensorData(np.float32([np.nan])) and hash(nan) == hash(TensorData(nan.array))
    assert TensorData(np.int32([1])) != TensorData(np.int64([1]))


def test_elided_constants_and_modules():
    b = GraphBuilder()
    x = b.param("x", (100,), "float32")
    big = b.const(np.arange(100, dtype=np.float32), name="big")
    f = b.finish([b.call("multiply", x, big)])
    text = str(f)
    assert "constant(...)" in text
    with pytest.raises(ParseError, match="data of constant %big was not given"):
        parse(text)
    assert_structural_equal(parse(text, {"big": big.array}), f)
    mod = parse_module(text + "\n\n" + text.replace("def main", "def second"), {"big": big.array})
    assert list(mod.functions) == ["main", "second"]


def test_types_may_be_left_out_and_are_checked():
    f = parse("def main(%x: f32[4, 5]) { %1 = sum(%x, axis=[1], keepdims=false); return %1 }")
    assert f.body[0].outputs[0].type == TensorType((4,), "float32")
    with pytest.raises(ParseError, match=r"sum gives f32\[4\], the text says f32\[5\]"):
        parse("def main(%x: f32[4, 5]) { %1 = sum(%x, axis=[1]) : f32[5]; return %1 }")


@pytest.mark.parametrize(
    "text,message",
    [("def main(%x: f32[4]) { %1 = nn.relu(%y); return %1 }", "%y is used before"),
     ("def main(%x: f32[4]) { %x = nn.relu(%x); return %x }", "%x is defined twice"),
     ("def main(%x: f32[4]) { %1 = nn.frobnicate(%x); return %1 }", "unknown graph op"),
     ("def main(%x: f32[4]) { %1 = add(%x, %x, alpha=1); return %1 }", "add: bad inputs or attributes"),
     ("def main(%x: f32[4], %y: f32[3]) { %1 = add(%x, %y); return %1 }", "do not broadcast"),
     ("def main(%x: f32[4]) { %1 = nn.relu(%x) return %1 }", "line 1, column 41: expected ';'"),
     ("def main(%x: q32[4]) { return %x }", "cannot parse dtype")],
)  # fmt: skip
def test_parse_errors(text, message):
    with pytest.raises(ParseError, match=message):
        parse(text)


def test_verify_catches_bad_types_and_order():
    x = Value("x", TensorType((4,), "float32"))
    y = Value("y", TensorType((5,), "float32"))
    from tessera.graph import Call, Function

    relu = get_op("nn.relu")
    with pytest.raises(VerifyError, match=r"typed f32\[5\], its rule gives f32\[4\]"):
        Function("f", (x,), (Call(relu, (x,), {}, (y,)),), (y,)).verify()
    z = Value("z", TensorType((4,), "float32"))
    body = (Call(relu, (z,), {}, (y,)), Call(relu, (x,), {}, (z,)))
    with pytest.raises(VerifyError, match="before it is defined"):
        Function("f", (x,), body, (y,)).verify()


def test_op_registry():
    assert {"nn.conv2d", "add", "matmul", "image.resize", "sum", "gather", "pad"} <= set(list_ops())
    assert get_op("nn.conv2d").kind == OpKind.OUT_ELEMWISE_FUSABLE
    assert get_op("add").kind == OpKind.BROADCAST and get_op("exp").kind == OpKind.ELEMWISE
    assert get_op("sum").kind == OpKind.COMM_REDUCE and get_op("reshape").kind == OpKind.INJECTIVE
    with pytest.raises(ValueError, match="already registered"):
        register_op("add")
    with pytest.raises(ValueError, match="unknown graph op"):
        get_op("nope")
    # rules live in slots; compute/schedule are one decorator away
    op = get_op("nn.relu")
    assert {"type_rule", "reference"} <= set(op.rules)


@pytest.mark.parametrize(
    "op,types,attrs,message",
    [("nn.conv2d", [(1, 3, 8, 8), (4, 2, 3, 3)], dict(strides=(1, 1), padding=(0,) * 4,
      dilation=(1, 1)), "channels"),
     ("matmul", [(2, 3), (4, 5)], {}, "inner dims"),
     ("reshape", [(2, 3)], {"newshape": (4, 2)}, "cannot reshape"),
     ("transpose", [(2, 3)], {"axes": (0, 0)}, "repeated axis"),
     ("concatenate", [(2, 3), (3, 3)], {"axis": 1}, "differ off axis"),
     ("sum", [(2, 3)], {"axis": (2,)}, "out of range"),
     ("split", [(6,)], {"axis": 0, "sections": (2, 2)}, "do not add up")],
)  # fmt: skip
def test_type_rule_errors(op, types, attrs, message):
    with pytest.raises(TypeError, match=message):
        get_op(op).infer_type([TensorType(t, "float32") for t in types], attrs)


def test_builder_folds_constants_and_interpreter_runs():
    b = GraphBuilder()
    x = b.param("x", (2, 3), "float32")
    two = b.const(np.full((3,), 2.0, np.float32))
    four = b.call("multiply", two, two)  # folded: both inputs constant
    assert isinstance(four, Constant) and four.array.tolist() == [4.0] * 3
    y = b.call("nn.softmax", b.call("add", x, four), axis=-1)
    f = b.finish([y])
    assert [c.op.name for c in f.body] == ["add", "nn.softmax"]
    xv = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    (out,) = run_function(f, [xv])
    e = np.exp(xv + 4 - (xv + 4).max(-1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(-1, keepdims=True), rtol=1e-6)


def test_reference_numerics_against_numpy():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    (y,) = get_op("nn.conv2d").evaluate(
        [x, w], dict(strides=(1, 1), padding=(0,) * 4, dilation=(1, 1))
    )
    naive = np.zeros((2, 4, 3, 3), np.float64)
    for i in range(3):
        for j in range(3):
            naive[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i : i + 3, j : j + 3], w)
    np.testing.assert_allclose(y, naive, rtol=1e-5, atol=1e-5)
    (s,) = get_op("slice").evaluate([np.arange(10)], dict(begin=(8,), end=(-1,), strides=(-3,)))
    assert s.tolist() == [8, 5, 2]
    (d,) = get_op("divide").evaluate([np.array([-7, 7]), np.array([2, 2])], {})
    assert d.tolist() == [-3, 3]  # integer division truncates, as in ONNX/C
