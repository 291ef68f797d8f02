"""Keras converters for sequence layers: Embedding, LSTM, GRU, SimpleRNN (unrolled over the
static number of time steps) and MultiHeadAttention.

Recurrent layers compute the input projection of all steps with one matmul, then unroll the
recurrence: step t adds h @ recurrent_kernel to its slice. Keras's gate orders are kept: LSTM
(i, f, c, o), GRU (z, r, h). Masks and initial states are not supported (a clear error).
"""

from __future__ import annotations

import math

import numpy as np

from tessera.frontend.keras_layers import activation, dense
from tessera.frontend.keras_registry import LayerError, keras_layer


@keras_layer("Embedding")
def embedding(b, config, x, **_):
    if config.get("mask_zero", False):
        raise LayerError("mask_zero=True (masks for later layers) is not supported")
    (table,) = b.weights(1)
    return b.call("gather", table, b.call("cast", x, dtype="int64"), axis=0)


def _check_rnn(config, kwargs):
    for key in ("initial_state", "mask"):
        if kwargs.get(key) is not None:
            raise LayerError(f"{key} is not supported")
    if config.get("stateful", False):
        raise LayerError("stateful=True is not supported")


def _steps(b, x_proj, backwards):
    """Each step's slice (N, features) of x_proj (N, T, features), in processing order."""
    n, t, f = x_proj.type.shape
    order = range(t - 1, -1, -1) if backwards else range(t)
    for i in order:
        piece = b.call("slice", x_proj, begin=(0, i, 0), end=(n, i + 1, f), strides=(1, 1, 1))
        yield b.reshape(piece, (n, f))


def _gates(b, z, count):
    units = z.type.shape[1] // count
    return b.call("split", z, axis=1, sections=(units,) * count)


def _sequence_outputs(b, config, outputs, states):
    """What the layer returns: the last output or all of them, then the states."""
    if config.get("return_sequences", False):
        n, u = outputs[0].type.shape
        parts = [b.reshape(h, (n, 1, u)) for h in outputs]
        y = parts[0] if len(parts) == 1 else b.call("concatenate", *parts, axis=1)
    else:
        y = outputs[-1]
    return (y, *states) if config.get("return_state", False) else y


def _zeros(b, x, units):
    return b.const(np.zeros((x.type.shape[0], units), x.type.dtype.numpy_name))


@keras_layer("LSTM")
def lstm(b, config, x, training=None, **kwargs):
    _check_rnn(config, kwargs)
    use_bias = config.get("use_bias", True)
    weights = b.weights(3 if use_bias else 2)
    kernel, recurrent = weights[:2]
    units = recurrent.type.shape[0]
    x_proj = dense(b, x, kernel, weights[2] if use_bias else None)
    act, rec_act = config.get("activation", "tanh"), config.get("recurrent_activation", "sigmoid")
    h, c, outputs = _zeros(b, x, units), _zeros(b, x, units), []
    for xt in _steps(b, x_proj, config.get("go_backwards", False)):
        z = b.call("add", xt, dense(b, h, recurrent))
        i, f, g, o = _gates(b, z, 4)
        i, f, o = (activation(b, rec_act, v) for v in (i, f, o))
        c = b.call("add", b.call("multiply", f, c), b.call("multiply", i, activation(b, act, g)))
        h = b.call("multiply", o, activation(b, act, c))
        outputs.append(h)
    return _sequence_outputs(b, config, outputs, (h, c))


@keras_layer("GRU")
def gru(b, config, x, training=None, **kwargs):
    _check_rnn(config, kwargs)
    use_bias = config.get("use_bias", True)
    reset_after = config.get("reset_after", True)
    weights = b.weights(3 if use_bias else 2)
    kernel, recurrent = weights[:2]
    units = recurrent.type.shape[0]
    bias = weights[2] if use_bias else None
    in_bias = rec_bias = None
    if bias is not None and reset_after:  # (2, 3u): input bias, recurrent bias
        in_bias, rec_bias = (b.reshape(v, (3 * units,)) for v in b.call(
            "split", bias, axis=0, sections=(1, 1)))  # fmt: skip
    elif bias is not None:
        in_bias = bias
    x_proj = dense(b, x, kernel, in_bias)
    act, rec_act = config.get("activation", "tanh"), config.get("recurrent_activation", "sigmoid")
    if not reset_after:
        rec_zr, rec_h = b.call("split", recurrent, axis=1, sections=(2 * units, units))
    h, outputs = _zeros(b, x, units), []
    for xt in _steps(b, x_proj, config.get("go_backwards", False)):
        x_z, x_r, x_h = _gates(b, xt, 3)
        if reset_after:
            r_z, r_r, r_h = _gates(b, dense(b, h, recurrent, rec_bias), 3)
            z = activation(b, rec_act, b.call("add", x_z, r_z))
            r = activation(b, rec_act, b.call("add", x_r, r_r))
            hh = activation(b, act, b.call("add", x_h, b.call("multiply", r, r_h)))
        else:
            r_z, r_r = _gates(b, dense(b, h, rec_zr), 2)
            z = activation(b, rec_act, b.call("add", x_z, r_z))
            r = activation(b, rec_act, b.call("add", x_r, r_r))
            hh = activation(b, act, b.call("add", x_h, dense(b, b.call("multiply", r, h), rec_h)))
        # h = z * h + (1 - z) * hh
        h = b.call("add", hh, b.call("multiply", z, b.call("subtract", h, hh)))
        outputs.append(h)
    return _sequence_outputs(b, config, outputs, (h,))


