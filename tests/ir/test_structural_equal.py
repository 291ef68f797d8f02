from tessera import tir
from tessera.ir import structural_equal


def test_variables_map_one_to_one():
    i, j, k = tir.Var("i"), tir.Var("j"), tir.Var("k")
    assert structural_equal(i + 1, j + 1)
    assert not structural_equal(i + i, i + j)
    assert not structural_equal(i + j, k + k)
    assert not structural_equal(i + 1, j + 1, map_free_vars=False)


def test_dtype_and_structure_matter():
    i = tir.Var("i")
    f = tir.Var("f", "float32")
    assert not structural_equal(i + 1, i + 2)
    assert not structural_equal(i * 2, i + 2)
    assert not structural_equal(tir.Var("a", "int32"), tir.Var("b", "int64"))
    assert structural_equal(f * 2.0, tir.Var("g", "float32") * 2.0)


def test_buffers_map_with_their_shapes():
    n = tir.Var("n")
    a = tir.decl_buffer((n, 4), "float32", "A")
    b = tir.decl_buffer((tir.Var("m"), 4), "float32", "B")
    c = tir.decl_buffer((tir.Var("m"), 5), "float32", "C")
    i = tir.Var("i")
    assert structural_equal(
        tir.BufferStore(a, a[i, 0], (i, 1)), tir.BufferStore(b, b[i, 0], (i, 1))
    )
    assert not structural_equal(
        tir.BufferStore(a, a[i, 0], (i, 1)), tir.BufferStore(c, c[i, 0], (i, 1))
    )


def test_fields_declared_compare_false_are_ignored():
    from dataclasses import dataclass, field

    from tessera.ir.node import Node

    @dataclass(frozen=True)
    class Tagged(Node):
        value: object
        note: str = field(default="", compare=False)

    i, j = tir.Var("i"), tir.Var("j")
    assert structural_equal(Tagged(i + 1, note="a"), Tagged(j + 1, note="b"))
    assert not structural_equal(Tagged(i + 1, note="a"), Tagged(j + 2, note="a"))
    assert structural_equal((Tagged(1, "x"),), (Tagged(1, "y"),))
