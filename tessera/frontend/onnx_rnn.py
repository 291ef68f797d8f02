"""ONNX converters for the recurrent ops RNN, GRU and LSTM: unrolled over a sized sequence,
one step-loop kernel over a symbolic one.

    Y, Y_h = RNN(X, W, R, B, sequence_lens, initial_h)      ->  per step: matmul, add, tanh

In each direction one matmul projects every step's input at once (X @ W^T + biases). Over a
sized sequence each step is then a chain of graph ops: add H @ R^T, split the gates, apply the
activations. Over a symbolic one the steps are one nn.recurrence call (graph/ops/recurrent.py,
Note [recurrence kernel] in topi/recurrent.py), which also masks and reverses per row.
Every attribute of the spec is honoured: direction (forward, reverse, bidirectional),
activations with activation_alpha/beta, clip, hidden_size, layout, linear_before_reset (GRU),
input_forget and peepholes (LSTM), initial states and sequence_lens. With sequence_lens a batch
row stops at its length: its state holds and its Y rows are 0; the reverse direction reads each
row's own sequence backwards (a ReverseSequence before and after).
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.frontend.onnx_scatter import reverse_sequence

# activation -> (graph op or None, default alpha, default beta); names compare lower-case
_ACTIVATIONS = {
    "sigmoid": ("sigmoid", None, None),
    "tanh": ("tanh", None, None),
    "relu": ("nn.relu", None, None),
    "leakyrelu": ("nn.leaky_relu", 0.01, None),
    "thresholdedrelu": ("nn.thresholded_relu", 1.0, None),
    "hardsigmoid": ("nn.hardsigmoid", 0.2, 0.5),
    "elu": ("nn.elu", 1.0, None),
    "softsign": ("nn.softsign", None, None),
    "softplus": ("nn.softplus", None, None),
    "affine": (None, 1.0, 0.0),
    "scaledtanh": (None, 1.0, 1.0),
}


def _activation_specs(names, alphas, betas):
    """(name lower-case, alpha, beta) per activation; alphas and betas are consumed in order by
    the activations that take them (the spec's wording), defaults for the rest."""
    alphas, betas, specs = list(alphas or ()), list(betas or ()), []
    for name in names:
        key = name.lower()
        if key not in _ACTIVATIONS:
            raise NodeError(f"unknown activation {name!r}")
        _, alpha, beta = _ACTIVATIONS[key]
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        specs.append((key, alpha, beta))
    return specs


def _activation_fns(b, specs):
    """One graph function per activation spec."""
    return [_make_activation(b, key, _ACTIVATIONS[key][0], a, be) for key, a, be in specs]


def _make_activation(b, key, op, alpha, beta):
    def scale(x, v):
        return b.call("multiply", x, b.scalar(v, x))

    if key == "affine":
        return lambda x: b.call("add", scale(x, alpha), b.scalar(beta, x))
    if key == "scaledtanh":
        return lambda x: scale(b.call("tanh", scale(x, beta)), alpha)
    attrs = {}
    if alpha is not None:
        attrs["alpha"] = alpha
    if beta is not None:
        attrs["beta"] = beta
    return lambda x: b.call(op, x, **attrs)


def _parts(b, v, axis: int, sizes):
    """v split along axis into pieces of these sizes (v itself when there is one piece)."""
    if len(sizes) == 1:
        return [v]
    return list(b.call("split", v, axis=axis, sections=tuple(sizes)))


def _direction(b, v, d: int, ndir: int):
    """Direction d of a [num_directions, ...] tensor, without its leading axis."""
    piece = _parts(b, v, 0, (1,) * ndir)[d]
    return b.reshape(piece, b.shape_of(piece, symbolic=True)[1:])


class _Cell:
    """What one direction of a recurrent op needs at each step."""

    def __init__(self, b, kind, specs, clip, hidden, lbr=0, input_forget=0):
        self.b, self.kind, self.specs, self.clip, self.hidden = b, kind, specs, clip, hidden
        self.fns = _activation_fns(b, specs)
        self.lbr, self.input_forget = lbr, input_forget

    def pre(self, x):
        if self.clip is None:
            return x
        return self.b.call("clip", x, a_min=-float(self.clip), a_max=float(self.clip))

    def act(self, k, x):
        return self.fns[k](self.pre(x))


def _gates_bias(b, B, d, ndir, gates, hidden):
    """(input bias Wb, recurrent bias Rb) of direction d, or (None, None) without B."""
    if B is None:
        return None, None
    bias = _direction(b, B, d, ndir)
    wb, rb = _parts(b, bias, 0, (gates * hidden, gates * hidden))
    return wb, rb


def _biases(b, cell, B, d, ndir, gates):
    """(bias added to the projected input, GRU's recurrent bias of h kept apart or None).
    Only GRU with linear_before_reset keeps Rbh apart: it is multiplied by the reset gate."""
    wb, rb = _gates_bias(b, B, d, ndir, gates, cell.hidden)
    if rb is None:
        return wb, None
    if cell.kind == "GRU" and cell.lbr:
        rb_zr, rb_h = _parts(b, rb, 0, (2 * cell.hidden, cell.hidden))
        zeros = b.const(np.zeros(cell.hidden, rb.type.dtype.numpy_name))
        return b.call("add", wb, b.call("concatenate", rb_zr, zeros, axis=0)), rb_h
    return b.call("add", wb, rb), None


def _project(b, X, W, d, ndir, bias):
    """X [seq, batch, in] @ W[d]^T (+ bias) as [seq, batch, gates * hidden], in one matmul."""
    seq, batch, size = b.shape_of(X, symbolic=True)
    w = b.call("transpose", _direction(b, W, d, ndir), axes=(1, 0))
    y = b.call("matmul", b.reshape(X, (seq * batch, size)), w)
    if bias is not None:
        y = b.call("add", y, bias)
    return b.reshape(y, (seq, batch, b.shape_of(w)[1]))


def _rnn_step(cell, x, state, r, rb):
    (h,) = state
    return (cell.act(0, cell.b.call("add", x, cell.b.call("matmul", h, r))),)


def _gru_step(cell, x, state, r, rb):
    b, hid = cell.b, cell.hidden
    (h,) = state
    xz, xr, xh = _parts(b, x, 1, (hid, hid, hid))
    r_zr, r_h = _parts(b, r, 1, (2 * hid, hid))
    hz, hr = _parts(b, b.call("matmul", h, r_zr), 1, (hid, hid))
    z = cell.act(0, b.call("add", xz, hz))
    reset = cell.act(0, b.call("add", xr, hr))
    if cell.lbr:
        rec = b.call("matmul", h, r_h)
        rec = rec if rb is None else b.call("add", rec, rb)
        cand = cell.act(1, b.call("add", xh, b.call("multiply", reset, rec)))
    else:
        cand = cell.act(1, b.call("add", xh, b.call("matmul", b.call("multiply", reset, h), r_h)))
    keep = b.call("multiply", z, h)
    one_minus = b.call("subtract", b.scalar(1, z), z)
    return (b.call("add", b.call("multiply", one_minus, cand), keep),)


def _lstm_step(cell, x, state, r, peep):
    h, c = state
    return lstm_cell(cell, cell.b.call("add", x, cell.b.call("matmul", h, r)), c, peep)


def lstm_cell(cell, gates, c, peep):
    """(h, c) after one LSTM step from its gate pre-activations (x W + h R + biases, in ONNX's
    iofc order) and the previous cell state; shared with the quantized LSTM."""
    b, hid = cell.b, cell.hidden
    gi, go, gf, gc = _parts(b, gates, 1, (hid,) * 4)
    if peep is not None:
        pi, po, pf = peep
        gi = b.call("add", gi, b.call("multiply", pi, c))
        gf = b.call("add", gf, b.call("multiply", pf, c))
    i = cell.act(0, gi)
    f = b.call("subtract", b.scalar(1, i), i) if cell.input_forget else cell.act(0, gf)
    c_new = b.call("add", b.call("multiply", f, c), b.call("multiply", i, cell.act(1, gc)))
    if peep is not None:
        go = b.call("add", go, b.call("multiply", po, c_new))
    o = cell.act(0, go)
    return b.call("multiply", o, cell.fns[2](c_new)), c_new


_STEPS = {"RNN": (_rnn_step, 1), "GRU": (_gru_step, 3), "LSTM": (_lstm_step, 4)}


def _masks(b, lens, seq, batch, dtype):
    """Per step: None (every row runs) or a [batch, 1] bool mask of the rows still running."""
    if lens is None:
        return [None] * seq
    lens64 = lens if lens.type.dtype.numpy_name == "int64" else b.call("cast", lens, dtype="int64")
    lens64 = b.reshape(lens64, (batch, 1))
    return [b.call("less", b.scalar(t, lens64), lens64) for t in range(seq)]


def _run_direction(b, cell, X, W, R, B, lens, state, d, ndir, reverse, extra):
    """Y [seq, batch, hidden] and the final states of direction d."""
    gates = _STEPS[cell.kind][1]
    seq, batch, _ = b.shape_of(X, symbolic=True)
    unrolled = isinstance(seq, int)  # else the kernel reverses: Note [recurrence kernel]
    if reverse and unrolled:
        X = reverse_sequence(b, X, lens) if lens is not None else b.call("reverse", X, axis=(0,))
    bias, rb_h = _biases(b, cell, B, d, ndir, gates)
    if cell.kind == "GRU":
        extra = rb_h
    xp = _project(b, X, W, d, ndir, bias)
    r = b.call("transpose", _direction(b, R, d, ndir), axes=(1, 0))
    if not unrolled:
        return _step_loop(b, cell, xp, r, lens, state, extra, reverse)
    y, state = _unrolled(b, cell, xp, r, lens, state, extra, seq, batch, gates)
    if reverse:
        y = reverse_sequence(b, y, lens) if lens is not None else b.call("reverse", y, axis=(0,))
    return y, state


def _step_loop(b, cell, xp, r, lens, state, extra, reverse):
    """The steps as one nn.recurrence call (a symbolic length: Note [recurrence kernel])."""
    ins, attrs = [xp, r, *state], {"reverse": bool(reverse)}
    if lens is not None:
        ins.append(lens)
        attrs["masked"] = True
    if cell.kind == "LSTM" and extra is not None:
        ins.append(b.call("concatenate", *extra, axis=0))
        attrs["peepholes"] = True
    if cell.kind == "GRU" and cell.lbr and extra is not None:
        ins.append(extra)
    clip = None if cell.clip is None else float(cell.clip)
    outs = b.call("nn.recurrence", *ins, kind=cell.kind, activations=tuple(cell.specs),
                  clip=clip, linear_before_reset=int(cell.lbr),
                  input_forget=int(cell.input_forget), **attrs)  # fmt: skip
    return outs[0], tuple(outs[1:])


def _unrolled(b, cell, xp, r, lens, state, extra, seq, batch, gates):
    """The steps unrolled (a sized length): graph ops per step."""
    step = _STEPS[cell.kind][0]
    xs = _parts(b, xp, 0, (1,) * seq)
    masks, ys = _masks(b, lens, seq, batch, xp.type.dtype), []
    for t in range(seq):
        new = step(cell, b.reshape(xs[t], (batch, gates * cell.hidden)), state, r, extra)
        if masks[t] is not None:
            new = tuple(b.call("where", masks[t], n, s) for n, s in zip(new, state, strict=True))
            ys.append(b.call("where", masks[t], new[0], b.scalar(0, new[0])))
        else:
            ys.append(new[0])
        state = new
    y = b.call("concatenate", *[b.reshape(v, (1, batch, cell.hidden)) for v in ys], axis=0)
    return y, state


_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"),
                        "LSTM": ("Sigmoid", "Tanh", "Tanh")}  # fmt: skip


