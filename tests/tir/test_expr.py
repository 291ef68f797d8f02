import pytest

from tessera import tir
from tessera.ir.dtype import float32, float64, int32, int64


def test_operators_build_ir_and_fold_int_constants():
    i = tir.Var("i")
    e = i * 4 + 1
    assert isinstance(e, tir.Add) and isinstance(e.a, tir.Mul)
    assert e == i * 4 + 1  # structural, via EQ.__bool__
    assert not bool(e == i * 4 + 2)
    assert (tir.const(3) + 4).value == 7
    assert isinstance(i // 2, tir.FloorDiv) and isinstance(i % 2, tir.FloorMod)
    assert isinstance(i < 3, tir.LT) and (i < 3).dtype.is_bool


def test_hash_is_structural_and_vars_are_identities():
    i, j = tir.Var("i"), tir.Var("j")
    assert {i * 2: "x"}[i * 2] == "x"
    assert i * 2 != j * 2
    assert len({tir.Var("i"), tir.Var("i")}) == 2


def test_type_promotion():
    i = tir.Var("i")
    f = tir.Var("f", "float32")
    assert (i + 1.5).dtype == float32
    assert (f * 2).dtype == float32
    assert (i + tir.Var("k", "int64")).dtype == int64
    assert (f + tir.Var("d", "float64")).dtype == float64
    assert (i * 2).dtype == int32


def test_symbolic_condition_is_not_a_python_bool():
    i = tir.Var("i")
    with pytest.raises(TypeError, match="bool"):
        if i < 3:
            pass


def test_intrinsics_check_operand_types():
    f = tir.Var("f", "float32")
    assert tir.exp(f).dtype == float32
    with pytest.raises(TypeError, match="floating-point"):
        tir.exp(tir.Var("i"))
    assert tir.if_then_else(tir.Var("i") < 2, f, 0.0).op == "if_then_else"


def test_bitwise_on_ints_logic_on_bools():
    i, j = tir.Var("i"), tir.Var("j")
    assert (i & j).op == "bitwise_and"
    assert isinstance((i < 2) & (j < 3), tir.And)
    with pytest.raises(TypeError):
        tir.Var("f", "float32") & 1


def test_int_constants_wrap_like_the_machine():
    # folding while building must agree with the generated code (and with the simplifier)
    const = tir.const
    assert (const(2**31 - 1) + 1).value == -(2**31)
    assert (const(2**31 - 1, "int64") + 1).value == 2**31
    assert const(-1, "uint8").value == 255
    assert (const(200, "uint8") * 2).value == 144
    assert const(2**64 - 1, "uint64").value == 2**64 - 1
    assert const(2, "bool").value == 1
