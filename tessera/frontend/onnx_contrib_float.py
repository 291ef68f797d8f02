"""ONNX converters for the float ops of the `com.microsoft` domain that exporters and ORT's
transformer optimizer emit, in graph ops (semantics of ORT's contrib kernels):

    FusedConv(X, W, B, Z)           activation(conv(X, W) + B + Z)
    FusedMatMul(A, B)               alpha * op(A) @ op(B)
    Gelu / BiasGelu / FastGelu / QuickGelu
    SkipLayerNormalization          LayerNorm(input + skip + bias), and the sum as output 3
    EmbedLayerNormalization         LayerNorm(word[ids] + position[pos] + segment[seg]), mask sums
    Attention                       packed QKV projection, heads, masks, softmax, merged heads

Attention covers mask_index of shape (batch) (valid lengths), (batch, total) (0/1 raw mask)
and (batch, q, total), `unidirectional` and `scale`; `past` and relative position bias raise.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.frontend.onnx_nn import conv as onnx_conv
from tessera.frontend.onnx_registry import NodeError, onnx_op

MS = "com.microsoft"

_ACTIVATIONS = {
    "Relu": lambda b, x, p: b.call("nn.relu", x),
    "Tanh": lambda b, x, p: b.call("tanh", x),
    "Sigmoid": lambda b, x, p: b.call("sigmoid", x),
    "LeakyRelu": lambda b, x, p: b.call("nn.leaky_relu", x, alpha=p[0] if p else 0.01),
    "Clip": lambda b, x, p: b.call("clip", x, a_min=float(p[0]), a_max=float(p[1])),
    "HardSigmoid": lambda b, x, p: b.call("nn.hardsigmoid", x, alpha=p[0], beta=p[1]),
}


@onnx_op("FusedConv", domain=MS)
def fused_conv(b, X, W, B=None, Z=None, *, activation="", activation_params=None, **conv_attrs):
    y = onnx_conv(b, X, W, B, **conv_attrs)
    if Z is not None:
        y = b.call("add", y, Z)
    if not activation:
        return y
    if activation not in _ACTIVATIONS:
        raise NodeError(f"FusedConv activation {activation!r} is not supported")
    return _ACTIVATIONS[activation](b, y, list(activation_params or ()))


def _swap_last(b, x):
    nd = x.type.ndim
    return b.call("transpose", x, axes=(*range(nd - 2), nd - 1, nd - 2))


@onnx_op("FusedMatMul", domain=MS)
def fused_matmul(b, A, B, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    if transBatchA or transBatchB:
        raise NodeError("FusedMatMul with transBatchA/transBatchB is not supported")
    y = b.call("matmul", _swap_last(b, A) if transA else A, _swap_last(b, B) if transB else B)
    return y if alpha == 1.0 else b.call("multiply", y, b.scalar(alpha, y))


@onnx_op("Gelu", domain=MS)
def gelu(b, X):
    return b.call("nn.gelu", X)


@onnx_op("BiasGelu", domain=MS)
def bias_gelu(b, A, B):
    return b.call("nn.gelu", b.call("add", A, B))


@onnx_op("FastGelu", domain=MS)
def fast_gelu(b, X, bias=None):
    x = X if bias is None else b.call("add", X, bias)
    return b.call("nn.gelu", x, approximate="tanh")


@onnx_op("QuickGelu", domain=MS)
def quick_gelu(b, X, *, alpha=1.702):
    return b.call("multiply", X, b.call("sigmoid", b.call("multiply", X, b.scalar(alpha, X))))


def _layer_norm(b, x, gamma, beta, epsilon):
    if beta is None:
        beta = b.const(np.zeros(gamma.type.shape, gamma.type.dtype.numpy_name))
    return b.call("nn.layer_norm", x, gamma, beta, axis=-1, epsilon=epsilon)


@onnx_op("SkipLayerNormalization", domain=MS)
def skip_layer_norm(b, input, skip, gamma, beta=None, bias=None, *, epsilon=1e-12):
    s = b.call("add", input, skip)
    if bias is not None:
        s = b.call("add", s, bias)
    y = _layer_norm(b, s, gamma, beta, epsilon)
    if b.num_outputs == 1:
        return y
    from tessera.frontend.onnx_nn import _layer_norm_stats

    mean, inv = _layer_norm_stats(b, s, -1, epsilon, 1)
    return (y, mean, inv, s)[: b.num_outputs]


@onnx_op("EmbedLayerNormalization", domain=MS)
def embed_layer_norm(b, input_ids, segment_ids, word_embedding, position_embedding,
                     segment_embedding=None, gamma=None, beta=None, mask=None,
                     position_ids=None, *, epsilon=1e-12, mask_index_type=1):  # fmt: skip
    batch, seq = b.shape_of(input_ids)
    emb = b.call("gather", word_embedding, input_ids, axis=0)
    if position_ids is None:
        position_ids = b.const(np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq)))
    emb = b.call("add", emb, b.call("gather", position_embedding, position_ids, axis=0))
    if segment_embedding is not None and segment_ids is not None:
        emb = b.call("add", emb, b.call("gather", segment_embedding, segment_ids, axis=0))
    y = _layer_norm(b, emb, gamma, beta, epsilon)
    if mask is None:
        mask_index = b.const(np.zeros(batch, np.int32))
    else:
        m = b.call("cast", mask, dtype="int32")
        mask_index = b.call("sum", m, axis=(1,), keepdims=False)
    return (y, mask_index, emb)[: max(1, b.num_outputs)]


def _heads(b, x, batch, seq, heads, size):
    x = b.reshape(x, (batch, seq, heads, size))
    return b.call("transpose", x, axes=(0, 2, 1, 3))


def _attention_bias(b, mask_index, batch, seq, total, unidirectional, fill):
    """Additive (batch, 1, seq, total) float32 bias of the masks, or None."""
    allowed = None
    if unidirectional:
        causal = np.tril(np.ones((seq, total), bool), k=total - seq)
        allowed = b.const(causal.reshape(1, 1, seq, total))
    if mask_index is not None:
        shape = b.shape_of(mask_index)
        if len(shape) == 1 and shape[0] == batch:  # valid lengths (right padding)
            pos = b.const(np.arange(total, dtype=np.int32).reshape(1, 1, 1, total))
            lens = b.reshape(b.call("cast", mask_index, dtype="int32"), (batch, 1, 1, 1))
            m = b.call("less", pos, lens)
        elif len(shape) == 2:
            m = b.call("not_equal", b.reshape(mask_index, (batch, 1, 1, total)),
                       b.scalar(0, mask_index))  # fmt: skip
        elif len(shape) == 3:
            m = b.call("not_equal", b.reshape(mask_index, (batch, 1, seq, total)),
                       b.scalar(0, mask_index))  # fmt: skip
        else:
            raise NodeError(f"Attention mask_index of shape {shape} is not supported")
        allowed = m if allowed is None else b.call("logical_and", allowed, m)
    if allowed is None:
        return None
    zero, neg = b.const(np.float32(0)), b.const(np.float32(fill))
    return b.call("where", allowed, zero, neg)


@onnx_op("Attention", domain=MS)
def attention(b, input, weights, bias=None, mask_index=None, past=None,
              relative_position_bias=None, past_sequence_length=None, *, num_heads,
              qkv_hidden_sizes=None, unidirectional=0, scale=0.0, mask_filter_value=-10000.0,
              do_rotary=0, past_present_share_buffer=0, rotary_embedding_dim=0):  # fmt: skip
    if past is not None or relative_position_bias is not None or do_rotary:
        raise NodeError("Attention with past state, relative position bias or rotary embedding "
                        "is not supported")  # fmt: skip
    batch, seq, _ = b.shape_of(input)
    hq, hk, hv = qkv_hidden_sizes or (b.shape_of(weights)[1] // 3,) * 3
    qkv = b.call("matmul", input, weights)
    if bias is not None:
        qkv = b.call("add", qkv, bias)
    q, k, v = b.call("split", qkv, axis=2, sections=(hq, hk, hv))
    q = _heads(b, q, batch, seq, num_heads, hq // num_heads)
    k = _heads(b, k, batch, seq, num_heads, hk // num_heads)
    v = _heads(b, v, batch, seq, num_heads, hv // num_heads)
    alpha = scale or 1.0 / math.sqrt(hq // num_heads)
    kt = b.call("transpose", k, axes=(0, 1, 3, 2))
    scores = b.call("multiply", b.call("matmul", q, kt), b.const(np.float32(alpha)))
    mask = _attention_bias(b, mask_index, batch, seq, seq, unidirectional, mask_filter_value)
    if mask is not None:
        scores = b.call("add", scores, mask)
    probs = b.call("nn.softmax", scores, axis=-1)
    out = b.call("transpose", b.call("matmul", probs, v), axes=(0, 2, 1, 3))
    out = b.reshape(out, (batch, seq, hv))
    if b.num_outputs == 1:
        return out
    present = b.call("concatenate", b.reshape(k, (1, *b.shape_of(k))),
                     b.reshape(v, (1, *b.shape_of(v))), axis=0)  # fmt: skip
    return out, present
