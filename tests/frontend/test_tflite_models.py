"""The .tflite models shipped inside the mediapipe wheel (installed without its dependencies by
scripts/setup.d/22-tflite.sh) against the TFLite interpreter. The two face detectors run in the
default suite (one of them stores its weights sparse: DENSIFY); the rest under -m slow.

Float tolerance: the largest difference, relative to the output's largest magnitude, is 1e-4,
or twice what separates the interpreter's own XNNPACK kernels from its reference kernels on the
same input, whichever is larger (deep float32 networks accumulate rounding in any order)."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest

pytest.importorskip("tflite")
pytest.importorskip("ai_edge_litert")

from tessera.frontend.tflite import UnsupportedOpError, from_tflite  # noqa: E402
from tessera.frontend.tflite_testing import run_interpreter  # noqa: E402
from tessera.graph import run_function  # noqa: E402


def _model(name: str) -> bytes:
    try:
        dist = importlib.metadata.distribution("mediapipe")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the mediapipe wheel is not installed (scripts/setup.d/22-tflite.sh)")
    path = dist.locate_file(f"mediapipe/modules/{name}.tflite")
    if not path.exists():
        pytest.skip(f"this mediapipe wheel has no {name}.tflite")
    return path.read_bytes()


def _xnnpack(buffer, x):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=buffer)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def check_shipped(name: str):
    buffer = _model(name)
    mod, params = from_tflite(buffer)
    func = mod["main"]
    x = np.random.default_rng(0).uniform(0, 1, func.params[0].type.shape).astype(np.float32)
    got = run_function(func, [x], params)
    expected = run_interpreter(buffer, [x])
    other = _xnnpack(buffer, x)
    assert len(got) == len(expected)
    for g, e, o in zip(got, expected, other, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        scale = float(np.abs(e).max()) or 1.0
        spread = float(np.abs(o - e).max()) / scale
        err = float(np.abs(g - e).max()) / scale
        assert err <= max(1e-4, 2 * spread), f"{err:.2e} (XNNPACK vs reference: {spread:.2e})"


@pytest.mark.parametrize("name", ["face_detection/face_detection_short_range",
                                  "face_detection/face_detection_full_range_sparse"])  # fmt: skip
def test_face_detectors(name):
    check_shipped(name)


SLOW = [
    "face_landmark/face_landmark",
    "hand_landmark/hand_landmark_full",
    "hand_landmark/hand_landmark_lite",
    "holistic_landmark/hand_recrop",
    "iris_landmark/iris_landmark",
    "palm_detection/palm_detection_full",
    "palm_detection/palm_detection_lite",
    "pose_detection/pose_detection",
    "pose_landmark/pose_landmark_full",
]


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_shipped_models(name):
    check_shipped(name)


def test_models_with_mediapipe_custom_ops_name_them():
    buffer = _model("selfie_segmentation/selfie_segmentation")
    with pytest.raises(UnsupportedOpError, match="CUSTOM:Convolution2DTransposeBias"):
        from_tflite(buffer)
