import pytest

from tessera.graph import Call, Function, TensorType, Value, get_op, parse
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import infer_types


def _with_param_types(func, types):
    """`func` with its parameters retyped (output types left stale on purpose)."""
    params = tuple(Value(p.name, t) for p, t in zip(func.params, types, strict=True))
    mapping = {id(p): q for p, q in zip(func.params, params, strict=True)}
    body = tuple(
        Call(c.op, tuple(mapping.get(id(v), v) for v in c.inputs), c.attrs, c.outputs, c.span)
        for c in func.body
    )
    return Function(func.name, params, body, func.outputs, func.constants)


def test_propagates_a_new_batch_size(same_outputs):
    before = parse(
        """def main(%x: f32[1, 8], %w: f32[4, 8]) {
          %1 = nn.dense(%x, %w) : f32[1, 4]; %2 = nn.relu(%1) : f32[1, 4];
          %3 = sum(%2, axis=[1]) : f32[1]; return %3 }"""
    )
    stale = _with_param_types(before, [TensorType((5, 8), "f32"), TensorType((4, 8), "f32")])
    expected = parse(
        """def main(%x: f32[5, 8], %w: f32[4, 8]) {
          %1 = nn.dense(%x, %w) : f32[5, 4]; %2 = nn.relu(%1) : f32[5, 4];
          %3 = sum(%2, axis=[1]) : f32[5]; return %3 }"""
    )
    after = infer_types(stale)
    after.verify()
    assert_structural_equal(after, expected)
    same_outputs(expected, after)


def test_correct_types_give_the_same_function():
    before = parse("def main(%x: f32[2, 3]) { %1 = exp(%x); %2 = sum(%1); return %2 }")
    assert infer_types(before) is before


def test_multi_output_call_retyped():
    before = parse(
        "def main(%x: f32[4, 2]) { %a, %b = split(%x, axis=0, sections=[2, 2]); return %a, %b }"
    )
    stale = _with_param_types(before, [TensorType((4, 6), "f32")])
    after = infer_types(stale)
    assert [str(v.type) for v in after.outputs] == ["f32[2, 6]", "f32[2, 6]"]


def test_error_names_the_call():
    x, w = Value("x", TensorType((2, 3), "f32")), Value("w", TensorType((4, 5), "f32"))
    y = Value("y", TensorType((2, 4), "f32"))
    func = Function("main", (x, w), (Call(get_op("nn.dense"), (x, w), {}, (y,)),), (y,))
    with pytest.raises(TypeError, match=r"main: cannot type %y = nn.dense\(%x: f32\[2, 3\]"):
        infer_types(func)


def test_dtype_change_propagates():
    before = parse(
        "def main(%x: f32[3]) { %1 = cast(%x, dtype=f16) : f16[3]; %2 = exp(%1); return %2 }"
    )
    c = before.body[0]
    widened = Call(c.op, c.inputs, {"dtype": "float64"}, c.outputs)  # edited by hand
    stale = Function("main", before.params, (widened, before.body[1]), before.outputs)
    after = infer_types(stale)
    assert str(after.outputs[0].type) == "f64[3]"


def test_retyped_calls_keep_their_source_nodes():
    before = parse(
        """def main(%x: f32[1, 8]) {
          %1 = exp(%x) : f32[1, 8] @"e"; %2 = sum(%1, axis=[1]) : f32[1] @"s", "t"; return %2 }"""
    )
    after = infer_types(_with_param_types(before, [TensorType((3, 8), "f32")]))
    assert [c.outputs[0].type.shape for c in after.body] == [(3, 8), (3,)]
    assert [c.span for c in after.body] == [("e",), ("s", "t")]
