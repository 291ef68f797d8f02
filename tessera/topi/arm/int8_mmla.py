"""int8 dense on AArch64's matrix step (FEAT_I8MM's usmmla): qnn.dense_mmla.

    wm = pack_mmla_weight(w8, pairs)            # (N, K) int8 -> (ceil(N/2p), ceil(K/8), 4p) int32
    acc = qnn_dense_mmla(x, wm_tensor, units=N) # x (..., K) uint8/int8 -> (..., N) int32
    s = schedule_qnn_dense_mmla([requantize(acc - comp, scale)], target)

It computes what qnn.dense means, sum x_u w' (Note [int8 operands] in topi/qnn.py): the
graph pass pack_qnn_weights rewrites a qnn.dense with a constant weight into it where the
"arm" strategy of qnn.dense says "mmla" (cores with i8mm), re-packing the weight once.

Note [i8mm matrix step]
usmmla v.4s (FEAT_I8MM) takes a 2x8 uint8 matrix (16 bytes: row 0, then row 1) and a 2x8 int8
one (columns 0 and 1 of an 8x2 operand) and adds their 2x2 int32 product to its 4 lanes, lane
2i + j = row i x column j: 32 products per instruction where usdot (dot_u8i8) makes 16, and
sdot's exact pair (Note [int8 dot]) 16 in two. Its lanes mix two rows and two columns, so
it is a kernel of its own, not a lane-wise step in dense's loops:
- the data is packed per call in row pairs: x_pairs[m2, q, l] is word 2q + l % 2 (bytes 8q ..
  8q + 7) of row 2 m2 + l // 2 (the last row repeats past M, its results are dropped);
- the weight once, at compile time, in column pairs: lanes 4c .. 4c + 3 of panel p, step q
  are words 2q, 2q + 1 of column 2 (p pairs + c), then of the next column (zero past N and K);
- the accumulator qdense_mmla (M2, panels x 4 pairs) holds the 2x2 blocks as vectors, one
  mmla_u8i8 (tir.op) per vector and step of 8 k bytes: the CPU micro-kernel (x86 dense.py's
  schedule_gemm) on 4 int32 lanes, mr row pairs x nv column pairs in registers, each step
  loading mr vectors of x_pairs and nv of the panel (mr * nv + mr + nv registers, Note [arm
  register tile]);
- the output (M, N) takes lane 2 (m % 2) + n % 2 of block (m // 2, n // 2): the epilogue
  (zero-point compensation, bias, requantize) runs on it, after the tiles.
mmla_u8i8 is only meaningful on whole 4-lane vectors: the accumulator's columns are padded to
whole panels so that every vector the schedule makes is whole blocks (the emitter refuses
others). With a fixed SVE length wider than 128 bits (Note [fixed-length SVE]), SVE's usmmla
does every 128-bit segment of a register at once: the vectors are SVE registers (8 lanes on
neoverse-v1: two column pairs), and x_pairs repeats each row pair's 4 words in every segment
(lane l takes l % 4's), so that one load feeds all the segments. The packing unrolls its
lanes: each word is then one 32-bit load (vectorized, each was four byte-lane gathers; 0.42 M
-> 0.32 M below). Under QEMU (bench/arm.py --i8mm, --sve), dense 16x768 @ 768x768 on
neoverse-v1: 0.53 M instructions with NEON's usmmla (-mattr=-sve), 0.32 M with SVE's; 0.74 M
with SVE usdot (the panels kernel), 1.27 M with the SVE sdot pair.
"""

from __future__ import annotations

import math

import numpy as np

from tessera import te
from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import type_error
from tessera.tir import op as tir_op
from tessera.topi import generic
from tessera.topi.generic import inline_injective
from tessera.topi.qnn import PACK_TAG, _word
from tessera.topi.transform import ravel, unravel_rows
from tessera.topi.x86 import dense as x86_dense
from tessera.topi.x86.cpu import vector_registers

MMLA_TAG = "qnn_dense_mmla"
LANES = 4  # int32 lanes of one usmmla: a 2x2 block