@keras_layer("SimpleRNN")
def simple_rnn(b, config, x, training=None, **kwargs):
    _check_rnn(config, kwargs)
    use_bias = config.get("use_bias", True)
    weights = b.weights(3 if use_bias else 2)
    kernel, recurrent = weights[:2]
    x_proj = dense(b, x, kernel, weights[2] if use_bias else None)
    h, outputs = _zeros(b, x, recurrent.type.shape[0]), []
    for xt in _steps(b, x_proj, config.get("go_backwards", False)):
        h = activation(
            b, config.get("activation", "tanh"), b.call("add", xt, dense(b, h, recurrent))
        )
        outputs.append(h)
    return _sequence_outputs(b, config, outputs, (h,))


# -- MultiHeadAttention -----------------------------------------------------------------------


def _project(b, x, kernel, bias):
    """einsum("btd,dhk->bthk", x, kernel) + bias, as one dense over the flattened heads."""
    d, heads, k = kernel.type.shape
    y = dense(b, x, b.reshape(kernel, (d, heads * k)),
              None if bias is None else b.reshape(bias, (heads * k,)))  # fmt: skip
    n, t = x.type.shape[:2]
    return b.reshape(y, (n, t, heads, k))


def _heads_first(b, x):
    """(N, T, H, K) -> (N * H, T, K)."""
    n, t, h, k = x.type.shape
    return b.reshape(b.transpose(x, (0, 2, 1, 3)), (n * h, t, k))


@keras_layer("MultiHeadAttention")
def multi_head_attention(b, config, query, value, key=None, attention_mask=None,
                         return_attention_scores=False, training=None, use_causal_mask=False,
                         **_):  # fmt: skip
    if attention_mask is not None:
        raise LayerError("attention_mask is not supported")
    axes = config.get("attention_axes")
    if axes is not None and list(axes) != [query.type.ndim - 2]:
        raise LayerError(f"attention_axes {axes} are not supported (only the sequence axis)")
    if query.type.ndim != 3:
        raise LayerError(f"query of rank {query.type.ndim} is not supported (rank 3 is)")
    key = value if key is None else key
    use_bias = config.get("use_bias", True)
    w = b.weights(8 if use_bias else 4)
    if not use_bias:
        w = [w[0], None, w[1], None, w[2], None, w[3], None]
    q = _project(b, query, w[0], w[1])
    k = _project(b, key, w[2], w[3])
    v = _project(b, value, w[4], w[5])
    n, tq, heads, kd = q.type.shape
    tk = k.type.shape[1]
    q = b.call("multiply", q, b.scalar(1.0 / math.sqrt(kd), q))
    scores = b.call("nn.batch_matmul", _heads_first(b, q), _heads_first(b, k), transpose_b=True)
    if use_causal_mask:
        allowed = np.tril(np.ones((tq, tk), bool))  # as Keras: key j <= query i
        mask = np.where(allowed, 0.0, -1e9).astype(scores.type.dtype.numpy_name)
        scores = b.call("add", scores, b.const(mask))
    probs = b.call("nn.softmax", scores, axis=-1)
    ctx = b.call("nn.batch_matmul", probs, _heads_first(b, v))  # (N * H, Tq, vd)
    vd = ctx.type.shape[-1]
    ctx = b.transpose(b.reshape(ctx, (n, heads, tq, vd)), (0, 2, 1, 3))
    out_kernel = w[6]
    out_dim = out_kernel.type.shape[-1]
    y = dense(b, b.reshape(ctx, (n, tq, heads * vd)), b.reshape(out_kernel, (heads * vd, out_dim)),
              w[7])  # fmt: skip
    if return_attention_scores:
        return y, b.reshape(probs, (n, heads, tq, tk))
    return y
