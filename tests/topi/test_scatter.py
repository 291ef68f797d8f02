"""scatter_elements / scatter_nd: compute rules against the numpy references (and the references
against ONNX's own reference implementation)."""

import numpy as np
import pytest

from tessera.graph.op import get_op
from tessera.topi.testing import check_ops

RNG = np.random.default_rng(0)
REDUCTIONS = ["none", "add", "mul", "max", "min"]


def _elements_case(reduction, axis, dtype="float32"):
    data = RNG.standard_normal((4, 5, 3)).astype(dtype)
    idx = RNG.integers(-data.shape[axis], data.shape[axis], (3, 4, 2))
    shape = list(idx.shape)
    shape[axis] = 6  # more updates than positions along the axis: duplicates
    idx = RNG.integers(-data.shape[axis], data.shape[axis], shape).astype("int64")
    upd = RNG.standard_normal(shape).astype(dtype)
    return ("scatter_elements", [data, idx, upd], {"axis": axis, "reduction": reduction})


def _nd_case(reduction, q, batch=(3, 2)):
    data = RNG.standard_normal((4, 3, 5)).astype("float32")
    idx = np.stack([RNG.integers(-n, n, batch) for n in data.shape[:q]], axis=-1).astype("int64")
    upd = RNG.standard_normal((*batch, *data.shape[q:])).astype("float32")
    return ("scatter_nd", [data, idx, upd], {"reduction": reduction})


def test_scatter_elements_matches_reference():
    cases = [_elements_case(r, axis) for r in REDUCTIONS for axis in (0, 1, -1)]
    cases.append(_elements_case("add", 1, "int32"))
    check_ops(cases)


def test_scatter_nd_matches_reference():
    cases = [_nd_case(r, q) for r in REDUCTIONS for q in (1, 2, 3)]
    cases.append(_nd_case("none", 2, batch=()))
    check_ops(cases)


def test_references_agree_with_onnx():
    from onnx.reference.ops.op_scatter_elements import scatter_elements
    from onnx.reference.ops.op_scatternd import _scatter_nd_impl

    for name, (data, idx, upd), attrs in [_elements_case("add", 1), _elements_case("none", 0)]:
        (got,) = get_op(name).evaluate([data, idx, upd], attrs)
        ref = scatter_elements(data, idx, upd, attrs["axis"], attrs["reduction"])
        np.testing.assert_allclose(got, ref, rtol=1e-6)
    for r in ("none", "mul"):
        name, (data, idx, upd), attrs = _nd_case(r, 2)
        idx = idx % np.array(data.shape[:2])  # ONNX's reference takes non-negative indices
        (got,) = get_op(name).evaluate([data, idx, upd], attrs)
        np.testing.assert_allclose(got, _scatter_nd_impl(data, idx, upd, r), rtol=1e-6)


def test_bad_attributes_are_type_errors():
    from tessera.graph.ir import TensorType

    op = get_op("scatter_elements")
    t, i = TensorType((2, 3), "float32"), TensorType((2, 3), "int64")
    with pytest.raises(TypeError, match="unknown reduction"):
        op.infer_type([t, i, t], {"reduction": "avg"})
    with pytest.raises(TypeError, match="indices must be integers"):
        op.infer_type([t, t, t], {})


def test_scatter_elements_along_long_axes_sorts_its_updates():
    # O(m log^2 m + n log m) along the axis: the gather it replaces reduced all m updates for
    # each of the n positions (n m = 500,000 per row)
    from tessera.topi.testing import loop_work

    data = np.zeros((2, 1000), "float32")
    idx = RNG.integers(0, 1000, (2, 500)).astype("int64")
    work = loop_work("scatter_elements", [data, idx, data[:, :500]], {"axis": 1})
    assert work <= 2 * 50_000


