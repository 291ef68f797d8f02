from tessera.graph import parse
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import eliminate_common_subexpr


def test_identical_calls_computed_once(same_outputs):
    before = parse(
        "def main(%x: f32[4]) { %a = exp(%x); %b = exp(%x); %c = add(%a, %b); return %c }"
    )
    expected = parse("def main(%x: f32[4]) { %a = exp(%x); %c = add(%a, %a); return %c }")
    after = eliminate_common_subexpr(before)
    assert_structural_equal(after, expected)
    same_outputs(before, after)


def test_merges_chains_transitively():
    before = parse(
        """def main(%x: f32[4]) {
          %a = exp(%x); %b = nn.relu(%a); %c = exp(%x); %d = nn.relu(%c);
          %e = subtract(%b, %d); return %e }"""
    )
    expected = parse(
        """def main(%x: f32[4]) {
          %a = exp(%x); %b = nn.relu(%a); %e = subtract(%b, %b); return %e }"""
    )
    assert_structural_equal(eliminate_common_subexpr(before), expected)


def test_different_attrs_or_inputs_are_kept():
    before = parse(
        """def main(%x: f32[4, 2], %y: f32[4, 2]) {
          %a = sum(%x, axis=[0]); %b = sum(%x, axis=[1]); %c = exp(%x); %d = exp(%y);
          return %a, %b, %c, %d }"""
    )
    assert eliminate_common_subexpr(before) is before


def test_attr_kinds_are_not_confused():
    before = parse(
        """def main(%x: f32[4]) {
          %a = nn.leaky_relu(%x, alpha=1); %b = nn.leaky_relu(%x, alpha=1.0); return %a, %b }"""
    )
    assert eliminate_common_subexpr(before) is before


def test_identical_constants_merged(same_outputs):
    before = parse(
        """def main(%x: f32[2]) {
          %c1 = constant([1.0, 2.0]) : f32[2]; %c2 = constant([1.0, 2.0]) : f32[2];
          %c3 = constant([1, 2]) : i32[2];
          %a = add(%x, %c1); %b = add(%x, %c2); %d = multiply(%a, %b); return %d, %c3 }"""
    )
    expected = parse(
        """def main(%x: f32[2]) {
          %c1 = constant([1.0, 2.0]) : f32[2]; %c3 = constant([1, 2]) : i32[2];
          %a = add(%x, %c1); %d = multiply(%a, %a); return %d, %c3 }"""
    )
    after = eliminate_common_subexpr(before)
    assert_structural_equal(after, expected)
    same_outputs(before, after)


def test_outputs_are_redirected():
    before = parse("def main(%x: f32[4]) { %a = exp(%x); %b = exp(%x); return %a, %b }")
    expected = parse("def main(%x: f32[4]) { %a = exp(%x); return %a, %a }")
    assert_structural_equal(eliminate_common_subexpr(before), expected)


def _spans(func):
    return [(c.op.name, c.span) for c in func.body]


def test_the_call_kept_answers_for_the_merged_calls_source_nodes():
    before = parse(
        """def main(%x: f32[4]) {
          %a = exp(%x) @"e1"; %b = exp(%x) @"e2", "e1"; %c = nn.relu(%a) @"r1";
          %d = nn.relu(%b) @"r2"; %e = exp(%x); %f = add(%c, %d) @"sum"; return %f, %e }"""
    )
    after = eliminate_common_subexpr(before)
    assert _spans(after) == [
        ("exp", ("e1", "e2")),
        ("nn.relu", ("r1", "r2")),  # merged after its input was: spans follow transitively
        ("add", ("sum",)),
    ]
    assert_structural_equal(parse(str(after)), after)


def test_merging_a_call_without_new_names_keeps_the_call_object():
    before = parse(
        """def main(%x: f32[4]) {
          %a = exp(%x) @"e1"; %b = exp(%x) @"e1"; %c = exp(%x); %d = add(%a, %b);
          return %d, %c }"""
    )
    after = eliminate_common_subexpr(before)
    assert after.body[0] is before.body[0]
    assert _spans(after) == [("exp", ("e1",)), ("add", ())]
