"""bitcast: the compiled kernel keeps every bit (NaN payloads, negative zero, sign bits)."""

import numpy as np
import pytest

from tessera.graph.ir import TensorType
from tessera.graph.op import get_op
from tessera.topi.testing import build_cases


def test_bitcast_keeps_bits():
    f = np.array([1.5, -0.0, np.inf, np.nan, -3.25e-39], np.float32)
    cases = [
        ("bitcast", [f], {"dtype": "int32"}),
        ("bitcast", [f.view(np.uint32)], {"dtype": "float32"}),
        ("bitcast", [np.array([-1, 2**62, -(2**40)], np.int64)], {"dtype": "float64"}),
        ("bitcast", [np.array([-128, -1, 5], np.int8)], {"dtype": "uint8"}),
        (
            "bitcast",
            [
                np.array([True, False]),
            ],
            {"dtype": "uint8"},
        ),
    ]
    mod, _ = build_cases(cases)
    for k, (_, (x,), attrs) in enumerate(cases):
        out = np.empty(x.shape, attrs["dtype"])
        mod[f"case{k}"](x, out)
        expected = x.astype(np.uint8) if x.dtype == bool else x
        assert out.tobytes() == expected.tobytes(), (k, out, x)


def test_width_mismatch_is_a_type_error():
    with pytest.raises(TypeError, match="differ in bit width"):
        get_op("bitcast").infer_type([TensorType((2,), "float32")], {"dtype": "int64"})
