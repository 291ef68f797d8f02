"""te.tensor: placeholders, computes, axes, indexing, exports."""

import pytest

from tessera import te, tir
from tessera.te.tensor import ProducerLoad


def test_placeholder_defaults_and_dtypes():
    A = te.placeholder((3, 4), name="A")
    assert A.dtype == te.DType.parse("float32") and A.ndim == 2
    assert [s.value for s in A.shape] == [3, 4]
    assert te.placeholder((2,), "int8", "B").dtype == te.DType.parse("int8")
    assert te.placeholder(5, name="C").ndim == 1


def test_compute_names_axes_after_lambda_parameters():
    n = te.var("n")
    A = te.placeholder((n, 4), name="A")
    B = te.compute(A.shape, lambda row, col: A[row, col] * 2, name="B", tag="elemwise")
    assert [iv.var.name for iv in B.op.axis] == ["row", "col"]
    assert B.op.axis[0].dom.extent is n
    assert B.op.tag == "elemwise" and B.op.reduce_axis == ()
    assert B.op.input_tensors == (A,)
    load = B.op.body[0].a
    assert isinstance(load, ProducerLoad) and load.producer is A


def test_varargs_lambda_names_i0_i1():
    A = te.placeholder((2, 3), name="A")
    B = te.compute(A.shape, lambda *i: A(*i) + 1, name="B")
    assert [iv.var.name for iv in B.op.axis] == ["i0", "i1"]


def test_rank0_compute_and_slice_indexing():
    A = te.placeholder((2, 3), name="A")
    S = te.compute((), lambda: A[1][2] + 1.0, name="S")
    assert S.ndim == 0 and isinstance(S.op.body[0].a, ProducerLoad)
    T = te.compute((1,), lambda i: S + 1.0, name="T")  # a rank-0 tensor is a value
    assert T.op.input_tensors == (S,)


def test_reduction_compute_records_reduce_axis():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    assert B.op.reduce_axis == (k,) and B.op.is_reduction
    assert k.iter_type == tir.IterVarType.REDUCE


def test_multi_output_compute():
    A = te.placeholder((4,), name="A")
    x, y = te.compute((4,), lambda i: (A[i] + 1, A[i] * 2), name="two")
    assert x.op is y.op and x.op.num_outputs == 2 and y.value_index == 1
    assert x.op.output(1) is y and x.name == "two.v0"


def test_errors():
    A = te.placeholder((4, 5), name="A")
    k = te.reduce_axis((0, 5), name="k")
    with pytest.raises(ValueError, match="whole body"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1, name="bad")
    with pytest.raises(ValueError, match="2 dimensions"):
        te.compute((4,), lambda i: A[i, 0, 1], name="bad")
    with pytest.raises(ValueError, match="takes 2 arguments"):
        te.compute((4,), lambda i, j: A[i, j], name="bad")
    with pytest.raises(TypeError, match="integers"):
        te.placeholder((2.5,), name="bad")
    with pytest.raises(ValueError, match="thread_axis needs a tag"):
        te.thread_axis()


def test_user_mistakes_get_clear_errors():
    A = te.placeholder((4, 5), name="A")
    # too few indices: the value is a partly indexed tensor, named as such
    for rule in (lambda i: A[i], lambda i: A[i] + 1, lambda i: 1 + A[i], lambda i: i * A[i]):
        with pytest.raises(TypeError, match="A has 2 dimensions, indexed with 1"):
            te.compute((4,), rule, name="bad")
    assert te.compute((4,), lambda i: A[i][2] + 1).shape[0].value == 4  # completed slice
    with pytest.raises(ValueError, match="negative, got -3"):
        te.placeholder((4, -3), name="bad")
    with pytest.raises(ValueError, match="min <= max"):
        te.reduce_axis((5, 2), name="k")
    assert te.reduce_axis((2, 2)).dom.extent.value == 0  # empty is allowed


def test_exports_for_kernel_authors():
    for name in [
        "var", "size_var", "const", "if_then_else", "select", "exp", "log", "sqrt", "rsqrt",
        "tanh", "sigmoid", "erf", "power", "pow", "abs", "floor", "ceil", "round", "fmod",
        "trunc", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left",
        "shift_right", "min", "max", "min_value", "max_value", "floordiv", "floormod",
        "truncdiv", "truncmod", "all", "any", "sum", "comm_reducer", "thread_axis",
    ]:  # fmt: skip
        assert hasattr(te, name), name
    x = te.var("x", "float32")
    assert isinstance(te.max(x, 0.0), tir.Max) and isinstance(x.astype("int32"), tir.Cast)
    assert isinstance(te.exp(x), tir.Call)