def _initial(b, v, d, ndir, batch, hidden, dtype):
    if v is None and not isinstance(batch, int):  # a symbolic batch (graph/dims.py)
        zeros = b.const(np.zeros((1, hidden), dtype))
        return b.call("expand", zeros, shape=(batch, hidden))
    if v is None:
        return b.const(np.zeros((batch, hidden), dtype))
    return _direction(b, v, d, ndir)


def _peepholes(b, P, d, ndir, hidden):
    if P is None:
        return None
    return tuple(_parts(b, _direction(b, P, d, ndir), 0, (hidden,) * 3))


def _recurrent(b, kind, X, W, R, B, lens, init_h, init_c=None, P=None, *, activation_alpha=None,
               activation_beta=None, activations=None, clip=None, direction="forward",
               hidden_size=None, layout=0, linear_before_reset=0, input_forget=0):  # fmt: skip
    if direction not in ("forward", "reverse", "bidirectional"):
        raise NodeError(f"unknown direction {direction!r}")
    ndir = 2 if direction == "bidirectional" else 1
    if layout:
        X = b.call("transpose", X, axes=(1, 0, 2))
        init_h = None if init_h is None else b.call("transpose", init_h, axes=(1, 0, 2))
        init_c = None if init_c is None else b.call("transpose", init_c, axes=(1, 0, 2))
    seq, batch, _ = b.shape_of(X, symbolic=True)
    hidden = hidden_size or b.shape_of(R)[-1]
    names = activations or _DEFAULT_ACTIVATIONS[kind] * ndir
    per_dir = len(_DEFAULT_ACTIVATIONS[kind])
    if len(names) != per_dir * ndir:
        raise NodeError(f"needs {per_dir * ndir} activations, got {list(names)}")
    specs = _activation_specs(names, activation_alpha, activation_beta)
    dtype = X.type.dtype.numpy_name
    ys, hs, cs = [], [], []
    for d in range(ndir):
        cell = _Cell(b, kind, specs[d * per_dir : (d + 1) * per_dir], clip, hidden,
                     linear_before_reset, input_forget)  # fmt: skip
        state = (_initial(b, init_h, d, ndir, batch, hidden, dtype),)
        if kind == "LSTM":
            state += (_initial(b, init_c, d, ndir, batch, hidden, dtype),)
        extra = _peepholes(b, P, d, ndir, hidden) if kind == "LSTM" else None
        reverse = direction == "reverse" or d == 1
        y, state = _run_direction(b, cell, X, W, R, B, lens, state, d, ndir, reverse, extra)
        ys.append(b.reshape(y, (seq, 1, batch, hidden)))
        hs.append(b.reshape(state[0], (1, batch, hidden)))
        cs.append(b.reshape(state[-1], (1, batch, hidden)))
    return _outputs(b, kind, ys, hs, cs, layout)


