"""Reductions, argmax/argmin, cumsum and topk (graph/ops/reduce.py) against numpy references."""

import math

import numpy as np
import pytest

from tessera import te
from tessera.graph.op import get_op
from tessera.topi import reduce
from tessera.topi.testing import check_ops, loop_work

RNG = np.random.default_rng(2)

AXES = [None, (0,), (1,), (-1,), (0, 2), (2, 0, 1), (1, 2), ()]


def data(shape, dtype="float32"):
    if dtype == "bool":
        return RNG.random(shape) < 0.3
    if dtype.startswith(("int", "uint")):
        return RNG.integers(0 if dtype.startswith("u") else -20, 20, size=shape).astype(dtype)
    return RNG.uniform(-2, 2, size=shape).astype(dtype)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
def test_float_reductions_over_any_axes(name):
    x = data((3, 4, 5))
    if name == "prod":
        x = RNG.uniform(0.5, 1.5, size=x.shape).astype("float32")
    cases = [(name, [x], {"axis": a, "keepdims": kd}) for a in AXES for kd in (False, True)]
    cases.append((name, [data((70, 3))], {"axis": (0,)}))  # a longer accumulation
    check_ops(cases, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float64", "bool"])
def test_reductions_of_other_dtypes(dtype):
    x = data((4, 6), dtype)
    names = ["sum", "max", "min", "prod"] if dtype == "bool" else ["sum", "mean", "max", "min"]
    if dtype != "bool":
        x[0, 0] = -7 if dtype.startswith("int") else x[0, 0]  # a negative mean truncates to 0
    cases = [
        (n, [x], {"axis": a, "keepdims": kd})
        for n in names
        for a in (None, (1,), (0,))
        for kd in (0, 1)
    ]
    if dtype != "bool":
        cases.append(("prod", [np.clip(x, -3, 3).astype(dtype)], {"axis": (1,)}))
    check_ops(cases)


def test_float16_sums_accumulate_wider():
    x = RNG.uniform(0, 1, size=(4, 300)).astype("float16")
    check_ops([("sum", [x], {"axis": (1,)}), ("mean", [x], {"axis": (1,)})], rtol=2e-3, atol=1e-2)


def test_reductions_on_c_target():
    x = data((3, 4, 5))
    cases = [("sum", [x], {"axis": (1,), "keepdims": True}), ("mean", [x], {"axis": None})]
    cases += [("max", [x], {"axis": (0, 2)}), ("argmin", [x], {"axis": 1, "keepdims": True})]
    check_ops(cases, target="c", rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_reductions_with_ties_keepdims_and_last_index(name):
    x = RNG.integers(0, 3, size=(4, 5, 6)).astype("float32")  # many ties
    cases = [
        (name, [x], {"axis": a, "keepdims": kd, "select_last_index": last})
        for a in (0, 1, -1)
        for kd in (False, True)
        for last in (False, True)
    ]
    xi = RNG.integers(-3, 3, size=(7, 9)).astype("int32")
    cases += [(name, [xi], {"axis": 1, "select_last_index": last}) for last in (0, 1)]
    u = np.array([[3, 255, 255, 0]], "uint8")
    cases += [(name, [u], {"axis": 1, "select_last_index": last}) for last in (0, 1)]
    check_ops(cases)


def test_arg_reductions_of_infinities_and_nan():
    x = np.array([[-np.inf, -np.inf], [np.inf, np.inf], [1.0, np.nan], [np.nan, np.nan]], "float32")
    cases = [
        (n, [x], {"axis": 1, "select_last_index": last})
        for n in ("argmax", "argmin")
        for last in (0, 1)
    ]
    check_ops(cases)


def test_cumsum():
    x = data((3, 7))
    xi = data((5, 4), "int32")
    cases = [
        ("cumsum", [x], {"axis": ax, "exclusive": ex, "reverse": rev})
        for ax in (0, 1, -1)
        for ex in (False, True)
        for rev in (False, True)
    ]
    cases.append(("cumsum", [xi], {"axis": 0, "exclusive": True}))
    check_ops(cases, rtol=1e-5, atol=1e-5)


def test_cumprod():
    # ONNX CumProd: exclusive starts from 1, reverse runs from the end
    x = data((3, 7))
    xi = data((5, 4), "int32")
    cases = [
        ("cumprod", [x], {"axis": ax, "exclusive": ex, "reverse": rev})
        for ax in (0, -1)
        for ex in (False, True)
        for rev in (False, True)
    ]
    cases.append(("cumprod", [xi], {"axis": 1, "exclusive": True, "reverse": True}))
    check_ops(cases, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
def test_running_sums_are_log_step_scans(name):
    # O(n log n) along the axis: 1000 elements take ceil(log2 1000) + 1 = 11 passes, where the
    # masked reduction they replaced read the whole axis for every element (n^2 = 10^6)
    n, rows = 1000, 2
    work = loop_work(name, [data((rows, n))], {"axis": 1, "exclusive": True})
    assert work <= rows * n * (math.ceil(math.log2(n)) + 1)


def test_running_sums_over_long_axes_match_numpy():
    xi = RNG.integers(-3, 4, size=(2, 300)).astype("int64")
    signs = RNG.choice([-1, 1], size=(300, 2)).astype("int32")  # products stay exact
    x = RNG.uniform(0.5, 1.5, size=(2, 37, 3)).astype("float32")
    cases = [
        ("cumsum", [xi], {"axis": 1, "reverse": True, "exclusive": True}),
        ("cumsum", [xi], {"axis": 1}),
        ("cumprod", [signs], {"axis": 0, "exclusive": True}),
        ("cumprod", [x], {"axis": 1, "reverse": True}),
    ]
    check_ops(cases, rtol=1e-5, atol=1e-5)


def test_topk():
    x = RNG.permutation(40).reshape(5, 8).astype("float32")
    ties = RNG.integers(0, 3, size=(3, 9)).astype("int32")
    cases = [
        ("topk", [x], {"k": 3}),
        ("topk", [x], {"k": 2, "axis": 0, "largest": False}),
        ("topk", [x], {"k": 8, "axis": 1}),
        ("topk", [x], {"k": 0}),
        ("topk", [ties], {"k": 4}),
        ("topk", [ties], {"k": 5, "largest": False}),
    ]
    check_ops(cases)
    check_ops(cases[:1], target="c")


def test_topk_on_long_axes_is_a_network_not_a_rank_count():
    # 1000 elements: O(n log^2 k) compare-exchanges; counting ranks read the axis per element
    n, rows = 1000, 2
    assert loop_work("topk", [data((rows, n))], {"k": 5}) <= rows * n * 12


def test_topk_on_long_axes_matches_numpy():
    x = RNG.standard_normal((2, 300)).astype("float32")
    x[0, 7], x[0, 100], x[1, 3] = np.nan, np.nan, np.inf  # NaN after every number
    ties = RNG.integers(0, 4, size=(130, 3)).astype("int32")  # stable: lower index first
    cases = [
        ("topk", [x], {"k": 5}),  # a network
        ("topk", [x], {"k": 300, "largest": False}),  # k near n: counting ranks is less work
        ("topk", [ties], {"k": 9, "axis": 0, "largest": False}),
    ]
    check_ops(cases)


def test_tags():
    x = te.placeholder((4, 8), name="x")
    assert get_op("sum").rules["compute"](x, axis=(1,)).op.tag == "reduce"
    mean = get_op("mean").rules["compute"](x, axis=(1,))
    assert mean.op.tag == "elemwise" and mean.op.input_tensors[0].op.tag == "reduce"
    assert str(get_op("argmax").rules["compute"](x, axis=1).dtype) == "int64"


def test_bad_axes_are_value_errors():
    x = te.placeholder((4, 8), name="x")
    with pytest.raises(ValueError, match="bad reduction axes"):
        reduce.reduce("sum", x, axis=(2,))
    with pytest.raises(ValueError, match="unknown reduction"):
        reduce.reduce("median", x)


def test_einsum():
    a, b = data((3, 4)), data((4, 5))
    batch, vec = data((2, 3, 4)), data((4,))
    sq = data((4, 4))
    cases = [
        ("einsum", [a, b], {"equation": "ij,jk->ik"}),
        ("einsum", [a, b], {"equation": "ij,jk"}),  # implicit output
        ("einsum", [a], {"equation": "ij->ji"}),
        ("einsum", [sq], {"equation": "ii->i"}),  # diagonal
        ("einsum", [sq], {"equation": "ii"}),  # trace
        ("einsum", [batch, vec], {"equation": "...j,j->..."}),
        ("einsum", [batch, data((2, 4, 3))], {"equation": "bij,bjk->bik"}),
        ("einsum", [data((2, 1, 4)), data((3, 4))], {"equation": "...j,...j->..."}),  # broadcast
        ("einsum", [a, data((5,))], {"equation": "ij,k->ijk"}),  # outer product
        ("einsum", [data((3, 4), "int32"), data((4,), "int32")], {"equation": "ij,j->i"}),
    ]
    check_ops(cases, rtol=1e-5, atol=1e-5)


def test_reduction_with_fused_injective_producers():
    """mean(exp(transpose(x))) scheduled as the graph build does a reduce group."""
    import tessera
    from tessera.topi import elemwise, generic, transform

    x = te.placeholder((4, 6, 5), name="x")
    y = reduce.reduce("mean", elemwise.unary("exp", transform.transpose(x, (2, 0, 1))), (1, 2))
    s = generic.schedule_reduce([y])
    f = tessera.build(s, [x, y], target="llvm")
    xv, out = data((4, 6, 5)), np.zeros(5, "float32")
    f(xv, out)
    np.testing.assert_allclose(out, np.exp(xv.transpose(2, 0, 1)).mean(axis=(1, 2)), rtol=1e-5)


def test_whole_tensor_reductions_are_factored_into_vector_partials():
    """A reduction to a few elements (DynamicQuantizeLinear's min and max of a whole tensor)
    takes the rfactor sketch on a CPU: vector partials, then the totals; the innermost axis
    need not be a multiple of the vectors, and infinities and every dtype reduce exactly."""
    import tessera
    from tessera import tir
    from tessera.tir.stmt_functor import collect
    from tessera.topi.testing import build_cases

    x = data((3, 24, 37))
    x[1, 5, 36], x[2, 0, 0] = np.inf, -np.inf
    cases = [(n, [x], {"axis": None}) for n in ("min", "max")]
    cases.append(("sum", [data((3, 24, 37))], {"axis": None}))
    cases += [(n, [data((2, 5, 130))], {"axis": None}) for n in ("min", "max")]
    cases += [(n, [data((4, 96))], {"axis": (1,), "keepdims": True}) for n in ("min", "max")]
    cases += [(n, [data((6, 100), d)], {"axis": None}) for n in ("min", "max") for d in
              ("int8", "uint8", "int32")]  # fmt: skip
    check_ops(cases, rtol=1e-5, atol=1e-4)
    _, funcs = build_cases(cases[:1], tessera.Target("llvm"))
    loops = collect(funcs["case0"].body, lambda n: isinstance(n, tir.For))
    assert any(f.kind == tir.ForKind.VECTORIZED for f in loops)
