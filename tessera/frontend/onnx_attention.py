"""ONNX converters for Attention (opsets 23-25): scaled dot-product attention in graph ops.

    Q, K, V (3-D: split into heads) -> present K/V (past concatenated) -> GQA head repeat
    -> (Q*sqrt(s)) @ (K*sqrt(s))^T -> softcap -> + bias (mask, causal, window, padding)
    -> softmax (fully masked rows give 0) -> @ V -> (3-D: heads merged)

The bias is a numpy constant where it depends only on shapes (causal and window masks, an
internal cache); it is computed in the graph where it depends on inputs (attn_mask,
nonpad_kv_seqlen). The semantics follow onnx.reference's Attention.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from tessera.frontend.onnx_registry import NodeError, onnx_op, value_dtype
from tessera.graph.ir import parse_dtype


def _np_type(onnx_type: int):
    return helper.tensor_dtype_to_np_dtype(onnx_type)


def _split_heads(b, x, heads, what):
    batch, seq, hidden = b.shape_of(x)
    if heads is None or hidden % heads:
        raise NodeError(f"3-D {what} needs q_num_heads/kv_num_heads dividing {hidden}")
    x = b.reshape(x, (batch, seq, heads, hidden // heads))
    return b.call("transpose", x, axes=(0, 2, 1, 3))


def _repeat_heads(b, x, reps):
    """[h0, h1] -> [h0, h0, h1, h1] (interleaved, as ONNX's GQA)."""
    if reps == 1:
        return x
    n, h, s, d = b.shape_of(x)
    x = b.call("expand", b.reshape(x, (n, h, 1, s, d)), shape=(n, h, reps, s, d))
    return b.reshape(x, (n, h * reps, s, d))


def _allowed_static(q, kv, offset, causal, left, right):
    """(q, kv) bool: which keys each query may attend for a scalar cache offset."""
    diff = np.arange(q).reshape(q, 1) + offset - np.arange(kv).reshape(1, kv)
    allowed = np.ones((q, kv), bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed


def _allowed_per_batch(b, nonpad, q, kv, causal, left, right):
    """(batch, 1, q, kv) bool from the per-batch offsets nonpad_kv_seqlen - q."""
    offset = b.call("subtract", nonpad, b.scalar(q, nonpad))
    offset = b.reshape(offset, (b.shape_of(nonpad)[0], 1, 1, 1))
    i = b.const(np.arange(q, dtype=nonpad.type.dtype.numpy_name).reshape(q, 1))
    j = b.const(np.arange(kv, dtype=nonpad.type.dtype.numpy_name).reshape(1, kv))
    diff = b.call("subtract", b.call("add", i, offset), j)  # (batch, 1, q, kv)
    allowed = None
    zero = b.scalar(0, diff)
    for on, test in ((causal, lambda: b.call("greater_equal", diff, zero)),
                     (left >= 0, lambda: b.call("less_equal", diff, b.scalar(left, diff))),
                     (right >= 0, lambda: b.call("greater_equal", diff,
                                                 b.scalar(-right, diff)))):  # fmt: skip
        if on:
            t = test()
            allowed = t if allowed is None else b.call("logical_and", allowed, t)
    return allowed


def _additive(b, allowed, like):
    """A bool mask as a bias: 0 where allowed, -inf elsewhere."""
    zero, ninf = b.scalar(0, like), b.scalar(-np.inf, like)
    return b.call("where", allowed, zero, ninf)


def _bias(b, Q, attn_mask, nonpad, past_len, q, kv, causal, left, right):
    """The additive bias (a Value or None) and whether each query row is fully masked
    (a Value broadcasting to the scores, or None)."""
    parts = []
    if attn_mask is not None:
        mask = attn_mask
        width = kv - b.shape_of(mask)[-1]
        if width > 0:
            pads = [0] * (2 * mask.type.ndim)
            pads[-1] = width
            fill = 0.0 if mask.type.dtype.is_bool else -np.inf
            mask = b.call("pad", mask, pad_width=tuple(pads), mode="constant", value=fill)
        parts.append(_additive(b, mask, Q) if mask.type.dtype.is_bool else mask)
    windowed = causal or left >= 0 or right >= 0
    if windowed and nonpad is None:
        allowed = _allowed_static(q, kv, past_len, causal, left, right)
        parts.append(b.const(np.where(allowed, 0, -np.inf).astype(value_dtype(Q.type.dtype))))
    elif windowed:
        parts.append(_additive(b, _allowed_per_batch(b, nonpad, q, kv, causal, left, right), Q))
    if nonpad is not None:
        n = b.shape_of(nonpad)[0]
        j = b.const(np.arange(kv, dtype=nonpad.type.dtype.numpy_name).reshape(1, kv))
        keep = b.call("less", j, b.reshape(nonpad, (n, 1)))
        parts.append(b.reshape(_additive(b, keep, Q), (n, 1, 1, kv)))
    if not parts:
        return None, None
    bias = parts[0]
    for p in parts[1:]:
        bias = b.call("add", bias, p)
    top = b.call("max", bias, axis=(-1 + bias.type.ndim,), keepdims=True)
    masked = b.call("equal", top, b.scalar(-np.inf, top))
    return bias, masked


@onnx_op("Attention", since=23)
def attention(b, Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None,
              *, is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0,
              scale=None, softcap=0.0, softmax_precision=None, left_window_size=-1,
              right_window_size=-1):  # fmt: skip
    rank3 = Q.type.ndim == 3
    if rank3:
        Q = _split_heads(b, Q, q_num_heads, "Q")
        K = _split_heads(b, K, kv_num_heads, "K")
        V = _split_heads(b, V, kv_num_heads, "V")
    if (past_key is None) != (past_value is None):
        raise NodeError("past_key and past_value must be given together")
    past_len = 0 if past_key is None else b.shape_of(past_key)[2]
    if past_key is not None:
        K = b.call("concatenate", past_key, K, axis=2)
        V = b.call("concatenate", past_value, V, axis=2)
    present_k, present_v = K, V
    hq, hk = b.shape_of(Q)[1], b.shape_of(K)[1]
    if hq != hk:
        if hq % hk:
            raise NodeError(f"{hq} query heads do not group over {hk} key/value heads")
        K, V = _repeat_heads(b, K, hq // hk), _repeat_heads(b, V, hq // hk)
    dtype = value_dtype(Q.type.dtype)
    s = 1 / np.sqrt(b.shape_of(Q)[3]) if scale is None else scale
    s = b.scalar(np.asarray(np.sqrt(s), dtype=dtype), Q)
    kt = b.call("transpose", b.call("multiply", K, s), axes=(0, 1, 3, 2))
    qk = b.call("matmul", b.call("multiply", Q, s), kt)
    if softcap and softcap > 0:
        c = b.scalar(softcap, qk)
        qk = b.call("multiply", b.call("tanh", b.call("divide", qk, c)), c)
    q, kv = b.shape_of(Q)[2], b.shape_of(K)[2]
    bias, masked = _bias(b, Q, attn_mask, nonpad_kv_seqlen, past_len, q, kv, is_causal,
                         left_window_size, right_window_size)  # fmt: skip
    scores = qk if bias is None else b.call("add", qk, bias)
    qk_out = scores if qk_matmul_output_mode == 2 else qk
    if softmax_precision is not None:
        scores = b.call("cast", scores, dtype=parse_dtype(np.dtype(_np_type(softmax_precision))))
    p = b.call("nn.softmax", scores, axis=-1)
    if masked is not None:
        p = b.call("where", masked, b.scalar(0, p), p)
    if p.type.dtype != Q.type.dtype:
        p = b.call("cast", p, dtype=Q.type.dtype)
    if qk_matmul_output_mode == 3:
        qk_out = p
    y = b.call("matmul", p, V)
    if rank3:
        n, h, sq, d = b.shape_of(y)
        y = b.reshape(b.call("transpose", y, axes=(0, 2, 1, 3)), (n, sq, h * d))
    return y, present_k, present_v, qk_out


# -- LinearAttention (opset 27): the recurrence unrolled over the (static) sequence ------------


def _step(b, x, t):
    """x[:, :, t] of a (B, H, T, D) value, as (B, H, D)."""
    n, h, _, d = b.shape_of(x)
    s = b.call("slice", x, begin=(0, 0, t, 0), end=(n, h, t + 1, d), strides=(1, 1, 1, 1))
    return b.reshape(s, (n, h, d))


def _heads_f32(b, x, heads, what):
    x = _split_heads(b, x, heads, what)
    return x if x.type.dtype.numpy_name == "float32" else b.call("cast", x, dtype="float32")


def _per_token(b, v, heads, t_len):
    """decay / beta (B, T, H or H*D) as (B, H, T, 1 or D) float32."""
    n, t, last = b.shape_of(v)
    d = last // heads if last % heads == 0 and last != heads else 1
    h = heads if last != 1 else 1
    v = b.call("transpose", b.reshape(v, (n, t, h, d)), axes=(0, 2, 1, 3))
    return v if v.type.dtype.numpy_name == "float32" else b.call("cast", v, dtype="float32")


@onnx_op("LinearAttention", since=27)
def linear_attention(b, query, key, value, past_state=None, decay=None, beta=None, *,
                     chunk_size=0, kv_num_heads, q_num_heads, scale=0.0,
                     update_rule="gated_delta"):  # fmt: skip
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise NodeError(f"unknown update_rule {update_rule!r}")
    gating, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if (gating and decay is None) or (delta and beta is None):
        raise NodeError(f"update_rule {update_rule!r} needs the decay/beta inputs")
    q4 = _heads_f32(b, query, q_num_heads, "query")
    k4 = _heads_f32(b, key, kv_num_heads, "key")
    v4 = _heads_f32(b, value, kv_num_heads, "value")
    n, hq, t_len, dk = b.shape_of(q4)
    dv = b.shape_of(v4)[3]
    g4 = _per_token(b, decay, kv_num_heads, t_len) if gating else None
    beta4 = _per_token(b, beta, kv_num_heads, t_len) if delta else None
    if past_state is None:
        state = b.const(np.zeros((n, kv_num_heads, dk, dv), np.float32))
    else:
        state = b.call("cast", past_state, dtype="float32")
    s = 1.0 / np.sqrt(dk) if not scale else float(scale)
    outs = []
    for t in range(t_len):
        k_t, v_t = _step(b, k4, t), _step(b, v4, t)
        if gating:
            g = _step(b, g4, t)
            g = b.reshape(g, (*b.shape_of(g), 1))  # (B, H, 1 or dk, 1)
            state = b.call("multiply", state, b.call("exp", g))
        k_col = b.reshape(k_t, (n, kv_num_heads, dk, 1))
        if delta:
            retrieved = b.call("sum", b.call("multiply", state, k_col), axis=(2,), keepdims=False)
            v_t = b.call("multiply", _step(b, beta4, t),
                         b.call("subtract", v_t, retrieved))  # fmt: skip
        outer = b.call("multiply", k_col, b.reshape(v_t, (n, kv_num_heads, 1, dv)))
        state = b.call("add", state, outer)
        read = _repeat_heads(b, state, hq // kv_num_heads)
        q_col = b.reshape(_step(b, q4, t), (n, hq, dk, 1))
        o = b.call("sum", b.call("multiply", q_col, read), axis=(2,), keepdims=False)
        outs.append(b.reshape(b.call("multiply", o, b.scalar(s, o)), (n, hq, 1, dv)))
    y = outs[0] if len(outs) == 1 else b.call("concatenate", *outs, axis=2)
    y = b.reshape(b.call("transpose", y, axes=(0, 2, 1, 3)), (n, t_len, hq * dv))
    out_dtype = query.type.dtype
    state_dtype = out_dtype if past_state is None else past_state.type.dtype
    y = y if out_dtype.numpy_name == "float32" else b.call("cast", y, dtype=out_dtype)
    if state_dtype.numpy_name != "float32":
        state = b.call("cast", state, dtype=state_dtype)
    return y, state