def _outputs(b, kind, ys, hs, cs, layout):
    def join(vs, axis):
        return vs[0] if len(vs) == 1 else b.call("concatenate", *vs, axis=axis)

    y, h, c = join(ys, 1), join(hs, 0), join(cs, 0)
    if layout:
        y = b.call("transpose", y, axes=(2, 0, 1, 3))
        h = b.call("transpose", h, axes=(1, 0, 2))
        c = b.call("transpose", c, axes=(1, 0, 2))
    outs = (y, h, c) if kind == "LSTM" else (y, h)
    return outs[: max(b.num_outputs, 1)]


@onnx_op("RNN", since=7)
def rnn(b, X, W, R, B=None, sequence_lens=None, initial_h=None, **attrs):
    return _recurrent(b, "RNN", X, W, R, B, sequence_lens, initial_h, **attrs)


@onnx_op("GRU", since=7)
def gru(b, X, W, R, B=None, sequence_lens=None, initial_h=None, **attrs):
    return _recurrent(b, "GRU", X, W, R, B, sequence_lens, initial_h, **attrs)


@onnx_op("LSTM", since=7)
def lstm(b, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, **attrs):
    return _recurrent(b, "LSTM", X, W, R, B, sequence_lens, initial_h, initial_c, P, **attrs)
