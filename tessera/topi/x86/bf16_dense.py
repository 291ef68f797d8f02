"""bf16 dense: float32 data times a bfloat16 weight, float32 accumulation, on `dot_bf16`
(vdpbf16ps with AVX512_BF16).

    wp = pack_bf16_weight(w)                  # (N, K) float32 -> (ceil(N/16), ceil(K/2), 16) int32
    %y = bf16.dense(%x, %wp, units=N) : f32[..., N]       # %x: f32[..., K]

Two consecutive K values share an int32 word (low half: the even k), the operand layout of
vdpbf16ps. The weight is rounded to bfloat16 once, at compile time (tessera/quantize/bf16.py);
the data is rounded per call (round to nearest even) while its words are packed, once, at root,
like the int8 dense's bytes. The micro-kernel is the float dense's (topi/x86/dense.py): mr rows
x nv vectors of float32 accumulators in registers, one broadcast word of x and nv weight
vectors per step of k, the epilogue (bias, GELU, residual add) on each tile. Each vdpbf16ps does
32 multiply-adds where an FMA does 16: for the same loop the products cost half.
"""

from __future__ import annotations

import numpy as np

from tessera import te, tir
from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import type_error
from tessera.runtime.ndarray import bfloat16_bits_to_float, float_to_bfloat16_bits
from tessera.tir import op as tir_op
from tessera.topi.generic import inline_injective
from tessera.topi.qnn import PACK_TAG
from tessera.topi.transform import ravel, unravel_rows
from tessera.topi.x86.dense import find_tagged, schedule_gemm
from tessera.topi.x86.int8_dense import int32_blocking, schedule_pack

PANEL = 16  # output columns per weight panel: one AVX-512 vector of float32
TAG = "bf16_dense"


def round_bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 (nearest, ties to even), as float32 values."""
    return bfloat16_bits_to_float(float_to_bfloat16_bits(np.asarray(x, np.float32)))


def pack_bf16_weight(w: np.ndarray) -> np.ndarray:
    """A dense weight (N, K) float32 as panels (ceil(N/16), ceil(K/2), 16) of int32 words, each
    holding two bfloat16 of consecutive k (the even k in the low half)."""
    n, k = w.shape
    bits = np.zeros((-(-n // PANEL) * PANEL, -(-k // 2) * 2), np.uint16)
    bits[:n, :k] = float_to_bfloat16_bits(np.asarray(w, np.float32))
    words = np.ascontiguousarray(bits).view(np.int32)  # little-endian: k even in the low half
    panels = words.reshape(-1, PANEL, words.shape[1]).transpose(0, 2, 1)
    return np.ascontiguousarray(panels)


def unpack_bf16_weight(wp: np.ndarray, units: int, k: int) -> np.ndarray:
    """The inverse of pack_bf16_weight: (N, K) float32 (the bfloat16 values)."""
    words = np.ascontiguousarray(wp.transpose(0, 2, 1).reshape(-1, wp.shape[1]))[:units]
    return bfloat16_bits_to_float(words.view(np.uint16))[:, :k]


def _bf16_half(v, high: bool):
    """float32 v rounded to bfloat16 (nearest even), its 16 bits in the high or low half of a
    uint32 (NaN and infinities are not special: no such value is a weight or activation here)."""
    bits = tir_op.reinterpret(v, "uint32")
    lsb = tir_op.bitwise_and(tir_op.shift_right(bits, 16), tir.const(1, "uint32"))
    r = bits + tir.const(0x7FFF, "uint32") + lsb
    if high:
        return tir_op.bitwise_and(r, tir.const(0xFFFF0000, "uint32"))
    return tir_op.shift_right(r, 16)


def bf16_dense(x: te.Tensor, wp: te.Tensor, units: int) -> te.Tensor:
    """(..., K) float32 times panels wp -> (..., units) float32: sum_k bf16(x[k]) w[n, k]."""
    lead = [int(d.value) for d in x.shape[:-1]]
    K = int(x.shape[-1].value)
    panels, k2, nr = (int(d.value) for d in wp.shape)
    if k2 != -(-K // 2) or panels * nr < units:
        raise ValueError(f"bf16.dense: data {x.shape}, packed weight {wp.shape}, units {units}")
    M = int(np.prod(lead)) if lead else 1

    def row(r):
        return unravel_rows(r, lead)

    def word(r, k):
        lo = _bf16_half(x(*row(r), k * 2), False)
        if K % 2:  # past K: a zero weight meets the last value again (in bounds)
            hi = _bf16_half(x(*row(r), tir_op.min(k * 2 + 1, K - 1)), True)
        else:
            hi = _bf16_half(x(*row(r), k * 2 + 1), True)
        return tir_op.reinterpret(tir_op.bitwise_or(hi, lo), "int32")

    xp = te.compute((M, k2), word, name="x_bf16", tag=PACK_TAG)
    k = te.reduce_axis((0, k2), name="k")
    rows = te.compute(
        (M, units),
        lambda r, j: te.sum(
            tir_op.dot_bf16(tir.const(0.0, "float32"), xp[r, k], wp[j // nr, k, j % nr]), axis=k
        ),
        name="bf16_dense",
        tag=TAG,
        attrs={"nr": nr},
    )
    return te.compute(
        (*lead, units), lambda *i: rows(ravel(i[:-1], lead), i[-1]), name="bf16_out",
        tag="injective",
    )  # fmt: skip


def schedule_bf16_dense(outs, target=None) -> te.Schedule:
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    schedule_pack(s, outs, target)
    anchor = find_tagged(outs, TAG)
    M, N = (int(d.value) for d in anchor.shape)
    K2 = int(anchor.op.reduce_axis[0].dom.extent.value)
    nr = int(anchor.op.attrs["nr"])
    # float32 lanes are as many per vector as int32 ones: the int8 dense's blocking rule
    return schedule_gemm(s, outs, anchor, int32_blocking(target, M, N, K2, nr), target)


# -- the graph op ------------------------------------------------------------------------------

dense = register_op("bf16.dense", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@dense.type_rule
def _(x: TensorType, wp: TensorType, units) -> TensorType:
    if str(x.dtype) != "float32" or x.ndim < 1:
        raise type_error("bf16.dense", f"data must be float32, got {x}")
    if str(wp.dtype) != "int32" or wp.ndim != 3:
        raise type_error("bf16.dense", f"expects int32 weight panels (P, K/2, 16), got {wp}")
    if wp.shape[1] != -(-x.shape[-1] // 2) or wp.shape[0] * wp.shape[2] < units:
        raise type_error("bf16.dense", f"data {x} and weight panels {wp} disagree ({units} units)")
    return TensorType((*x.shape[:-1], units), "float32")


@dense.reference
def _(x, wp, units):
    """bfloat16 products summed in float64: within float32 rounding of the kernel's order."""
    w = unpack_bf16_weight(wp, units, x.shape[-1]).astype(np.float64)
    return (round_bf16(x).astype(np.float64) @ w.T).astype(np.float32)


@dense.compute
def _(x, wp, *, units):
    return bf16_dense(x, wp, units)


dense.schedule("generic")(schedule_bf16_dense)
dense.schedule("x86")(schedule_bf16_dense)
