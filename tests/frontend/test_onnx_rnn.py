"""RNN, GRU and LSTM (unrolled) against ONNX Runtime: directions, sequence lengths, layouts,
initial states, peepholes, clip, linear_before_reset and custom activations."""

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort

R = np.random.default_rng(7)
SEQ, BATCH, IN, HID = 4, 3, 5, 6
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _inputs(kind, ndir, layout=0, lens=None, bias=True, init=True, peep=False):
    g = GATES[kind]
    x_shape = (BATCH, SEQ, IN) if layout else (SEQ, BATCH, IN)
    s_shape = (BATCH, ndir, HID) if layout else (ndir, BATCH, HID)
    names = ["x", "w", "r", "b", "lens", "h0", "c0", "p"]
    values = [
        R.standard_normal(x_shape).astype(np.float32),
        (R.standard_normal((ndir, g * HID, IN)) * 0.5).astype(np.float32),
        (R.standard_normal((ndir, g * HID, HID)) * 0.5).astype(np.float32),
        R.standard_normal((ndir, 2 * g * HID)).astype(np.float32) if bias else None,
        None if lens is None else np.array(lens, np.int32),
        R.standard_normal(s_shape).astype(np.float32) if init else None,
        R.standard_normal(s_shape).astype(np.float32) if init and kind == "LSTM" else None,
        R.standard_normal((ndir, 3 * HID)).astype(np.float32) if peep else None,
    ]
    if kind != "LSTM":
        names, values = names[:6], values[:6]
    while values[-1] is None:
        names, values = names[:-1], values[:-1]
    return {(n if v is not None else ""): v for n, v in zip(names, values, strict=True)}


def _check(kind, attrs, inputs, n_outputs, rtol=1e-4, atol=1e-5):
    names = list(inputs)
    feeds = {k: v for k, v in inputs.items() if k}
    outs = ["y", "yh", "yc"][:n_outputs]
    node = helper.make_node(kind, names, outs, hidden_size=HID, **attrs)
    model = make_model([node], feeds, outs, opset=14)
    expected = run_ort(model, feeds)
    mod, params = from_onnx(model)
    from tessera.graph import run_function

    for g, e in zip(run_function(mod["main"], feeds, params), expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_with_sequence_lengths(kind, direction):
    ndir = 2 if direction == "bidirectional" else 1
    inputs = _inputs(kind, ndir, lens=[4, 2, 1])
    _check(kind, {"direction": direction}, inputs, 3 if kind == "LSTM" else 2)


@pytest.mark.parametrize("kind", ["RNN", "GRU", "LSTM"])
def test_batch_first_layout(kind):
    """layout=1 (ORT does not run it) against ORT's layout=0 on the transposed tensors."""
    n_out = 3 if kind == "LSTM" else 2
    inputs = _inputs(kind, 2, layout=1)
    outs = ["y", "yh", "yc"][:n_out]
    attrs = {"hidden_size": HID, "direction": "bidirectional"}
    feeds = {k: v for k, v in inputs.items() if k}
    node = helper.make_node(kind, list(inputs), outs, layout=1, **attrs)
    mod, params = from_onnx(make_model([node], feeds, outs, opset=14))
    from tessera.graph import run_function

    got = run_function(mod["main"], feeds, params)
    seq_first = {k: np.swapaxes(v, 0, 1) if k in ("x", "h0", "c0") else v
                 for k, v in feeds.items()}  # fmt: skip
    node = helper.make_node(kind, list(inputs), outs, **attrs)
    expected = run_ort(make_model([node], seq_first, outs, opset=14), seq_first)
    np.testing.assert_allclose(got[0], np.transpose(expected[0], (2, 0, 1, 3)), rtol=1e-4,
                               atol=1e-5)  # fmt: skip
    for g, e in zip(got[1:], expected[1:], strict=True):
        np.testing.assert_allclose(g, np.swapaxes(e, 0, 1), rtol=1e-4, atol=1e-5)


def test_gru_linear_before_reset_and_clip():
    _check("GRU", {"linear_before_reset": 1, "clip": 0.7}, _inputs("GRU", 1), 2)


def test_lstm_peepholes_and_custom_activations():
    attrs = {"activations": ["HardSigmoid", "LeakyRelu", "Tanh"],
             "activation_alpha": [0.3, 0.05], "activation_beta": [0.4]}  # fmt: skip
    _check("LSTM", attrs, _inputs("LSTM", 1, peep=True), 3)


def test_rnn_without_bias_or_initial_state_only_y():
    _check("RNN", {"activations": ["Relu"]}, _inputs("RNN", 1, bias=False, init=False), 1)


def test_lstm_compiled_matches_ort():
    inputs = _inputs("LSTM", 2, lens=[3, 4, 2], peep=True)
    feeds = {k: v for k, v in inputs.items() if k}
    node = helper.make_node("LSTM", list(inputs), ["y", "yh", "yc"], hidden_size=HID,
                            direction="bidirectional")  # fmt: skip
    model = make_model([node], feeds, ["y", "yh", "yc"], opset=14)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    for k, e in enumerate(run_ort(model, feeds)):
        np.testing.assert_allclose(m.get_output(k).numpy(), e, rtol=1e-4, atol=1e-5)


def test_bad_direction_is_a_clear_error():
    inputs = _inputs("RNN", 1)
    node = helper.make_node("RNN", list(inputs), ["y"], hidden_size=HID, direction="sideways")
    with pytest.raises(ValueError, match="unknown direction 'sideways'"):
        from_onnx(make_model([node], {k: v for k, v in inputs.items() if k}, ["y"], opset=14))
