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

from tessera.frontend.onnx_registry import NodeError, onnx_op
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
        parts.append(b.const(np.where(allowed, 0, -np.inf).astype(Q.type.dtype.numpy_name)))
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
    dtype = Q.type.dtype.numpy_name
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
