import pytest

from tessera.graph import parse
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import (
    PassContext,
    PassTiming,
    Sequential,
    eliminate_common_subexpr,
    eliminate_dead_code,
    fold_constant,
)

TEXT = """def main(%x: f32[2]) {
  %c = constant([1.0, 2.0]) : f32[2];
  %n = negative(%c); %a = add(%x, %n); %b = add(%x, %n); %d = exp(%x);
  %y = multiply(%a, %b); return %y }"""


def test_runs_passes_by_opt_level():
    seq = Sequential([fold_constant, eliminate_dead_code, eliminate_common_subexpr])
    func = parse(TEXT)
    with PassContext(opt_level=0):
        assert seq.enabled_passes() == []
    with PassContext(opt_level=2):
        assert seq.enabled_passes() == [fold_constant, eliminate_dead_code]
        after0 = seq(func)
    assert [c.op.name for c in after0.body] == ["add", "add", "multiply"]
    with PassContext(opt_level=3):
        after3 = seq(func)
    expected = parse(
        """def main(%x: f32[2]) {
          %n = constant([-1.0, -2.0]) : f32[2]; %a = add(%x, %n); %y = multiply(%a, %a);
          return %y }"""
    )
    assert_structural_equal(after3, expected)


def test_explicit_levels_disabled_passes_and_instruments():
    timing = PassTiming()
    seq = Sequential([(fold_constant, 3), eliminate_dead_code], name="cleanup")
    with PassContext(opt_level=2, disabled_pass=["eliminate_dead_code"], instruments=[timing]):
        assert seq(parse(TEXT)).body[0].op.name == "negative"
    assert timing.times == {}  # one pass below its level, the other disabled
    with PassContext(opt_level=3, instruments=[timing]):
        seq(parse(TEXT))
    assert set(timing.times) == {"fold_constant", "eliminate_dead_code"}


def test_sequence_has_its_own_level_and_nests():
    inner = Sequential([fold_constant], opt_level=2, name="inner")
    outer = Sequential([inner, eliminate_dead_code])
    func = parse(TEXT)
    with PassContext(opt_level=1):
        assert [c.op.name for c in outer(func).body][0] == "negative"  # only dead code goes
    with PassContext(opt_level=2):
        assert [c.op.name for c in outer(func).body][0] == "add"


def test_bad_entries_are_rejected():
    with pytest.raises(TypeError, match="not a pass"):
        Sequential([42])
    with pytest.raises(ValueError, match="opt level 7"):
        Sequential([(fold_constant, 7)])
