"""Patterns in the expression language: matching, repeated wilds, constants, rules with lambdas."""

from tessera.arith import Analyzer
from tessera.arith.pattern import Rule, Wild, WildConst, match, rewrite, rule_table
from tessera.ir import structural_equal
from tessera.tir import IntImm, Var, floordiv

x, y, c1 = Wild("x"), Wild("y"), WildConst("c1")
i, j = Var("i"), Var("j")


def test_wild_binds_any_expression_and_repeats_must_agree():
    binds = {}
    assert match(x - x, (i + 1) - (i + 1), binds)
    assert structural_equal(binds["x"], i + 1)
    assert not match(x - x, (i + 1) - (j + 1), {})


def test_const_wild_and_constants():
    binds = {}
    assert match(x * c1, i * 4, binds) and binds["c1"].value == 4
    assert not match(x * c1, i * j, {})
    assert match(x + 0, i + 0, {}) and not match(x + 0, i + 1, {})
    assert match(x + 0, Var("w", "int64") + IntImm(0, "int64"), {})  # value matches any width


def test_rule_with_lambda_condition_and_analyzer():
    rule = Rule(floordiv(x, c1), lambda x, c1: x, when=lambda c1, analyzer: c1.value == 1)
    an = Analyzer()
    assert rule.apply(floordiv(i, IntImm(1)), an) is i
    assert rule.apply(floordiv(i, IntImm(2)), an) is None


def test_replacement_constants_take_the_expression_dtype():
    w = Var("w", "int64")
    out = Rule(x - x, 0).apply(w - w, Analyzer())
    assert out.dtype.bits == 64 and out.value == 0


def test_rule_table_dispatches_on_root_type():
    table = rule_table([Rule(x + 0, x), Rule(x * 1, x)])
    assert rewrite(table, i * 1, Analyzer()) is i
    assert rewrite(table, i - 0, Analyzer()) is None
