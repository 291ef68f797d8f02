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
