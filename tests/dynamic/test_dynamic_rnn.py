"""Recurrent layers over a symbolic batch (the sequence length sized): LSTM and GRU, both
directions, compiled once and run at several batches against ONNX Runtime; a symbolic
sequence length is refused clearly (the steps are unrolled)."""

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


def test_a_symbolic_sequence_length_is_refused_clearly():
    with pytest.raises(ValueError, match=r"LSTM.*sequence length seq.*symbolic.*shape_dict"):
        from_onnx(_model("LSTM", "seq"))
