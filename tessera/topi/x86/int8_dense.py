"""x86 schedule of qnn.dense: the float dense micro-kernel (topi/x86/dense.py) on int32 lanes.

    s = schedule_qnn_dense([requantize(qnn_dense(x, wp, N) - comp, scale)], target)

Each step of the k loop broadcasts one int32 word (4 bytes of x) per row and issues one
`dot_u8i8` (vpdpbusd with VNNI) per vector of 16 (AVX-512) or 8 (AVX2) output columns: mr x nv
accumulators stay in registers, the epilogue (zero-point compensation, bias, requantize, ReLU,
residual add) runs on each tile after its k loop. The words of x are packed once per call, at
root, in parallel over rows.

# Dispatch point (int8): the schedule is registered on the op in tessera/graph/ops/qnn.py; when
# the strategies table lands, this becomes the "int8" implementation of dense there.
"""

from __future__ import annotations

from tessera import te
from tessera.topi.generic import inline_injective, schedule_elementwise_stage
from tessera.topi.qnn import BMM_TAG, DENSE_TAG, PACK_TAG
from tessera.topi.x86.dense import Blocking, choose_blocking, find_tagged, schedule_gemm


def int32_blocking(target, M: int, N: int, K4: int, nr: int) -> Blocking:
    """The float blocking rules, for int32 lanes (as many per vector as float32) and k words.
    A tile may span several panels of nr columns (its vectors each read one panel): up to the
    rule's nv, in whole panels dividing the columns, rather than the panel's own width (one
    AVX-512 vector: mr would take 30 rows of accumulators, which spill)."""
    lanes = max(1, target.vector_lanes("int32")) if target is not None else 4
    lanes = min(lanes, 16)
    while nr % lanes:
        lanes //= 2
    per_panel = nr // lanes
    most = choose_blocking(target, M, N, K4).nv
    # whole panels whose tiles divide the columns: a tail tile spanning panels is not
    # vectorized (nor, across a panel, correct); else one panel per tile, as before
    nv = max(v for v in range(per_panel, max(most, per_panel) + 1, per_panel)
             if v == per_panel or N % (v * lanes) == 0)  # fmt: skip
    blk = choose_blocking(target, M, N, K4, nv=nv)
    return Blocking(lanes, blk.registers, blk.mr, nv, blk.kc, blk.l1, blk.l2)


def schedule_pack(s, outs, target) -> None:
    """The packed words of the data: computed once, at root, in parallel."""
    found = []

    def visit(op):
        if op.tag == PACK_TAG:
            found.append(op.output(0))

    from tessera.topi.generic import traverse

    traverse(outs, visit)
    for t in found:
        s[t].compute_root()
        schedule_elementwise_stage(s, t, target)


def schedule_qnn_dense(outs, target=None) -> te.Schedule:
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    schedule_pack(s, outs, target)
    anchor = find_tagged(outs, DENSE_TAG)
    M, N = (int(d.value) for d in anchor.shape)
    K4 = int(anchor.op.reduce_axis[0].dom.extent.value)
    nr = int(anchor.op.attrs["nr"])
    return schedule_gemm(s, outs, anchor, int32_blocking(target, M, N, K4, nr), target)


def schedule_qnn_batch_matmul(outs, target=None) -> te.Schedule:
    """qnn.batch_matmul: the same micro-kernel per batch (the batch axis stays outermost)."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    schedule_pack(s, outs, target)
    anchor = find_tagged(outs, BMM_TAG)
    _, M, N = (int(d.value) for d in anchor.shape)
    K4 = int(anchor.op.reduce_axis[0].dom.extent.value)
    lanes = min(16, max(1, target.vector_lanes("int32"))) if target is not None else 4
    nv = 2 if N % (2 * lanes) == 0 else 1  # N is padded to whole vectors (topi/qnn.py)
    blk = int32_blocking(target, M, N, K4, nv * lanes)
    return schedule_gemm(s, outs, anchor, blk, target, row_axes=1)
