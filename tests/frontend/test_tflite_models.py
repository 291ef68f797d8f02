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
    buffer = _model("face_landmark/face_landmark_with_attention")
    with pytest.raises(UnsupportedOpError, match="CUSTOM:TransformTensorBilinear") as err:
        from_tflite(buffer)
    assert "CUSTOM:Landmarks2TransformMatrix" in str(err.value)  # all of them, at once


@pytest.mark.slow
def test_selfie_segmentation_with_mediapipe_transposed_convs():
    # MediaPipe's custom Convolution2DTransposeBias (checked against a numpy reference of
    # MediaPipe's kernel in test_tflite.py): the interpreter's reference kernels lack it, its
    # XNNPACK delegate has it. The compiled model against both XNNPACK and tessera's graph
    # interpreter.
    import tessera
    from tessera.runtime import GraphModule

    buffer = _model("selfie_segmentation/selfie_segmentation")
    mod, params = from_tflite(buffer)
    func = mod["main"]
    x = np.random.default_rng(0).uniform(0, 1, func.params[0].type.shape).astype(np.float32)
    (interpreted,) = run_function(func, [x], params)
    (expected,) = _xnnpack(buffer, x)
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"](tessera.cpu(0)))
    m.set_input(0, x)
    m.run()
    got = m.get_output(0).numpy()
    assert got.shape == expected.shape == (1, 256, 256, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, interpreted, rtol=1e-4, atol=1e-6)


# -- int8 streaming wake-word models (pymicro-wakeword) -----------------------------------------


def _wakeword(name: str) -> bytes:
    try:
        dist = importlib.metadata.distribution("pymicro-wakeword")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the pymicro-wakeword wheel is not installed (scripts/setup.d/22-tflite.sh)")
    path = dist.locate_file(f"pymicro_wakeword/models/{name}.tflite")
    if not path.exists():
        pytest.skip(f"this pymicro-wakeword wheel has no {name}.tflite")
    return path.read_bytes()


def check_streaming(name: str, frames: int, compiled: bool = False):
    """Feed `frames` random feature frames through the interpreter (which keeps the model's
    variables) and through tessera (the state outputs fed back as inputs); every int8 tensor the
    model computes must agree bit for bit."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from tessera.frontend.tflite import initial_state
    from tessera.frontend.tflite_reader import read_model

    buffer = _wakeword(name)
    model = read_model(buffer)
    made = {o for op in model.operators for o in op.outputs}
    watch = [t.name for t in model.tensors if t.index in made and t.dtype in ("int8", "uint8")]
    inside, inside_params = from_tflite(buffer, outputs=watch)
    mod, params = from_tflite(buffer)
    func = mod["main"]
    state_names = [o.name.removesuffix("_next") for o in func.outputs[1:]]
    it = Interpreter(model_content=buffer, experimental_preserve_all_tensors=True,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_REF)  # fmt: skip
    it.allocate_tensors()
    index = {d["name"]: d["index"] for d in it.get_tensor_details()}
    run = _compiled_runner(mod, params) if compiled else None
    rng, state = np.random.default_rng(0), initial_state(buffer)
    assert sorted(state) == sorted(state_names)
    for _ in range(frames):
        x = rng.integers(-128, 128, func.params[0].type.shape).astype(np.int8)
        it.set_tensor(it.get_input_details()[0]["index"], x)
        it.invoke()
        feeds = {func.params[0].name: x, **state}
        seen = run_function(inside["main"], feeds, inside_params)[: len(watch)]  # then the state
        for tensor, got in zip(watch, seen, strict=True):
            np.testing.assert_array_equal(got, it.get_tensor(index[tensor]), err_msg=tensor)
        outs = run(feeds) if run else run_function(func, feeds, params)
        expected = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_array_equal(outs[0], expected)
        state = dict(zip(state_names, outs[1:], strict=True))


def _compiled_runner(mod, params):
    import tessera

    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    n_out = len(mod["main"].outputs)

    def run(feeds):
        for k, v in feeds.items():
            m.set_input(k, v)
        m.run()
        return [m.get_output(i).numpy() for i in range(n_out)]

    return run


def test_wake_word_streaming_is_bit_exact():
    check_streaming("hey_jarvis", frames=4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["alexa", "hey_jarvis", "hey_mycroft", "okay_nabu"])
def test_wake_word_models_stream_bit_exact_compiled(name):
    check_streaming(name, frames=12, compiled=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["face_detection/face_detection_short_range",
                                  "palm_detection/palm_detection_lite"])  # fmt: skip
def test_shipped_models_compiled(name):
    buffer = _model(name)
    mod, params = from_tflite(buffer)
    func = mod["main"]
    x = np.random.default_rng(0).uniform(0, 1, func.params[0].type.shape).astype(np.float32)
    got = _compiled_runner(mod, params)({func.params[0].name: x})
    for g, e in zip(got, run_interpreter(buffer, [x]), strict=True):
        assert float(np.abs(g - e).max()) <= 1e-4 * float(np.abs(e).max())