def pack_mmla_weight(w: np.ndarray, pairs: int) -> np.ndarray:
    """A dense weight (N, K) int8 as panels (ceil(N / 2 pairs), ceil(K / 8), 4 pairs) of int32
    words, `pairs` column pairs per panel (Note [i8mm matrix step])."""
    n, k = w.shape
    cols, k8 = 2 * pairs, -(-k // 8)
    panels = -(-n // cols)
    padded = np.zeros((panels * cols, k8 * 8), np.int8)
    padded[:n, :k] = w
    blocks = padded.reshape(panels, pairs, 2, k8, 8).transpose(0, 3, 1, 2, 4)
    return np.ascontiguousarray(blocks).reshape(panels, k8, 16 * pairs).view(np.int32)


def unpack_mmla_weight(wm: np.ndarray, units: int, k: int) -> np.ndarray:
    """The inverse of pack_mmla_weight: (units, k) int8."""
    panels, k8, words = wm.shape
    pairs = words // LANES
    b = np.ascontiguousarray(wm).view(np.int8).reshape(panels, k8, pairs, 2, 8)
    return np.ascontiguousarray(b.transpose(0, 2, 3, 1, 4)).reshape(-1, k8 * 8)[:units, :k]


def mmla_lanes(target) -> int:
    """int32 lanes of the kernel's vectors: an SVE register where the target fixes an SVE
    length wider than NEON's (SVE's usmmla takes each 128-bit segment as NEON's does), else 4."""
    bits = getattr(target, "sve_vector_bits", None) if target is not None else None
    return bits // 32 if bits and bits > 128 else LANES


def qnn_dense_mmla(x: te.Tensor, wm: te.Tensor, units: int, lanes: int = LANES) -> te.Tensor:
    """(..., K) uint8/int8 times column-pair panels wm -> (..., units) int32: sum_k x_u w'.
    `lanes`: of the vectors the schedule makes (mmla_lanes), each 4-lane block of the data's
    row-pair words repeated across them (every segment of an SVE register takes the same rows)."""
    lead, K = [int(d.value) for d in x.shape[:-1]], int(x.shape[-1].value)
    panels, k8, nr = (int(d.value) for d in wm.shape)
    if k8 != -(-K // 8) or nr % lanes or lanes % LANES or panels * nr // 2 < units:
        raise ValueError(f"qnn.dense_mmla: data {x.shape}, weight panels {wm.shape}, units {units}")
    M = int(np.prod(lead)) if lead else 1
    m2, dt = -(-M // 2), str(x.dtype)

    def pair_word(r2, q, lane):
        r = r2 * 2 + lane % LANES // 2
        r = tir_op.min(r, M - 1) if M % 2 else r
        rows = unravel_rows(r, lead)

        def get(j):  # past K: zero weights meet any byte; the guard keeps the load in bounds
            kk = (q * 2 + lane % 2) * 4 + j
            return x(*rows, tir_op.min(kk, K - 1)) if K % 8 else x(*rows, kk)

        return _word(get, 4, 0, dt)

    xa = te.compute((m2, k8, lanes), pair_word, name="x_pairs", tag=PACK_TAG)
    k = te.reduce_axis((0, k8), name="k")
    acc = te.compute(
        (m2, panels * nr),
        lambda r, c: te.sum(
            tir_op.mmla_u8i8(0, xa[r, k, c % lanes], wm[c // nr, k, c % nr]), axis=k
        ),
        name="qdense_mmla",
        tag=MMLA_TAG,
        attrs={"nr": nr},
    )

    def out(*i):
        r, n = ravel(i[:-1], lead), i[-1]
        return acc[r // 2, (n // 2) * LANES + (r % 2) * 2 + n % 2]

    return te.compute((*lead, units), out, name="qdense_mmla_out", tag="injective")


def mmla_blocking(target, M2: int, cols: int, K8: int, nr: int | None = None, config=None):
    """The Blocking of the kernel: mr row pairs x nv vectors of mmla_lanes (nr / lanes, the
    panel's; None: chosen too) by Note [arm register tile]'s rule, kc by the L1 rule; a
    config's mr and kc where given."""
    from tessera.topi.arm.strategy import arm_tile

    lanes = mmla_lanes(target)
    panel = None if nr is None else nr // lanes
    mr, nv = arm_tile(vector_registers(target), lanes, M2, cols, panel)
    blk = x86_dense.choose_blocking(target, mr, cols, K8, nv=nv)
    blk = x86_dense.Blocking(lanes, blk.registers, blk.mr, nv, blk.kc, blk.l1, blk.l2)
    return x86_dense.with_config(blk, config)


def _schedule_pairs(s, xa) -> None:
    """x_pairs at root, its lanes unrolled: each word is 4 adjacent bytes of a row, which LLVM
    loads as one 32-bit word where a vector of them was byte-lane gathers (Note [i8mm matrix
    step])."""
    stage = s[xa]
    stage.compute_root()
    r2, q, lane = stage.op.axis
    stage.unroll(lane)
    if math.prod(int(d.value) for d in xa.shape) >= generic._MIN_PARALLEL_WORK:
        stage.parallel(r2)


def schedule_qnn_dense_mmla(outs, target=None, config=None) -> te.Schedule:
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    anchor = x86_dense.find_tagged(outs, MMLA_TAG)
    for t in anchor.op.input_tensors:
        if isinstance(t.op, te.ComputeOp) and t.op.tag == PACK_TAG:
            _schedule_pairs(s, t)
    M2, cols = (int(d.value) for d in anchor.shape)
    K8 = int(anchor.op.reduce_axis[0].dom.extent.value)
    blk = mmla_blocking(target, M2, cols, K8, int(anchor.op.attrs["nr"]), config)
    return x86_dense.schedule_gemm(s, outs, anchor, blk, target)


# -- the op ------------------------------------------------------------------------------------

dense_mmla = register_op("qnn.dense_mmla", kind=OpKind.OUT_ELEMWISE_FUSABLE)


@dense_mmla.type_rule
def _(x: TensorType, wm: TensorType, units, lanes=LANES, config=None) -> TensorType:
    if str(x.dtype) not in ("uint8", "int8") or x.ndim < 1:
        raise type_error("qnn.dense_mmla", f"data must be uint8 or int8, got {x}")
    ok = str(wm.dtype) == "int32" and wm.ndim == 3 and wm.shape[2] % lanes == 0 == lanes % LANES
    if not ok or wm.shape[1] != -(-x.shape[-1] // 8) or wm.shape[0] * wm.shape[2] // 2 < units:
        raise type_error("qnn.dense_mmla", f"weight panels {wm} do not fit {x} ({units} units)")
    return TensorType((*x.shape[:-1], units), "int32")


@dense_mmla.reference
def _(x, wm, units, lanes=LANES, config=None):
    w = unpack_mmla_weight(wm, units, x.shape[-1]).astype(np.int64)
    xu = x.astype(np.int64) + (128 if x.dtype == np.int8 else 0)
    return (xu @ w.T).astype(np.int32)


@dense_mmla.compute
def _(x, wm, *, units, lanes=LANES, config=None):
    return qnn_dense_mmla(x, wm, units, lanes)


for _key in ("arm", "generic"):
    dense_mmla.schedule(_key)(schedule_qnn_dense_mmla)
