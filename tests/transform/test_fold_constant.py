import numpy as np
import pytest

from tessera.graph import get_op, parse
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import PassContext, fold_constant


def test_folds_a_constant_chain(same_outputs):
    before = parse(
        """def main(%x: f32[2]) {
          %c = constant([1.0, 2.0]) : f32[2];
          %1 = exp(%c); %2 = multiply(%1, %c); %3 = add(%x, %2); return %3 }"""
    )
    c = np.array([1.0, 2.0], "float32")
    folded = (np.exp(c) * c).astype("float32")
    expected = parse(
        "def main(%x: f32[2]) { %2 = constant(...) : f32[2]; %3 = add(%x, %2); return %3 }",
        constants={"2": folded},
    )
    after = fold_constant(before)
    assert_structural_equal(after, expected)
    same_outputs(before, after)


def test_nothing_to_fold_returns_the_same_function():
    before = parse("def main(%x: f32[2]) { %1 = exp(%x); return %1 }")
    assert fold_constant(before) is before


def test_folded_output_becomes_a_constant_output():
    before = parse(
        """def main(%x: f32[2]) {
          %c = constant([4.0, 9.0]) : f32[2]; %1 = sqrt(%c); return %x, %1 }"""
    )
    expected = parse("def main(%x: f32[2]) { %1 = constant([2.0, 3.0]) : f32[2]; return %x, %1 }")
    assert_structural_equal(fold_constant(before), expected)


def test_shape_computation_folds(same_outputs):
    before = parse(
        """def main(%x: f32[2, 3]) {
          %w = constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]) : f32[3, 2];
          %t = transpose(%w, axes=[1, 0]); %y = nn.dense(%x, %t); return %y }"""
    )
    after = fold_constant(before)
    assert [c.op.name for c in after.body] == ["nn.dense"]
    np.testing.assert_array_equal(after.body[0].inputs[1].array, before.constants[0].array.T)
    same_outputs(before, after)


def test_size_limit_is_configurable():
    before = parse(
        """def main(%x: f32[4]) {
          %c = constant([1.0, 2.0, 3.0, 4.0]) : f32[4]; %1 = exp(%c); %2 = add(%x, %1);
          return %2 }"""
    )
    with PassContext(config={"fold_constant.max_bytes": 15}):
        assert fold_constant(before) is before
    with PassContext(config={"fold_constant.max_bytes": 16}):
        assert [c.op.name for c in fold_constant(before).body] == ["add"]


def test_inflating_broadcast_stays_a_call(same_outputs):
    before = parse(
        """def main(%x: f32[64, 64]) {
          %s = constant(0.5) : f32[]; %e = expand(%s, shape=[64, 64]); %y = add(%x, %e);
          return %y }"""
    )
    after = fold_constant(before)
    assert after is before  # 16 KiB of weights to save one broadcast: not worth it
    same_outputs(before, after)


def test_inflating_broadcast_folds_when_only_folded_calls_use_it():
    before = parse(
        """def main(%x: f32[]) {
          %s = constant(0.5) : f32[]; %e = expand(%s, shape=[64, 64]);
          %m = sum(%e, axis=none); %y = add(%x, %m); return %y }"""
    )
    after = fold_constant(before)
    assert [c.op.name for c in after.body] == ["add"]
    assert after.body[0].inputs[1].array == np.float32(2048.0)


def test_small_broadcast_is_folded():
    before = parse(
        """def main(%x: f32[2, 2]) {
          %s = constant(0.5) : f32[]; %e = expand(%s, shape=[2, 2]); %y = add(%x, %e);
          return %y }"""
    )
    expected = parse(
        """def main(%x: f32[2, 2]) {
          %e = constant([[0.5, 0.5], [0.5, 0.5]]) : f32[2, 2]; %y = add(%x, %e); return %y }"""
    )
    assert_structural_equal(fold_constant(before), expected)


def test_evaluation_error_leaves_the_call():
    # max of an empty tensor raises in its reference: the error belongs to run time
    before = parse(
        """def main(%x: f32[]) {
          %a = constant([]) : f32[0]; %m = max(%a); %y = add(%x, %m); return %y }"""
    )
    assert fold_constant(before) is before


def test_side_effects_are_not_folded(monkeypatch):
    before = parse("def main() { %c = constant([1.0, 2.0]) : f32[2]; %y = exp(%c); return %y }")
    assert fold_constant(before) is not before
    monkeypatch.setattr(get_op("exp"), "has_side_effects", True)
    assert fold_constant(before) is before


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_folded_dtypes_match_the_types(dtype):
    arr = np.array([1, 0, 1], dtype)
    t = {"float32": "f32", "int32": "i32", "bool": "bool"}[dtype]
    before = parse(
        f"def main(%x: {t}[3]) {{ %c = constant(...) : {t}[3]; %n = copy(%c); "
        f"%y = equal(%x, %n); return %y }}",
        constants={"c": arr},
    )
    after = fold_constant(before)
    (const,) = after.constants
    assert const.array.dtype == np.dtype(dtype)


def test_calls_that_stay_keep_their_source_nodes():
    before = parse(
        """def main(%x: f32[64, 64]) {
          %s0 = constant(0.25) : f32[]; %s = add(%s0, %s0) @"half";
          %e = expand(%s, shape=[64, 64]) @"bcast"; %y = add(%x, %e) @"y"; return %y }"""
    )
    after = fold_constant(before)
    # %s folds away (its name with it); the inflating expand stays, with a new input.
    assert [(c.op.name, c.span) for c in after.body] == [
        ("expand", ("bcast",)),
        ("add", ("y",)),
    ]
    assert after.body[0] is not before.body[1]
