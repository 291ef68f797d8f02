"""Recurrent layers with symbolic dims, compiled once and run at several sizes against ONNX
Runtime: over a symbolic batch (the sequence length sized: the steps unrolled), and over a
symbolic sequence length and batch (the steps one nn.recurrence kernel, Note [recurrence
kernel]): RNN, GRU and LSTM, every direction, with sequence_lens and initial states."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import tessera
from tessera.frontend import from_onnx
from tessera.runtime import GraphModule

HIDDEN, FEATURES = 8, 5


def _model(kind: str, seq):
    gates = {"LSTM": 4, "GRU": 3}[kind]
    rng = np.random.default_rng(0)
    ndir = 2

    def w(*shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.4).astype(np.float32))

    inits = [w(ndir, gates * HIDDEN, FEATURES), w(ndir, gates * HIDDEN, HIDDEN)]
    inits += [w(ndir, 2 * gates * HIDDEN)]
    for t, name in zip(inits, ("W", "R", "B"), strict=True):
        t.name = name
    node = helper.make_node(
        kind, ["x", "W", "R", "B"], ["y", "h"], hidden_size=HIDDEN, direction="bidirectional"
    )
    graph = helper.make_graph(
        [node],
        "rnn",
        [helper.make_tensor_value_info("x", TP.FLOAT, [seq, "batch", FEATURES])],
        [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in ("y", "h")],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_recurrent_layer_over_a_symbolic_batch_matches_ort(kind, ort_of):
    model = _model(kind, 6)
    mod, params = from_onnx(model)
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    ort = ort_of(model)
    for batch in (1, 3, 4):
        x = np.random.default_rng(batch).standard_normal((6, batch, FEATURES)).astype(np.float32)
        y, h = ort.check(m, {"x": x})
        assert y.shape == (6, 2, batch, HIDDEN) and h.shape == (2, batch, HIDDEN)


GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _seq_model(kind, direction, *, lens=True, hidden=HIDDEN, peepholes=False, **attrs):
    """kind over x [seq, batch, FEATURES] (both symbolic), with sequence_lens and initial
    states as inputs when `lens`, LSTM peepholes P when `peepholes`."""
    ndir = 2 if direction == "bidirectional" else 1
    gates, rng = GATES[kind], np.random.default_rng(1)
    inits = []
    for name, shape in (("W", (ndir, gates * hidden, FEATURES)), ("R", (ndir, gates * hidden,
                        hidden)), ("B", (ndir, 2 * gates * hidden))):  # fmt: skip
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * 0.4).astype("f4"), name))
    names = ["x", "W", "R", "B"] + (["lens", "h0"] + (["c0"] if kind == "LSTM" else []) if lens
                                   else [])  # fmt: skip
    if peepholes:
        p = (rng.standard_normal((ndir, 3 * hidden)) * 0.4).astype("f4")
        inits.append(numpy_helper.from_array(p, "P"))
        names = names + [""] * (7 - len(names)) + ["P"]
    outs = ["y", "h"] + (["c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outs, hidden_size=hidden, direction=direction, **attrs)
    state = [ndir, "batch", hidden]
    infos = [helper.make_tensor_value_info("x", TP.FLOAT, ["seq", "batch", FEATURES])]
    if lens:
        infos.append(helper.make_tensor_value_info("lens", TP.INT32, ["batch"]))
        infos += [helper.make_tensor_value_info(n, TP.FLOAT, state) for n in names[5:7]]
    graph = helper.make_graph(
        [node],
        "rnn",
        infos,
        [helper.make_tensor_value_info(n, TP.FLOAT, None) for n in outs],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _feeds(kind, ndir, seq, batch, lens=True, hidden=HIDDEN):
    rng = np.random.default_rng(seq * 10 + batch)
    feed = {"x": rng.standard_normal((seq, batch, FEATURES)).astype(np.float32)}
    if lens:  # rows of every length up to seq, the first one full
        feed["lens"] = np.concatenate([[seq], rng.integers(1, seq + 1, batch - 1)]).astype("i4")
        for n in ("h0", "c0") if kind == "LSTM" else ("h0",):
            feed[n] = rng.standard_normal((ndir, batch, hidden)).astype(np.float32)
    return feed


def _check_lengths(model, kind, ndir, target, ort_of, lens=True, hidden=HIDDEN):
    mod, params = from_onnx(model)
    m = GraphModule(tessera.build(mod, target=target, params=params)["default"]())
    ort = ort_of(model)
    for seq, batch in ((1, 1), (3, 2), (17, 5), (64, 9)):
        outs = ort.check(m, _feeds(kind, ndir, seq, batch, lens, hidden))
        assert outs[0].shape == (seq, ndir, batch, hidden)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_a_symbolic_sequence_length_compiles_once_and_matches_ort(kind, direction, ort_of):
    ndir = 2 if direction == "bidirectional" else 1
    _check_lengths(_seq_model(kind, direction), kind, ndir, "llvm", ort_of)


@pytest.mark.parametrize("kind", ["LSTM", pytest.param("GRU", marks=pytest.mark.slow)])
def test_a_symbolic_sequence_length_on_c(kind, ort_of):
    _check_lengths(_seq_model(kind, "bidirectional"), kind, 2, "c", ort_of)


@pytest.mark.parametrize(
    ("kind", "attrs"),
    [
        ("GRU", {"linear_before_reset": 1}),
        ("LSTM", {"input_forget": 1, "clip": 0.7}),
        ("LSTM", {"peepholes": True}),
        (
            "RNN",
            {
                "activations": ["LeakyRelu", "HardSigmoid"],
                "activation_alpha": [0.2, 0.3],
                "activation_beta": [0.4],
            },
        ),  # fmt: skip
    ],
)
def test_the_recurrence_kernel_honours_the_cell_attributes(kind, attrs, ort_of):
    """No sequence_lens nor initial states (zeros over a symbolic batch), and the attributes
    the kernel takes over from the unrolled form; 11 hidden units: vector loops with a tail."""
    direction = "bidirectional" if kind == "RNN" else "forward"
    ndir = 2 if direction == "bidirectional" else 1
    model = _seq_model(kind, direction, lens=False, hidden=11, **attrs)
    _check_lengths(model, kind, ndir, "llvm", ort_of, lens=False, hidden=11)


def test_the_recurrence_reference_matches_ort():
    """nn.recurrence's numpy reference (the interpreter's), reverse with sequence_lens, against
    ONNX Runtime: the input projection done here as the converter does it."""
    from tessera.graph.op import get_op

    model = _seq_model("LSTM", "reverse")
    feed = _feeds("LSTM", 1, 7, 3)
    w, r, bias = (numpy_helper.to_array(t)[0] for t in model.graph.initializer)
    xp = feed["x"] @ w.T + bias[: 4 * HIDDEN] + bias[4 * HIDDEN :]
    specs = (("sigmoid", None, None), ("tanh", None, None), ("tanh", None, None))
    ours = get_op("nn.recurrence").evaluate(
        [xp, r.T, feed["h0"][0], feed["c0"][0], feed["lens"]],
        {"kind": "LSTM", "activations": specs, "masked": True, "reverse": True},
    )
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(model.SerializeToString()).run(None, feed)
    np.testing.assert_allclose(ours[0], theirs[0][:, 0], rtol=1e-4, atol=1e-5)
    for a, b in zip(ours[1:], theirs[1:], strict=True):
        np.testing.assert_allclose(a, b[0], rtol=1e-4, atol=1e-5)


def test_a_target_without_the_tir_kernel_is_told_clearly():
    """nn.recurrence has no te compute (its kernel is tir, for the CPU targets): a path that
    asks for one (the GPU graph) gets a clear error, not a KeyError."""
    from tessera.graph.op import get_op
    from tessera.graph_build.lower_group import LoweringError, _compute_rule

    with pytest.raises(LoweringError, match=r"nn.recurrence has a kernel written in tir"):
        _compute_rule(get_op("nn.recurrence"), None)
