"""The linear canonical form: collecting like terms, the order of terms, the fuse identity."""

from tessera.arith.canonical import build, fold_fuse_identity, linearize
from tessera.ir import structural_equal
from tessera.tir import IntImm, Var, floordiv, floormod

i, j, k, n = Var("i"), Var("j"), Var("k"), Var("n")


def canon(e):
    lin = linearize(e)
    fold_fuse_identity(lin)
    return build(lin)


def same(a, b):
    return structural_equal(a, b, map_free_vars=False)


def test_collects_like_terms():
    assert same(canon((i * 16 + j) - i * 16), j)
    assert same(canon(i * 4 + i * 2), i * 6)
    assert same(canon((n + 15) - 15), n)
    assert same(canon((i + 1) * 4), i * 4 + 4)
    assert same(canon(3 * (i - j) + j * 3), i * 3)
    assert same(canon(i - i), IntImm(0))


def test_order_positive_terms_then_subtracted_then_constant():
    assert same(canon(IntImm(3) - k * 2 + i * 16 + j), i * 16 + j - k * 2 + 3)
    assert same(canon(IntImm(5) - i), IntImm(5) - i)
    assert same(canon(IntImm(0) - i * 2 - j), i * -2 - j)
    assert same(canon(i - 7), i - 7)


def test_linear_form_is_a_fixpoint():
    e = canon(k * 3 - (i + 2) * 5 + j)
    assert same(canon(e), e)


def test_fuse_identity_with_any_scale_and_order():
    assert same(canon(floordiv(i, 4) * 4 + floormod(i, 4)), i)
    assert same(canon(floormod(i, 4) * 2 + j + floordiv(i, 4) * 8), i * 2 + j)
    assert same(canon(floordiv(i + j, 16) * -16 - floormod(i + j, 16)), i * -1 - j)
    # a mismatched coefficient is not the identity
    e = floordiv(i, 4) * 3 + floormod(i, 4)
    assert same(canon(e), e)


def test_nonlinear_products_are_terms():
    lin = linearize(i * j + i * j + 1)
    assert list(lin.terms.values()) == [2] and lin.const == 1
