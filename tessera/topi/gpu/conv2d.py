"""GPU schedule of conv2d (NCHW, groups = 1) as an implicit GEMM: output channels x output
columns per block, the weights and input patch of each channel slice staged in shared memory.

    out[n, f, y, x] = sum_{c, ky, kx} pad(data)[n, c, y * s + ky, x * s + kx] * w[f, c, ky, kx]

    GEMM view: rows = f, columns = (n, y, x), k = (c, ky, kx); nothing is materialized (im2col
    happens in the index arithmetic).
    block (blockIdx.z: n * out_h + y, blockIdx.y: f / TF, blockIdx.x: x / TX)
      thread (threadIdx.y, threadIdx.x): rf output channels x rx columns in registers
      for c.outer: barrier; w[TF, CT, kh, kw] and the input patch [CT, kh', width'] -> shared;
                   barrier; accumulate over (c.inner, ky, kx)

Rows of one block share a y (the output row), so the input patch is a rectangle: CT channels x
the kh rows x the block's columns (and halo). The sizes are the knobs of the GPU strategy's
"implicit_gemm" (topi/gpu/strategy.py; `config`), by default the rule `conv_config`: CT, the
channels per slice, keeps the two shared tiles under SHARED_BUDGET bytes (a 7x7 conv on 3
channels takes them one at a time; the knob `ct` searches up to the device's limit). Grouped
and depthwise convs keep the default schedule (one thread per output element).
"""

from __future__ import annotations

from tessera import te
from tessera.topi.generic import const_extent
from tessera.topi.gpu.dense import _cooperative_fetch, _dim_config, _fallback, _reduction
from tessera.topi.gpu.schedule import MAX_SHARED_BYTES, inline_elementwise
from tessera.topi.rules import RuleKnob
from tessera.topi.strategy import Config, record_config

# the default rule's budget: two thirds of the shared memory (32 KiB); a rule knob (Note [rule
# knobs] in topi/rules.py), the knob `ct` searches up to the device's limit
SHARED_BUDGET = RuleKnob(
    "gpu.conv_shared_bytes", (16 << 10, 24 << 10, 32 << 10, 40 << 10, 48 << 10),
    MAX_SHARED_BYTES * 2 // 3, "shared memory of the default implicit-GEMM conv's two tiles",
)  # fmt: skip


def _static(t: te.Tensor) -> tuple[int, ...]:
    return tuple(int(d.value) for d in t.shape)


def conv_config(f: int, ow: int, c: int, kh: int, kw: int, stride: int) -> dict:
    """Threads and registers per dim, and the channel slice CT that fits the budget."""
    ty, rf = _dim_config(f)
    tx, rx = _dim_config(ow)
    cols = (tx * rx - 1) * stride + kw
    ct = 16
    budget = SHARED_BUDGET.value()
    while ct > 1 and 4 * ct * (ty * rf * kh * kw + kh * cols) > budget:
        ct //= 2
    return {"ty": ty, "rf": rf, "tx": tx, "rx": rx, "ct": min(ct, c)}


def schedule_conv2d(outs, target=None, config=None) -> te.Schedule:
    """The implicit GEMM above; `config`: the GPU strategy's (ty, tx, rf, rx, ct of
    "implicit_gemm"; "flat": one thread per output, its reduction serial), None: the rule
    (`conv_config`)."""
    outs = list(outs)
    s = te.create_schedule([t.op for t in outs])
    inline_elementwise(s, outs)
    if config is not None and config.impl == "flat":
        return _fallback(s, outs)
    red = _reduction(outs)
    out = outs[0]
    data, weight = red.input_tensors if len(red.input_tensors) == 2 else (None, None)
    if (
        data is None
        or len(outs) != 1
        or len(red.axis) != 4
        or len(red.reduce_axis) != 3
        or tuple(out.shape) != tuple(red.output(0).shape)
    ):
        return _fallback(s, outs)
    f_out, cg, kh, kw = _static(weight)
    if _static(data)[1] != cg:  # grouped / depthwise
        return _fallback(s, outs)
    ow = const_extent(red.axis[3])
    in_w = _static(data)[3]
    stride = max(1, (in_w - kw) // max(ow - 1, 1)) if ow > 1 else 1
    cfg = conv_config(f_out, ow, cg, kh, kw, stride)
    if config is not None:
        cfg = {k: config[k] for k in cfg}
    record_config(s, Config("implicit_gemm", cfg))
    if out.op is red:
        red_stage = s[s.cache_write(out, "local")]
    else:
        s[red].set_scope("local")
        red_stage = s[red]
    thread_x = _bind_output(s, out, cfg)
    red_stage.compute_at(s[out], thread_x)
    rc, ry, rx = red_stage.op.reduce_axis
    co, ci = red_stage.split(rc, factor=cfg["ct"])
    n, f, y, x = red_stage.op.axis
    red_stage.reorder(co, ci, ry, rx, n, f, y, x)
    for iv in (f, x):
        red_stage.unroll(iv)
    for t in (data, weight):
        cache = s.cache_read(t, "shared", [red_stage.op])
        s[cache].compute_at(red_stage, co)
        _cooperative_fetch(s, cache, cfg)
    return s


def _bind_output(s: te.Schedule, out: te.Tensor, cfg: dict):
    stage = s[out]
    n, f, y, x = stage.op.axis
    fo, fi = stage.split(f, factor=cfg["ty"] * cfg["rf"])
    ft, fr = stage.split(fi, factor=cfg["rf"])
    xo, xi = stage.split(x, factor=cfg["tx"] * cfg["rx"])
    xt, xr = stage.split(xi, factor=cfg["rx"])
    stage.reorder(n, y, fo, xo, ft, xt, fr, xr)
    rows = stage.fuse(n, y)
    for iv, tag in (
        (rows, "blockIdx.z"),
        (fo, "blockIdx.y"),
        (xo, "blockIdx.x"),
        (ft, "threadIdx.y"),
        (xt, "threadIdx.x"),
    ):
        stage.bind(iv, te.thread_axis(tag))
    stage.unroll(fr)
    stage.unroll(xr)
    return xt
