"""image.grid_sample: the compute rule against the numpy reference, the reference against ONNX
Runtime, for every mode, padding mode, align_corners, 1-D to 3-D."""

import numpy as np
import pytest
from onnx import helper

from tessera.frontend.testing import make_model, run_ort
from tessera.graph.op import get_op
from tessera.topi.testing import check_ops

R = np.random.default_rng(11)
MODES = ["nearest", "linear", "cubic"]


def _case(nd, mode, padding, align, dtype="float32"):
    x = R.standard_normal((2, 3, *[4, 5, 3][:nd])).astype(dtype)
    grid = (R.uniform(-1.6, 1.6, (2, *[3, 2, 2][:nd], nd))).astype(dtype)
    grid.flat[0] = 0.0  # a point exactly at a pixel boundary (nearest ties)
    attrs = {"mode": mode, "padding_mode": padding, "align_corners": align}
    return ("image.grid_sample", [x, grid], attrs)


def test_2d_modes_match_reference():
    combos = [("nearest", "zeros", 0), ("nearest", "reflection", 1), ("linear", "border", 0),
              ("linear", "reflection", 0), ("cubic", "zeros", 1), ("cubic", "reflection", 0),
              ("cubic", "border", 1)]  # fmt: skip
    check_ops([_case(2, m, p, a) for m, p, a in combos], rtol=1e-4, atol=1e-5)


def test_1d_3d_and_float64_match_reference():
    cases = [_case(1, m, "reflection", 0) for m in MODES]
    cases += [_case(3, "nearest", "border", 1), _case(3, "linear", "zeros", 0)]
    cases.append(_case(2, "cubic", "border", 0, "float64"))
    check_ops(cases, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,padding,align", [
    ("linear", "zeros", 0), ("nearest", "border", 1), ("cubic", "reflection", 0),
    ("linear", "reflection", 1), ("cubic", "zeros", 1), ("cubic", "border", 0),
    ("cubic", "border", 1),
])  # fmt: skip
def test_reference_matches_ort(mode, padding, align):
    _, (x, grid), attrs = _case(2, mode, padding, align)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], **attrs)
    expected = run_ort(make_model([node], {"x": x, "g": grid}, ["y"], opset=20),
                       {"x": x, "g": grid})[0]  # fmt: skip
    (got,) = get_op("image.grid_sample").evaluate([x, grid], attrs)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_bad_mode_is_a_type_error():
    from tessera.graph.ir import TensorType

    x, g = TensorType((1, 1, 4, 4), "float32"), TensorType((1, 2, 2, 2), "float32")
    with pytest.raises(TypeError, match="unknown mode 'bilinear'"):
        get_op("image.grid_sample").infer_type([x, g], {"mode": "bilinear"})
