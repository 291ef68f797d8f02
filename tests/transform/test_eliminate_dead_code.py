from tessera.graph import parse
from tessera.ir.module import IRModule
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import eliminate_dead_code


def test_removes_unused_call():
    before = parse("def main(%x: f32[4]) { %a = exp(%x); %b = nn.relu(%x); return %b }")
    expected = parse("def main(%x: f32[4]) { %b = nn.relu(%x); return %b }")
    assert_structural_equal(eliminate_dead_code(before), expected)


def test_removes_dead_chain_and_its_constants_keeps_params():
    before = parse(
        """def main(%x: f32[4], %unused: f32[2]) {
          %c = constant([1.0, 2.0, 3.0, 4.0]) : f32[4];
          %k = constant(2.0) : f32[];
          %a = add(%x, %c); %b = exp(%a); %d = multiply(%x, %k);
          return %d }"""
    )
    expected = parse(
        """def main(%x: f32[4], %unused: f32[2]) {
          %k = constant(2.0) : f32[]; %d = multiply(%x, %k); return %d }"""
    )
    assert_structural_equal(eliminate_dead_code(before), expected)


def test_keeps_multi_output_call_when_one_output_is_used(same_outputs):
    before = parse(
        """def main(%x: f32[4, 2]) {
          %a, %b = split(%x, axis=0, sections=[2, 2]); %c = nn.relu(%b); return %c }"""
    )
    after = eliminate_dead_code(before)
    assert after is before  # nothing to remove: the very same function
    same_outputs(before, after)


def test_output_that_is_a_parameter():
    before = parse("def main(%x: f32[4]) { %a = exp(%x); return %x }")
    expected = parse("def main(%x: f32[4]) { return %x }")
    assert_structural_equal(eliminate_dead_code(before), expected)


def test_runs_on_every_function_of_a_module():
    f = parse("def f(%x: f32[4]) { %a = exp(%x); return %x }")
    g = parse("def g(%x: f32[4]) { %a = exp(%x); return %a }")
    mod = eliminate_dead_code(IRModule({"f": f, "g": g}))
    assert len(mod["f"].body) == 0
    assert mod["g"] is g
