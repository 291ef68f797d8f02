"""GPU schedule of dense / matmul / batch_matmul: block tiles of the output, each thread a small
register tile, the operands' k-slices staged through shared memory.

    out[b..., i, j] = sum_k A[b..., i, k] * B[..., k, j]   (+ an element-wise epilogue)

    block (blockIdx.z: batch, blockIdx.y: i / TM, blockIdx.x: j / TN), TM = ty * rm, TN = tx * rn
      thread (threadIdx.y, threadIdx.x): an rm x rn tile of C in registers (scope "local")
      for ko: barrier; every thread copies part of A[TM, TK] and B[TK, TN] to shared; barrier
              for ki: C.local[rm, rn] += A.shared[.., ki] * B.shared[ki, ..]
      the epilogue (bias, activation) reads C.local and writes the output

The tile sizes are the knobs of the GPU strategy's "tiled" implementation (topi/gpu/strategy.py;
`config`), by default the rule `tile_config`: 16 x 16 threads with 4 x 4 registers for the
large dims, fewer where a dim is short (a batch-1 dense has one row). The operands are the
reduction's inputs as the compute rule reads them (a transposed weight is read transposed into
shared memory: the copy is where the transpose happens).
"""

from __future__ import annotations

from tessera import te
from tessera.topi.generic import const_extent, traverse
from tessera.topi.gpu.schedule import bind_flat, inline_elementwise
from tessera.topi.strategy import Config, record_config

TK = 8  # k-slice staged in shared memory per iteration


def _dim_config(extent: int) -> tuple[int, int]:
    """(threads, registers per thread) along an output dim of `extent`."""
    if extent >= 64:
        return 16, 4
    if extent >= 16:
        return 16, 1
    threads = 1
    while threads < extent:
        threads *= 2
    return threads, 1


def tile_config(m: int, n: int) -> dict:
    ty, rm = _dim_config(m)
    tx, rn = _dim_config(n)
    return {"ty": ty, "rm": rm, "tx": tx, "rn": rn, "tk": TK}


def _reduction(outs) -> te.ComputeOp:
    found = []
    traverse(outs, lambda op: found.append(op) if op.is_reduction else None)
    if len(found) != 1:
        raise ValueError(f"a matmul group has one reduction, found {len(found)}")
    return found[0]


def schedule_matmul(outs, target=None, config=None) -> te.Schedule:
    """The tiled schedule above for a group anchored by dense, matmul or batch_matmul;
    `config`: the GPU strategy's (ty, tx, rm, rn, tk of "tiled"; "flat": one thread per
    output, its reduction serial), None: the rule (`tile_config`)."""
    outs = list(outs)
    s = te.create_schedule([t.op for t in outs])
    inline_elementwise(s, outs)
    if config is not None and config.impl == "flat":
        return _fallback(s, outs)
    red = _reduction(outs)
    out = outs[0]
    if len(outs) != 1 or len(red.axis) < 2 or len(red.reduce_axis) != 1:
        return _fallback(s, outs)
    m, n = const_extent(red.axis[-2]), const_extent(red.axis[-1])
    if m is None or n is None or tuple(out.shape) != tuple(red.output(0).shape):
        return _fallback(s, outs)
    cfg = tile_config(m, n) if config is None else {k: config[k] for k in tile_config(m, n)}
    record_config(s, Config("tiled", cfg))
    inputs = list(red.input_tensors)
    if out.op is red:  # the result is written from registers by a copy stage
        local = s.cache_write(out, "local")
        red_stage = s[local]
    else:
        s[red].set_scope("local")
        red_stage = s[red]
    thread_x = _bind_output(s, out, cfg)
    red_stage.compute_at(s[out], thread_x)
    ko, ki = red_stage.split(red_stage.op.reduce_axis[0], factor=cfg["tk"])
    red_stage.reorder(ko, ki, *red_stage.op.axis)
    # the register tile is indexed by these loops: unrolled, its elements stay in registers
    for iv in (ki, *red_stage.op.axis[-2:]):
        red_stage.unroll(iv)
    for t in inputs:
        cache = s.cache_read(t, "shared", [red_stage.op])
        s[cache].compute_at(red_stage, ko)
        _cooperative_fetch(s, cache, cfg)
    return s


def _bind_output(s: te.Schedule, out: te.Tensor, cfg: dict):
    stage = s[out]
    *batch, i, j = stage.op.axis
    io, ii = stage.split(i, factor=cfg["ty"] * cfg["rm"])
    it, ir = stage.split(ii, factor=cfg["rm"])
    jo, ji = stage.split(j, factor=cfg["tx"] * cfg["rn"])
    jt, jr = stage.split(ji, factor=cfg["rn"])
    bz = stage.fuse(*batch) if len(batch) > 1 else (batch[0] if batch else None)
    order = ([bz] if bz is not None else []) + [io, jo, it, jt, ir, jr]
    stage.reorder(*order)
    if bz is not None:
        stage.bind(bz, te.thread_axis("blockIdx.z"))
    stage.bind(io, te.thread_axis("blockIdx.y"))
    stage.bind(jo, te.thread_axis("blockIdx.x"))
    stage.bind(it, te.thread_axis("threadIdx.y"))
    stage.bind(jt, te.thread_axis("threadIdx.x"))
    stage.unroll(ir)
    stage.unroll(jr)
    return jt


def _cooperative_fetch(s: te.Schedule, cache: te.Tensor, cfg: dict) -> None:
    """All threads of the block copy the tile: fused axes split over (threadIdx.y, threadIdx.x)."""
    stage = s[cache]
    fused = stage.fuse(*stage.op.axis) if len(stage.op.axis) > 1 else stage.op.axis[0]
    rest, tx = stage.split(fused, factor=cfg["tx"])
    _, ty = stage.split(rest, factor=cfg["ty"])
    stage.bind(ty, te.thread_axis("threadIdx.y"))
    stage.bind(tx, te.thread_axis("threadIdx.x"))


def _fallback(s: te.Schedule, outs) -> te.Schedule:
    traverse(outs, lambda op: None if s[op].attach_type.value == "inline" else bind_flat(s, op))
    return s