@pytest.mark.parametrize(
    "reduction",
    ["none", "add", *(pytest.param(r, marks=pytest.mark.slow) for r in ("mul", "max", "min"))],
)
def test_sorted_scatter_elements_matches_reference(reduction):
    # the sorted form on a short axis (the op picks it only for long ones): duplicates,
    # negative indices, indices shorter than the data on the other axis
    import tessera
    from tessera import te
    from tessera.topi import reduce, scatter

    data = RNG.standard_normal((3, 9)).astype("float32")
    idx = RNG.integers(-9, 9, (2, 7)).astype("int64")
    idx[0, :3] = 4
    upd = RNG.uniform(0.5, 1.5, (2, 7)).astype("float32")
    args = [te.placeholder(a.shape, str(a.dtype), name=f"in{k}") for k, a in
            enumerate((data, idx, upd))]  # fmt: skip
    out = scatter._scatter_elements_sorted(*args, 1, reduction)
    fn = tessera.build(reduce.schedule_stages([out]), [*args, out], target="llvm")
    got = np.empty_like(data)
    fn(data, idx, upd, got)
    (expected,) = get_op("scatter_elements").evaluate(
        [data, idx, upd], {"axis": 1, "reduction": reduction}
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("reduction", ["none", "add", "max"])
def test_scatter_elements_along_long_axes_matches_reference(reduction):
    data = RNG.standard_normal((3, 300)).astype("float32")
    idx = RNG.integers(-300, 300, (2, 200)).astype("int64")  # duplicates, negative, a short row
    idx[0, :50] = 7  # one target updated 50 times: the last wins, or all fold in order
    upd = RNG.standard_normal((2, 200)).astype("float32")
    check_ops([("scatter_elements", [data, idx, upd], {"axis": 1, "reduction": reduction})],
              rtol=1e-5, atol=1e-5)  # fmt: skip


def test_scatter_nd_with_many_updates_sorts_them():
    # O(m log^2 m + n log m + m log m x slice): the gather it replaces reduced all m = 300
    # updates for each of the n = 500 positions' 4 elements (600,000 steps)
    from tessera.topi.testing import loop_work

    data = np.zeros((500, 4), "float32")
    idx = RNG.integers(0, 500, (300, 1)).astype("int64")
    work = loop_work("scatter_nd", [data, idx, np.zeros((300, 4), "float32")], {})
    assert work <= 100_000


def _sorted_nd(data, idx, upd, reduction):
    import tessera
    from tessera import te
    from tessera.topi import reduce, scatter

    args = [te.placeholder(a.shape, str(a.dtype), name=f"in{k}") for k, a in
            enumerate((data, idx, upd))]  # fmt: skip
    out = scatter._scatter_nd_sorted(*args, reduction)
    fn = tessera.build(reduce.schedule_stages([out]), [*args, out], target="llvm")
    got = np.empty_like(data)
    fn(data, idx, upd, got)
    return got


@pytest.mark.parametrize(
    "reduction",
    ["none", "add", *(pytest.param(r, marks=pytest.mark.slow) for r in ("mul", "max", "min"))],
)
@pytest.mark.parametrize(
    "q,batch",
    [(1, (7,)), *(pytest.param(q, b, marks=pytest.mark.slow) for q, b in [(2, (3, 4)), (3, (5,))])],
)
def test_sorted_scatter_nd_matches_reference(reduction, q, batch):
    # the sorted form on small shapes (the op picks it for many updates): duplicates, negative
    # and out-of-order indices, whole slices (q < rank), one element each (q = rank)
    data = RNG.standard_normal((4, 3, 5)).astype("float32")
    idx = np.stack([RNG.integers(-n, n, batch) for n in data.shape[:q]], axis=-1).astype("int64")
    idx.reshape(-1, q)[:3] = idx.reshape(-1, q)[0]  # one target updated three times
    upd = RNG.uniform(0.5, 1.5, (*batch, *data.shape[q:])).astype("float32")
    (expected,) = get_op("scatter_nd").evaluate([data, idx, upd], {"reduction": reduction})
    np.testing.assert_allclose(
        _sorted_nd(data, idx, upd, reduction), expected, rtol=1e-5, atol=1e-6
    )
