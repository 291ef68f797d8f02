"""The step loop of a recurrent layer over a sequence whose length may be symbolic.

    %y, %h, %c = nn.recurrence(%xp, %r, %h0, %c0, kind="LSTM",
                               activations=(("sigmoid", None, None), ("tanh", ...), ...))

Inputs: xp [seq, batch, gates * hidden] (the input projected, biases added), r [hidden,
gates * hidden] (R^T of one direction), h0 [batch, hidden], then c0 (LSTM), lens [batch]
(`masked`), p [3 * hidden] (`peepholes`, LSTM: i, o, f), rbh [hidden] (GRU with
linear_before_reset and a bias). Outputs y [seq, batch, hidden], the final h (and c for LSTM).
Gate orders are ONNX's (LSTM i o f c, GRU z r h). Its kernel is written in tir
(topi/recurrent.py, Note [recurrence kernel]); onnx_rnn.py uses it when the length is symbolic.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op, type_error
from tessera.topi.recurrent import GATES

recurrence = register_op("nn.recurrence", kind=OpKind.OPAQUE)
ROWS = 4  # batch rows whose gates one pass over R^T computes (Note [recurrence kernel])


@recurrence.type_rule
def _(xp: TensorType, r: TensorType, h0: TensorType, *rest: TensorType, kind, activations,
      clip=None, masked=False, peepholes=False, reverse=False, linear_before_reset=0,
      input_forget=0):  # fmt: skip
    if kind not in GATES:
        raise type_error("nn.recurrence", f"kind is RNN, GRU or LSTM, got {kind!r}")
    if xp.ndim != 3 or r.ndim != 2 or h0.ndim != 2:
        raise type_error("nn.recurrence", f"needs xp 3-D, r and h0 2-D, got {xp}, {r}, {h0}")
    seq, batch, _ = xp.shape
    hidden = r.shape[0]
    if r.shape[1] != GATES[kind] * hidden:
        raise type_error("nn.recurrence", f"r {r} is not [hidden, {GATES[kind]} * hidden]")
    y = TensorType((seq, batch, hidden), xp.dtype)
    h = TensorType((batch, hidden), xp.dtype)
    return (y, h, h) if kind == "LSTM" else (y, h)


def _np_activation(name, alpha, beta):
    return {
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "tanh": np.tanh,
        "relu": lambda x: np.maximum(x, 0),
        "leakyrelu": lambda x: np.where(x < 0, alpha * x, x),
        "thresholdedrelu": lambda x: np.where(x > alpha, x, 0),
        "hardsigmoid": lambda x: np.clip(alpha * x + beta, 0, 1),
        "elu": lambda x: np.where(x < 0, alpha * (np.exp(x) - 1), x),
        "softsign": lambda x: x / (1 + np.abs(x)),
        "softplus": lambda x: np.log1p(np.exp(x)),
        "affine": lambda x: alpha * x + beta,
        "scaledtanh": lambda x: alpha * np.tanh(beta * x),
    }[name]


@recurrence.reference
def _(xp, r, h0, *rest, kind, activations, clip=None, masked=False, peepholes=False,
      reverse=False, linear_before_reset=0, input_forget=0):  # fmt: skip
    rest = list(rest)
    fns = [_np_activation(*a) for a in activations]

    def act(k, x):
        return fns[k](x if clip is None else np.clip(x, -clip, clip))

    c = rest.pop(0).copy() if kind == "LSTM" else None
    lens = rest.pop(0) if masked else None
    p = rest.pop(0) if peepholes else None
    rbh = rest.pop(0) if kind == "GRU" and linear_before_reset and rest else 0
    h, hid, nseq = h0.copy(), r.shape[0], xp.shape[0]
    y = np.zeros((nseq, *h.shape), xp.dtype)
    last = np.full(h.shape[0], nseq) if lens is None else np.asarray(lens).astype(np.int64)
    rows = np.arange(h.shape[0])
    for t in range(nseq):
        # the time index of step t per row (reverse: each row's own sequence backwards)
        at = np.clip(last - 1 - t, 0, nseq - 1) if reverse else np.full(h.shape[0], t)
        x = xp[at, rows]
        if kind == "RNN":
            nh, nc = act(0, x + h @ r), c
        elif kind == "GRU":
            z = act(0, x[:, :hid] + h @ r[:, :hid])
            rs = act(0, x[:, hid : 2 * hid] + h @ r[:, hid : 2 * hid])
            if linear_before_reset:
                cand = act(1, x[:, 2 * hid :] + rs * (h @ r[:, 2 * hid :] + rbh))
            else:
                cand = act(1, x[:, 2 * hid :] + (rs * h) @ r[:, 2 * hid :])
            nh, nc = (1 - z) * cand + z * h, c
        else:
            gi, go, gf, gc = np.split(x + h @ r, 4, axis=1)
            if p is not None:
                gi, gf = gi + p[:hid] * c, gf + p[2 * hid :] * c
            i = act(0, gi)
            f = 1 - i if input_forget else act(0, gf)
            nc = f * c + i * act(1, gc)
            go = go if p is None else go + p[hid : 2 * hid] * nc
            nh = act(0, go) * fns[2](nc)
        run = np.ones((h.shape[0], 1), bool) if lens is None else (t < lens).reshape(-1, 1)
        h = np.where(run, nh, h).astype(xp.dtype)
        c = None if c is None else np.where(run, nc, c).astype(xp.dtype)
        y[np.where(run[:, 0], at, t), rows] = np.where(run, h, 0)
    return (y, h, c) if kind == "LSTM" else (y, h)


def primfunc(params, outs, target=None, *, kind, activations, clip=None, masked=False,
             peepholes=False, reverse=False, linear_before_reset=0, input_forget=0,
             name="recurrence"):  # fmt: skip
    """The kernel of a call, from the tir Buffers of its inputs and outputs, for `target`."""
    from tessera.topi.generic import vector_lanes
    from tessera.topi.recurrent import activation, recurrence_func

    acts = [activation(*a) for a in activations]
    # Note [recurrence kernel]: a block of ROWS batch rows keeps `accumulators` vectors of
    # gates per row in registers; half the target's vector registers hold them
    registers = getattr(target, "vector_registers", 16)
    accumulators = max(1, registers // (2 * ROWS))
    return recurrence_func(kind, params, outs, acts, clip, masked=masked, peepholes=peepholes,
                           reverse=reverse, lanes=vector_lanes(target, params[0].dtype),
                           accumulators=accumulators, rows_per_block=ROWS,
                           linear_before_reset=linear_before_reset, input_forget=input_forget,
                           name=name)  # fmt: skip


recurrence.rules["primfunc"] = primfunc
