"""nn.max_pool_indices: compute rule against its numpy reference, the reference against ORT."""

import numpy as np
import pytest
from onnx import helper

from tessera.frontend.testing import make_model, run_ort
from tessera.graph.op import get_op
from tessera.topi.testing import check_ops

R = np.random.default_rng(5)

CASES = [  # pool_size, strides, padding, dilation, ceil_mode, storage_order, input shape
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 0, 0, (2, 3, 6, 5)),
    ((3, 3), (2, 1), (1, 1, 1, 1), (1, 1), 0, 1, (1, 2, 5, 7)),
    ((2, 2), (2, 2), (0, 0, 0, 0), (2, 1), 1, 0, (1, 1, 7, 7)),
    ((3,), (2,), (1, 0), (1,), 1, 0, (2, 2, 8)),
    ((2, 2, 2), (1, 2, 2), (0, 0, 0, 1, 1, 1), (1, 1, 1), 0, 0, (1, 2, 3, 4, 4)),
]


def _attrs(case):
    k, s, p, d, ceil, order, _ = case
    return {"pool_size": k, "strides": s, "padding": p, "dilation": d, "ceil_mode": ceil,
            "storage_order": order}  # fmt: skip


def test_compute_matches_reference():
    cases = [("nn.max_pool_indices", [R.standard_normal(c[-1]).astype("float32")], _attrs(c))
             for c in CASES]  # fmt: skip
    check_ops(cases)


@pytest.mark.parametrize("case", CASES[:3])
def test_reference_matches_ort(case):
    k, s, p, d, ceil, order, shape = case
    x = R.standard_normal(shape).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=list(k), strides=list(s),
                            pads=list(p), dilations=list(d), ceil_mode=ceil,
                            storage_order=order)  # fmt: skip
    expected = run_ort(make_model([node], {"x": x}, ["y", "i"], opset=12), {"x": x})[1]
    (got,) = get_op("nn.max_pool_indices").evaluate([x], _attrs(case))
    np.testing.assert_array_equal(got, expected)
