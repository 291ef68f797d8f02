"""x86 matmul / batch_matmul / dense whose second operand is not pre-packed: attention products.

    s = schedule_matmul([add(multiply(matmul(q, kt), scale), mask)], target)

The same register-blocked micro-kernel as `dense.py` (mr rows x nv vectors of accumulators in
registers for the whole k loop, the group's element-wise epilogue applied per tile), reading B's
rows directly: row k of B holds the tile's nr columns contiguously, so each k step is nv vector
loads, with no packing copy per call. A transposed B (dense's weight, batch_matmul's
transpose_b) goes through its transposing stage (tag "dense_pack"), computed once per call when
there are enough rows to pay for it, else inlined. Batch axes (and, for dense, all leading axes
but the last row axis) and the row/column tiles run in one parallel loop. Products with a 1-D
operand (matrix-vector) keep the generic schedule.
"""

from __future__ import annotations

import math

from tessera import te
from tessera.topi import generic
from tessera.topi.generic import inline_injective, traverse
from tessera.topi.nn.dense import PACK_TAG
from tessera.topi.nn.schedule import schedule_dense as generic_schedule_dense
from tessera.topi.strategy import Config, record_config, recorded_config
from tessera.topi.symbolic import (
    dispatch_by_size,
    representative,
    representative_shape,
    shape_vars,
)
from tessera.topi.x86.dense import (
    choose_blocking,
    fit_blocking,
    knob_values,
    schedule_gemm,
    with_config,
    with_parallel,
)

ANCHOR_TAGS = ("dense", "matmul", "batch_matmul")


def _anchor(outs) -> te.Tensor | None:
    found = []
    traverse(outs, lambda op: found.append(op.output(0)) if op.tag in ANCHOR_TAGS else None)
    return found[0] if found else None


def _is_matrix_product(anchor: te.Tensor) -> bool:
    """Rows x columns in the last two axes of the output, both operands read as matrices."""
    if anchor.ndim < 2:
        return False
    if anchor.op.tag == "matmul":  # numpy.matmul drops the axis of a 1-D operand
        inputs = anchor.op.input_tensors
        a, b = (inputs[0], inputs[0]) if len(inputs) == 1 else inputs[:2]  # matmul(x, x)
        return a.ndim >= 2 and b.ndim >= 2
    return True


def schedule_matmul(outs, target=None, config=None) -> te.Schedule:
    """dense / matmul / batch_matmul groups (see the module docstring). `config`: the x86
    strategy's (topi/x86/strategy.py): "generic", or "blocked" with knobs mr, nv, kc."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    anchor = _anchor(outs)
    use_generic = config is not None and config.impl == "generic"
    if anchor is None or not _is_matrix_product(anchor) or not _blocked_dtype(anchor, target):
        use_generic = True
    if use_generic:
        s = generic_schedule_dense(outs, target)
        record_config(s, Config("generic"))
        return s
    k_extent = anchor.op.reduce_axis[0].dom.extent
    variables = shape_vars(anchor.shape, [k_extent])
    if config is not None and not config.get("size_buckets", False):
        return _schedule_blocked(outs, anchor, target, config)  # one tile
    # the rules' tiles per size bucket; a config's tile for the top bucket (Note [size buckets])
    return dispatch_by_size(
        variables,
        lambda: _blocked_and_key(outs, anchor, target, None),
        None if config is None else lambda: _blocked_and_key(outs, anchor, target, config),
    )


def _blocked_dtype(anchor, target) -> bool:
    """float32, or float16 where the target blocks it (Note [half blocks] in strategy.py)."""
    from tessera.topi.x86.strategy import blocked_dtypes

    dtype = str(anchor.dtype)
    return dtype == "float32" or (target is not None and dtype in blocked_dtypes(target))


def _blocked_and_key(outs, anchor, target, config):
    """The schedule at the current sizes (the rules', or the config's), and its knobs."""
    s = _schedule_blocked(outs, anchor, target, config)
    return s, recorded_config(s)


def _schedule_blocked(outs, anchor, target, config) -> te.Schedule:
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    # symbolic dims (batch, M, N, K): the rules at their representative sizes (topi/symbolic.py)
    shape = representative_shape(anchor.shape)
    M, N = shape[-2], shape[-1]
    K = representative(anchor.op.reduce_axis[0].dom.extent)
    rows = math.prod(shape[:-1])
    lanes = target.vector_lanes(anchor.dtype) if target is not None else 4
    for t in anchor.op.input_tensors:
        if isinstance(t.op, te.ComputeOp) and t.op.tag == PACK_TAG:
            if rows >= lanes:
                generic.schedule_elementwise_stage(s, t, target)
            else:
                s[t].compute_inline()
    if config is None:
        blk = fit_blocking(target, M, N, K)
    else:
        dtype = str(anchor.dtype)
        blk = with_config(choose_blocking(target, M, N, K, nv=config["nv"], dtype=dtype), config)
    blk = with_parallel(blk, math.prod(shape[:-2]) if len(shape) > 2 else 0, M, N)
    record_config(s, Config("blocked", knob_values(blk)))
    return schedule_gemm(s, outs, anchor, blk, target, row_axes=anchor.ndim - 2)
