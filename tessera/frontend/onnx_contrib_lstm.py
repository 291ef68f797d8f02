"""com.microsoft DynamicQuantizeLSTM: an LSTM whose int8 weights meet activations quantized at
run time, as ONNX Runtime computes it (the quantized GEMMs of its DeepCPU LSTM).

    W [dirs, input, 4H] int8, R [dirs, H, 4H] int8, scales and zero points per direction or per
    column; gates = q(X) @ W * (sx * sw) + q(h) @ R * (sh * sr) + Wb + Rb, then the LSTM cell

q(.) is DynamicQuantizeLinear over the whole tensor: all of X once, h at every step. The products
run on qnn.dense (int8 kernels) with the run-time zero point compensated in the epilogue. The
directions, activations, clip, sequence_lens, initial states and peepholes are LSTM's
(onnx_rnn.py supplies the shared pieces).
"""

from __future__ import annotations

import numpy as np

from tessera.frontend.onnx_quant import _as, _matmul_acc, dynamic_quantize_linear
from tessera.frontend.onnx_registry import NodeError, onnx_op
from tessera.frontend.onnx_rnn import (
    _DEFAULT_ACTIVATIONS,
    _activation_specs,
    _Cell,
    _direction,
    _initial,
    _masks,
    _outputs,
    _parts,
    _peepholes,
    lstm_cell,
)
from tessera.frontend.onnx_scatter import reverse_sequence
from tessera.graph.ir import Constant

MS = "com.microsoft"


def _per_dir(b, v, d, ndir, what):
    """Direction d of a per-direction (dirs,) or per-column (dirs, 4H) constant."""
    if not isinstance(v, Constant):
        raise NodeError(f"{what} must be a constant")
    arr = v.array.reshape(ndir, -1)[d]
    return arr if arr.size > 1 else arr.reshape(())


def _dq_matmul(b, x2d, w_int8, w_scale, w_zp):
    """float32 of q(x) @ (w - zp) * (sx * sw) with x quantized over all of x2d."""
    xq, xs, xz = dynamic_quantize_linear(b, x2d)
    zp = None if not np.any(w_zp) else b.const(w_zp.astype(w_int8.array.dtype))
    acc = _matmul_acc(b, xq, w_int8, xz, zp)
    scale = b.call("multiply", xs, b.const(w_scale.astype(np.float32)))
    return b.call("multiply", _as(b, acc, "float32"), scale)


def _cell_step(cell, x, h, c, r, r_scale, r_zp, peep):
    gates = cell.b.call("add", x, _dq_matmul(cell.b, h, r, r_scale, r_zp))
    return lstm_cell(cell, gates, c, peep)


def _direction_run(b, cell, X, w, r, quant, B, lens, h, c, d, ndir, reverse, peep):
    seq, batch, size = b.shape_of(X)
    hid = cell.hidden
    if reverse:
        X = reverse_sequence(b, X, lens) if lens is not None else b.call("reverse", X, axis=(0,))
    ws, wz, rs, rz = quant
    proj = _dq_matmul(b, b.reshape(X, (seq * batch, size)), w, ws, wz)
    if B is not None:
        wb, rb = _parts(b, _direction(b, B, d, ndir), 0, (4 * hid, 4 * hid))
        proj = b.call("add", proj, b.call("add", wb, rb))
    xs = _parts(b, b.reshape(proj, (seq, batch, 4 * hid)), 0, (1,) * seq)
    masks, ys = _masks(b, lens, seq, batch, X.type.dtype), []
    for t in range(seq):
        nh, nc = _cell_step(cell, b.reshape(xs[t], (batch, 4 * hid)), h, c, r, rs, rz, peep)
        if masks[t] is not None:
            nh, nc = (b.call("where", masks[t], n, s) for n, s in ((nh, h), (nc, c)))
            ys.append(b.call("where", masks[t], nh, b.scalar(0, nh)))
        else:
            ys.append(nh)
        h, c = nh, nc
    y = b.call("concatenate", *[b.reshape(v, (1, batch, hid)) for v in ys], axis=0)
    if reverse:
        y = reverse_sequence(b, y, lens) if lens is not None else b.call("reverse", y, axis=(0,))
    return y, h, c


@onnx_op("DynamicQuantizeLSTM", domain=MS)
def dynamic_quantize_lstm(b, X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None,
                          P=None, W_scale=None, W_zero_point=None, R_scale=None,
                          R_zero_point=None, *, activation_alpha=None, activation_beta=None,
                          activations=None, clip=None, direction="forward", hidden_size=None,
                          input_forget=0):  # fmt: skip
    ndir = 2 if direction == "bidirectional" else 1
    if not isinstance(W, Constant) or not isinstance(R, Constant):
        raise NodeError("DynamicQuantizeLSTM needs constant W and R")
    seq, batch, _ = b.shape_of(X)
    hidden = hidden_size or b.shape_of(R)[1]
    names = activations or _DEFAULT_ACTIVATIONS["LSTM"] * ndir
    if len(names) != 3 * ndir:
        raise NodeError(f"needs {3 * ndir} activations, got {list(names)}")
    specs = _activation_specs(names, activation_alpha, activation_beta)
    dtype = X.type.dtype.numpy_name
    ys, hs, cs = [], [], []
    for d in range(ndir):
        cell = _Cell(b, "LSTM", specs[3 * d : 3 * d + 3], clip, hidden, 0, input_forget)
        w, r = b.const(W.array[d]), b.const(R.array[d])
        quant = tuple(
            np.zeros(()) if v is None else _per_dir(b, v, d, ndir, what)
            for v, what in ((W_scale, "W_scale"), (W_zero_point, "W_zero_point"),
                            (R_scale, "R_scale"), (R_zero_point, "R_zero_point"))
        )  # fmt: skip
        h = _initial(b, initial_h, d, ndir, batch, hidden, dtype)
        c = _initial(b, initial_c, d, ndir, batch, hidden, dtype)
        peep = _peepholes(b, P, d, ndir, hidden)
        reverse = direction == "reverse" or d == 1
        y, h, c = _direction_run(b, cell, X, w, r, quant, B, sequence_lens, h, c, d, ndir,
                                 reverse, peep)  # fmt: skip
        ys.append(b.reshape(y, (seq, 1, batch, hidden)))
        hs.append(b.reshape(h, (1, batch, hidden)))
        cs.append(b.reshape(c, (1, batch, hidden)))
    return _outputs(b, "LSTM", ys, hs, cs, 0)
