"""auto_pad SAME_UPPER / SAME_LOWER where the stride exceeds the kernel: the total pad is then
negative, and ONNX Runtime's Conv crops the input rather than clamping the pad at 0 as the ONNX
reference does. tessera follows ORT (see `_same_pads` in tessera/frontend/onnx_nn.py)."""

import numpy as np
import pytest

from tessera.frontend.testing import check_node

R = np.random.default_rng(0)

# (input spatial shape, kernel, strides): totals from -7 up to positive, 1-D and 2-D
CASES = [
    ((5,), (1,), (7,)),
    ((3,), (1,), (5,)),
    ((4,), (1,), (6,)),
    ((8,), (1,), (9,)),
    ((8,), (1,), (4,)),
    ((7,), (2,), (9,)),
    ((8,), (3,), (4,)),
    ((8,), (2,), (10,)),
    ((6,), (2,), (5,)),
    ((2,), (3,), (5,)),  # stride > kernel > input: a positive total
    ((1,), (1,), (3,)),
    ((5, 4), (1, 2), (7, 6)),
    ((9, 7), (3, 2), (4, 5)),
    ((6, 8), (2, 1), (9, 3)),
    ((2, 3), (4, 3), (5, 6)),
]


def _id(case):
    return (
        "x".join(map(str, case[0]))
        + "_k"
        + "x".join(map(str, case[1]))
        + "_s"
        + "x".join(map(str, case[2]))
    )


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_conv_same_negative_pad(auto_pad, case):
    n, k, s = case
    x = R.standard_normal((2, 3, *n)).astype(np.float32)
    w = R.standard_normal((4, 3, *k)).astype(np.float32)
    b = R.standard_normal(4).astype(np.float32)
    check_node("Conv", {"x": x, "const_w": w, "const_b": b}, {"auto_pad": auto_pad, "strides": s})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("case", CASES[:4] + CASES[-3:], ids=_id)
def test_conv_integer_same_negative_pad(auto_pad, case):
    n, k, s = case
    x = R.integers(0, 256, (1, 2, *n)).astype(np.uint8)
    w = R.integers(0, 256, (3, 2, *k)).astype(np.uint8)
    zp = np.array(7, np.uint8)
    inputs = {"x": x, "const_w": w, "const_xzp": zp}
    check_node("ConvInteger", inputs, {"auto_pad": auto_pad, "strides": s})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("case", CASES[:4] + CASES[-3:], ids=_id)
def test_qlinear_conv_same_negative_pad(auto_pad, case):
    n, k, s = case
    inputs = {
        "x": R.integers(0, 256, (1, 2, *n)).astype(np.uint8),
        "const_xs": np.array(0.05, np.float32),
        "const_xzp": np.array(120, np.uint8),
        "const_w": R.integers(0, 256, (3, 2, *k)).astype(np.uint8),
        "const_ws": np.array(0.02, np.float32),
        "const_wzp": np.array(130, np.uint8),
        "const_ys": np.array(0.1, np.float32),
        "const_yzp": np.array(128, np.uint8),
    }
    check_node("QLinearConv", inputs, {"auto_pad": auto_pad, "strides": s})


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_negative_pad_compiled(auto_pad):
    # the crop through the whole pipeline, a native build, against ORT (totals -4 and -6)
    from onnx import helper

    import tessera
    from tessera.frontend import from_onnx
    from tessera.frontend.testing import make_model, run_ort
    from tessera.runtime import GraphModule

    x = R.standard_normal((1, 3, 5, 17)).astype(np.float32)
    w = R.standard_normal((2, 3, 1, 2)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "const_w"], ["y0"], auto_pad=auto_pad, strides=[7, 9])
    model = make_model([node], {"x": x}, ["y0"], {"const_w": w}, 17)
    (expected,) = run_ort(model, {"x": x})
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = GraphModule(lib["default"]())
    (got,) = m.run_with({"x": x})
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
