"""Convolutional models with symbolic dims, each compiled once and run at five sizes against
ONNX Runtime: a CRNN-style recognizer over a dynamic width (conv, batch-norm, max-pool over
the width, Transpose and Reshape (0, 0, -1) of the columns, MatMul, a 1-D conv over the
sequence, Softmax) and a conv detector over a dynamic batch (strided conv, residual block,
max-pool, 1x1 head, Reshape (0, -1, 9), Split, Sigmoid)."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.models_dynamic import detector, ocr_recognizer
from tessera.runtime import GraphModule

WIDTHS = (32, 100, 64, 257, 512)
BATCHES = (1, 2, 3, 5, 8)


def _image(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("target", ["llvm", pytest.param("c", marks=pytest.mark.slow)])
def test_ocr_recognizer_any_width_matches_ort(target, ort_of):
    model = ocr_recognizer()
    mod, params = from_onnx(model, {"image": (1, 1, 32, ("width", 8, 2048))})
    lib = tessera.build(mod, target=target, params=params)
    m, ort = GraphModule(lib["default"]()), ort_of(model)
    for width in WIDTHS:
        (probs,) = ort.check(m, {"image": _image((1, 1, 32, width), width)})
        assert probs.shape == (width // 4, 1, 37)
    if target == "llvm":  # the blocked convs (Winograd over floordiv(width, 2)) and pools
        kernels = " ".join(c.kernel for c in m.profile(repeat=1))
        assert "winograd_nchwc" in kernels and "max_pool2d_nchwc" in kernels, kernels
        assert "nn_conv2d_add" not in kernels, kernels


def test_ocr_width_below_what_the_convs_need_is_a_clear_error():
    with pytest.raises(ValueError, match=r"c2_c.*larger than padded input.*width >= 1"):
        from_onnx(ocr_recognizer())  # width 1 pools to 0 columns, too few for a 3x3 conv


@pytest.mark.parametrize("target", ["llvm", pytest.param("c", marks=pytest.mark.slow)])
def test_detector_any_batch_matches_ort(target, ort_of):
    model = detector()
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    m, ort = GraphModule(lib["default"]()), ort_of(model)
    for batch in BATCHES:
        boxes, scores = ort.check(m, {"images": _image((batch, 3, 64, 64), batch)})
        assert boxes.shape == (batch, 256, 4) and scores.shape == (batch, 256, 5)
    if target == "llvm":  # the blocked convs and Winograd over the symbolic batch
        kernels = " ".join(c.kernel for c in m.profile(repeat=1))
        assert "winograd_nchwc" in kernels and "max_pool2d_nchwc" in kernels, kernels
        assert "nn_conv2d_add" not in kernels, kernels


def test_same_auto_pad_with_stride_over_a_symbolic_dim_is_refused():
    from onnx import TensorProto, helper

    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER", strides=[2, 2])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("w", TensorProto.FLOAT, [2, 2, 3, 3], np.ones(36))],
    )
    with pytest.raises(ValueError, match="SAME_UPPER with stride 2 over the symbolic dim w"):
        from_onnx(helper.make_model(graph))
