"""Small models with control flow, built with onnx.helper: tests and examples run them.

greedy_decoder(vocab=16, hidden=8, max_len=12)   # a seq2seq's greedy decoding: Loop to EOS
branch_on_input()                                 # If on the sign of an input value
counting_loop(with_cond=True)                     # a Loop with a run-time trip count and condition
counting_loop_feeds()                             # its inputs: no step, all steps, an early stop...
check_greedy_decoding(run, model, sources)        # a compiled decoder against ORT (tests)
branch_ruled_out_by_shapes()                      # an If whose else branch cannot run at its shapes
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

BOS, EOS = 1, 0


def _init(name: str, array) -> object:
    return numpy_helper.from_array(np.asarray(array), name)


def greedy_decoder(vocab: int = 16, hidden: int = 8, max_len: int = 12, seed: int = 0):
    """A GRU-less seq2seq: the encoder averages the source embeddings; the decoder Loop feeds
    back its argmax token, stops when it emits EOS (a data-dependent trip count, at most
    `max_len`) and returns the tokens as a scan output and the last state as a carried value.
    A length bonus on EOS (growing with the step) makes every sequence end."""
    rng = np.random.default_rng(seed)
    f32 = np.float32
    inits = [
        _init("E", rng.standard_normal((vocab, hidden)).astype(f32)),
        _init("We", (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(f32)),
        _init("Wx", (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(f32)),
        _init("Wh", (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(f32)),
        _init("Wo", rng.standard_normal((hidden, vocab)).astype(f32)),
        _init("eos_bonus", (np.arange(vocab) == EOS).astype(f32) * f32(1.5)),
        _init("max_len", np.int64(max_len)),
        _init("start", np.array([BOS], np.int64)),
        _init("h0", np.zeros((1, hidden), f32)),
        _init("axes0", np.array([0], np.int64)),
        _init("eos", np.array([EOS], np.int64)),
    ]
    encoder = [
        helper.make_node("Gather", ["E", "src"], ["src_emb"]),
        helper.make_node("ReduceMean", ["src_emb", "axes0"], ["src_mean"], keepdims=1),
        helper.make_node("MatMul", ["src_mean", "We"], ["enc_lin"]),
        helper.make_node("Tanh", ["enc_lin"], ["enc"]),
        helper.make_node("Constant", [], ["go"], value=helper.make_tensor("t", TP.BOOL, [], [1])),
    ]
    body_nodes = [
        helper.make_node("Gather", ["E", "tok_in"], ["emb"]),
        helper.make_node("MatMul", ["emb", "Wx"], ["xa"]),
        helper.make_node("MatMul", ["h_in", "Wh"], ["ha"]),
        helper.make_node("Add", ["xa", "ha"], ["pre0"]),
        helper.make_node("Add", ["pre0", "enc"], ["pre"]),
        helper.make_node("Tanh", ["pre"], ["h_out"]),
        helper.make_node("MatMul", ["h_out", "Wo"], ["logits0"]),
        helper.make_node("Cast", ["i"], ["i_f"], to=TP.FLOAT),
        helper.make_node("Mul", ["eos_bonus", "i_f"], ["bonus"]),
        helper.make_node("Add", ["logits0", "bonus"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
        helper.make_node("Equal", ["tok_out", "eos"], ["is_eos"]),
        helper.make_node("Not", ["is_eos"], ["go_on"]),
        helper.make_node("Identity", ["tok_out"], ["tok_scan"]),
    ]
    body = helper.make_graph(
        body_nodes,
        "decode_step",
        [
            helper.make_tensor_value_info("i", TP.INT64, []),
            helper.make_tensor_value_info("cond_in", TP.BOOL, []),
            helper.make_tensor_value_info("h_in", TP.FLOAT, [1, hidden]),
            helper.make_tensor_value_info("tok_in", TP.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("go_on", TP.BOOL, [1]),
            helper.make_tensor_value_info("h_out", TP.FLOAT, [1, hidden]),
            helper.make_tensor_value_info("tok_out", TP.INT64, [1]),
            helper.make_tensor_value_info("tok_scan", TP.INT64, [1]),
        ],
    )
    loop = helper.make_node(
        "Loop", ["max_len", "go", "h0", "start"], ["h_last", "tok_last", "tokens"], body=body
    )
    graph = helper.make_graph(
        [*encoder, loop],
        "greedy_decoder",
        [helper.make_tensor_value_info("src", TP.INT64, [5])],
        [
            helper.make_tensor_value_info("tokens", TP.INT64, ["steps", 1]),
            helper.make_tensor_value_info("h_last", TP.FLOAT, [1, hidden]),
        ],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def branch_on_input(shape=(2, 3), seed: int = 0):
    """y = relu(x + w) when flag > 0, else x * x: an If whose condition is an input's value."""
    w = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    out = [helper.make_tensor_value_info("out", TP.FLOAT, list(shape))]
    then_g = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Relu", ["t"], ["out"])],
        "then",
        [],
        out,
    )
    else_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["out"])], "else", [], out)
    zero = helper.make_tensor("z", TP.FLOAT, [], [0])
    nodes = [
        helper.make_node("Constant", [], ["zero"], value=zero),
        helper.make_node("Greater", ["flag", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes,
        "branch_on_input",
        [
            helper.make_tensor_value_info("x", TP.FLOAT, list(shape)),
            helper.make_tensor_value_info("flag", TP.FLOAT, []),
        ],
        [helper.make_tensor_value_info("y", TP.FLOAT, list(shape))],
        [_init("w", w)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def counting_loop(with_cond: bool = True):
    """Sum i*x for i < M (and while the running sum stays below a limit, when with_cond)."""
    body = helper.make_graph(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=TP.FLOAT),
            helper.make_node("Mul", ["x", "fi"], ["ix"]),
            helper.make_node("Add", ["s_in", "ix"], ["s_out"]),
            helper.make_node("ReduceSum", ["s_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["c_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TP.INT64, []),
            helper.make_tensor_value_info("c_in", TP.BOOL, []),
            helper.make_tensor_value_info("s_in", TP.FLOAT, [3]),
        ],
        [
            helper.make_tensor_value_info("c_out", TP.BOOL, []),
            helper.make_tensor_value_info("s_out", TP.FLOAT, [3]),
        ],
    )
    inputs = ["M", "c" if with_cond else "", "s0"]
    graph = helper.make_graph(
        [helper.make_node("Loop", inputs, ["s"], body=body)],
        "counting",
        [
            helper.make_tensor_value_info("M", TP.INT64, []),
            helper.make_tensor_value_info("c", TP.BOOL, []),
            helper.make_tensor_value_info("s0", TP.FLOAT, [3]),
            helper.make_tensor_value_info("x", TP.FLOAT, [3]),
            helper.make_tensor_value_info("limit", TP.FLOAT, []),
        ],
        [helper.make_tensor_value_info("s", TP.FLOAT, [3])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def branch_ruled_out_by_shapes():
    """then: x + 1; else: a Reshape to (3, 5) that a [2, 3] input cannot take."""
    out = [helper.make_tensor_value_info("o", TP.FLOAT, None)]
    one = helper.make_tensor("one", TP.FLOAT, [], [1.0])
    then_g = helper.make_graph(
        [helper.make_node("Constant", [], ["c1"], value=one),
         helper.make_node("Add", ["x", "c1"], ["o"])], "t", [], out,
    )  # fmt: skip
    shape = helper.make_tensor("shape", TP.INT64, [2], [3, 5])
    else_g = helper.make_graph(
        [helper.make_node("Constant", [], ["s"], value=shape),
         helper.make_node("Reshape", ["x", "s"], ["r"]),
         helper.make_node("ReduceSum", ["r"], ["o"], keepdims=1)], "e", [], out,
    )  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        "m",
        [
            helper.make_tensor_value_info("c", TP.BOOL, []),
            helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("y", TP.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def counting_loop_feeds(seed: int = 2) -> list[dict]:
    """Inputs of `counting_loop`: no step, every step, a stop on the limit, a false condition."""
    rng = np.random.default_rng(seed)
    feeds = []
    for trips, cond, limit in [(0, True, 5.0), (4, True, 1e9), (9, True, 6.0), (3, False, 9.0)]:
        feeds.append(
            {
                "M": np.array(trips, np.int64),
                "c": np.array(cond),
                "s0": rng.standard_normal(3).astype(np.float32),
                "x": rng.random(3).astype(np.float32),
                "limit": np.array(limit, np.float32),
            }
        )
    return feeds


def check_greedy_decoding(run, model, sources, max_len: int = 12) -> set[int]:
    """Check `run(src) -> (tokens, h)` of a compiled `greedy_decoder` against ONNX Runtime on
    each source; the lengths of the decoded sequences."""
    from tessera.frontend.testing import run_ort

    lengths = set()
    for src in sources:
        tokens, h = run(src)
        want_tokens, want_h = run_ort(model, {"src": src})
        np.testing.assert_array_equal(tokens, want_tokens)
        np.testing.assert_allclose(h, want_h, rtol=1e-5, atol=1e-6)
        assert tokens[-1, 0] == EOS or len(tokens) == max_len
        lengths.add(len(tokens))
    return lengths
