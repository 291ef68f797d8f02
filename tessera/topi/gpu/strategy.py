"""The GPU strategies (strategy keys "cuda" and "opencl"): the implementations of the ops that
have a GPU schedule of their own, their knobs with today's rules as defaults, and the schedule
rules (`op.schedule(key)`) that take the config.

    nn.dense, matmul,   flat (one thread per output, as dense.py's fallback) | tiled (dense.py:
    nn.batch_matmul     block tiles of ty*rm x tx*rn outputs, a k-slice of tk in shared memory)
    nn.conv2d           flat | implicit_gemm (conv2d.py: ty*rf output channels x tx*rx output
                        columns per block, a slice of ct input channels in shared memory)

Knobs (defaults: `tile_config` and `conv_config`, unchanged):
    tiled          ty, tx (threads along rows and columns), rm, rn (each thread's register
                   tile), tk (the k-slice staged per step)
    implicit_gemm  ty, tx (threads along output channels and columns), rf, rx (registers),
                   ct (input channels per shared slice)
Constraints: the block's threads within the target's limit (`-max-num-threads`, else CUDA's
1024) and its shared tiles within MAX_SHARED_BYTES (what codegen/gpu.py verifies), each
thread's register tile at most MAX_REGISTER_TILE accumulators (the tile is unrolled).
Other ops take `schedule_default` (one thread per output element, long reductions a block of
threads), whose numbers are rule knobs ("gpu.threads", "gpu.tree_reduce_threads"; Note [rule
knobs] in topi/rules.py), not task knobs.

    task = Task.of(dense_call, Target("opencl"))      # opencl:nn.dense(...)
    task.default(target)                               # Config('tiled', rm=4, rn=4, tk=8, ...)
"""

from __future__ import annotations

from tessera.graph.op import get_op
from tessera.topi.gpu.conv2d import conv_config, schedule_conv2d
from tessera.topi.gpu.dense import TK, schedule_matmul, tile_config
from tessera.topi.gpu.schedule import MAX_SHARED_BYTES, max_threads
from tessera.topi.strategy import ConfigSpace, Knob, Workload, register_strategy

GPU_KEYS = ("cuda", "opencl")
THREAD_CANDIDATES = (1, 2, 4, 8, 16, 32)
REGISTER_CANDIDATES = (1, 2, 4, 8)
MAX_REGISTER_TILE = 16  # accumulators per thread: rm*rn (unrolled tk times in the k-slice)


def _static(wl: Workload) -> bool:
    shapes = [s for s, _ in wl.inputs] + [wl.output]
    return all(isinstance(d, int) for s in shapes for d in s)


def _threads(extent: int, default: int) -> tuple[int, ...]:
    """Thread counts along a dim of `extent`: powers of two up to the first that covers it."""
    out = [t for t in THREAD_CANDIDATES if t < 2 * max(extent, 1)]
    return tuple(sorted({*out, default}))


def _itemsize(wl: Workload) -> int:
    from tessera.ir.dtype import DType

    return max(1, DType.parse(wl.dtype(0)).bits // 8)


def _flat_space(wl: Workload, target) -> ConfigSpace:
    return ConfigSpace()


def _matmul_space(wl: Workload, target) -> ConfigSpace | None:
    out = wl.output
    if len(wl.inputs) != 2 or len(out) < 2 or not _static(wl):
        return None
    m, n = out[-2], out[-1]
    rule = tile_config(m, n)
    size = _itemsize(wl)
    knobs = [
        Knob("ty", _threads(m, rule["ty"]), default=rule["ty"]),
        Knob("tx", _threads(n, rule["tx"]), default=rule["tx"]),
        Knob("rm", REGISTER_CANDIDATES, default=rule["rm"]),
        Knob("rn", REGISTER_CANDIDATES, default=rule["rn"]),
        Knob("tk", (4, TK, 16), default=rule["tk"]),
    ]
    limit = max_threads(target)

    def shared(v):  # A[ty*rm, tk] and B[tk, tx*rn]
        return size * v["tk"] * (v["ty"] * v["rm"] + v["tx"] * v["rn"]) <= MAX_SHARED_BYTES

    constraints = [
        lambda v: v["ty"] * v["tx"] <= limit,
        lambda v: v["rm"] * v["rn"] <= MAX_REGISTER_TILE,
        shared,
    ]
    return ConfigSpace(knobs, constraints)


class _Conv:
    """An NCHW conv workload as the implicit GEMM sees it (None: grouped, not 2-d, symbolic)."""

    @staticmethod
    def of(wl: Workload) -> _Conv | None:
        if len(wl.inputs) != 2 or not _static(wl) or wl.attr("groups", 1) != 1:
            return None
        (xs, _), (ws, _) = wl.inputs
        if len(xs) != 4 or len(ws) != 4 or len(wl.output) != 4 or xs[1] != ws[1]:
            return None
        c = _Conv()
        c.f, c.c, c.kh, c.kw = ws
        c.ow = wl.output[3]
        in_w = xs[3] + sum(wl.attr("padding", (0, 0, 0, 0))[1::2])
        c.stride = max(1, (in_w - c.kw) // max(c.ow - 1, 1)) if c.ow > 1 else 1  # as scheduled
        dh, dw = wl.attr("dilation", (1, 1))
        c.window = ((c.kh - 1) * dh + 1, (c.kw - 1) * dw + 1)
        c.stride_w = wl.attr("strides", (1, 1))[1]
        c.size = _itemsize(wl)
        return c

    def shared_bytes(self, v) -> int:
        """Bytes of the two shared tiles: weights [ty*rf, ct, kh, kw] and the input patch
        [ct, window rows, the block's columns and halo]."""
        cols = (v["tx"] * v["rx"] - 1) * self.stride_w + self.window[1]
        patch = self.window[0] * cols
        return self.size * v["ct"] * (v["ty"] * v["rf"] * self.kh * self.kw + patch)


def _conv_space(wl: Workload, target) -> ConfigSpace | None:
    c = _Conv.of(wl)
    if c is None:
        return None
    rule = conv_config(c.f, c.ow, c.c, c.kh, c.kw, c.stride)
    slices = sorted({t for t in (1, 2, 4, 8, 16) if t <= c.c} | {rule["ct"]})
    knobs = [
        Knob("ty", _threads(c.f, rule["ty"]), default=rule["ty"]),
        Knob("tx", _threads(c.ow, rule["tx"]), default=rule["tx"]),
        Knob("rf", REGISTER_CANDIDATES, default=rule["rf"]),
        Knob("rx", REGISTER_CANDIDATES, default=rule["rx"]),
        Knob("ct", tuple(slices), default=rule["ct"]),
    ]
    limit = max_threads(target)
    constraints = [
        lambda v: v["ty"] * v["tx"] <= limit,
        lambda v: v["rf"] * v["rx"] <= MAX_REGISTER_TILE,
        lambda v: c.shared_bytes(v) <= MAX_SHARED_BYTES,
    ]
    return ConfigSpace(knobs, constraints)


for _key in GPU_KEYS:
    for _op in ("nn.dense", "matmul", "nn.batch_matmul"):
        _s = register_strategy(_op, _key)
        _s.implementation("flat")(_flat_space)
        _s.implementation("tiled", priority=1)(_matmul_space)
        get_op(_op).schedule(_key)(schedule_matmul)
    _s = register_strategy("nn.conv2d", _key)
    _s.implementation("flat")(_flat_space)
    _s.implementation("implicit_gemm", priority=1)(_conv_space)
    get_op("nn.conv2d").schedule(_key)(schedule_conv2d)
