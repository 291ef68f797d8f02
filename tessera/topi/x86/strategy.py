"""The x86 strategies: for conv2d and dense/matmul/batch_matmul, the implementations, their
knobs with today's hand rules as defaults, and the layout and packing each config wants.

Those of convs, pools and dense/matmul are registered under the strategy key "cpu" (their rules
are over the vector width, registers and caches, so they serve every CPU target that has no
strategy of its own: arm, riscv), the row reductions' under "x86" (their schedule is x86's).

    nn.conv2d        nchw (generic schedule) | direct_nchwc | depthwise_nchwc | winograd
    nn.dense, matmul generic | blocked (B read as it is) | packed (constant B in panels)
    nn.batch_matmul  generic | blocked
    nn.max_pool2d,   nchw | nchwc (when the input is blocked)
    nn.avg_pool2d
    nn.softmax, nn.log_softmax, nn.layer_norm   generic | rows

Knobs (defaults: the rules of conv2d.py, winograd.py and dense.py, unchanged):
    direct_nchwc     out_block (channel block, Note [block rule] in transform/alter_layout.py,
                     Note [few output channels] below; grouped convs: Note [grouped blocks]),
                     ow_block x oc_vectors (the register tile, Note [conv micro-kernel]),
                     in_block and shared_window (grouped convs: the input block, and one
                     window of input blocks for a tile's oc_vectors, Note [shared windows]),
                     prefetch (Note [weight prefetch]), pad_per_tile (padded convs: Note
                     [padding per tile]), reduce_order and unroll_window (kernels of several
                     taps), unroll_block (Note [conv reduction order]),
                     row_accumulators (Note [row accumulators])
    depthwise_nchwc  ow_block, unroll_tiles (unroll the loop over a row's tiles)
    winograd         out_block, tile (F(2x2) or F(4x4), Note [winograd rule])
    blocked, packed  mr (rows), nv (vectors per row: the panel width nr = nv * lanes), kc,
                     parallel (the parallel loop when tiles have tails: Note [tails] in dense.py),
                     unroll_k (Note [k unrolling] in dense.py), kc_scope, mc, nc (the k
                     blocks around blocks of mc row tiles x nc panels: Note [cache blocks])
    nchwc (pools)    column_group (output columns in flight), pad_rows (Note [pool rows])
    rows             stack_bytes (row buffers up to this size on the stack), split (the lanes
                     of a row reduction's partial: Note [lane split] in nn/softmax.py)

A layout hook (`layout=`) answers graph passes: given the task's workload, a config and what
the pass knows of the input (`context`: "in_block", "in_channels", "in_padded", "winograd"), it
returns the op to emit, the blocks of input and output, the weight in the layout the kernel
reads, and the attributes (with the config); None when the config cannot apply in this context.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.topi.layout import transform_array
from tessera.topi.nn.norm import _acc as _norm_acc
from tessera.topi.nn.softmax import default_split
from tessera.topi.rules import RuleKnob
from tessera.topi.strategy import Config, ConfigSpace, Knob, Workload, register_strategy
from tessera.topi.symbolic import is_static, representative_shape
from tessera.topi.x86 import (
    int8_strategy,  # noqa: F401  (qnn.conv2d's strategy)
    ops,  # noqa: F401  (registers the x86 ops and schedules)
)
from tessera.topi.x86.conv2d import (
    CONV_REDUCE_ORDERS,
    CONV_SPLITS,
    OC_VECTORS,
    GroupWindow,
    _accumulator_budget,
    choose_conv_tile,
    pad_per_tile_rule,
    pad_tile_bytes,
    prefetch_max_reuse,
    row_accumulators_rule,
    window_share,
)
from tessera.topi.x86.cpu import fma_chains, target_cache_sizes, vector_registers
from tessera.topi.x86.dense import (
    blocking_for_panel,
    fit_blocking,
    pack_weight_np,
    panel_width,
    parallel_rule,
)
from tessera.topi.x86.pooling import COLUMN_GROUP
from tessera.topi.x86.softmax import stack_bytes_rule
from tessera.topi.x86.winograd import plan_winograd

# Note [block rule] (transform/alter_layout.py): a conv is blocked only when its output block
# fills at least a 256-bit vector (8 float32; the whole vector where it is narrower, SSE/NEON).
MIN_BLOCK_BITS = 256


def min_block(target, dtype: str = "float32") -> int:
    """In channels: a float16 conv's too is 8 (Note [half blocks])."""
    return min(target.vector_lanes(dtype), MIN_BLOCK_BITS // 32)


def channel_block(channels: int, lanes: int) -> int:
    """The largest power of two dividing `channels`, at most `lanes` (Note [block rule])."""
    block = 1
    while block * 2 <= lanes and channels % (block * 2) == 0:
        block *= 2
    return block


# Note [few output channels]
# A conv whose output channels no block of min_block divides (3, 5, 6, 12, 20 outputs) ran the
# generic NCHW schedule, 10-50x slower than the blocked kernel on the channels padded up to a
# multiple of min_block (a 3x3 conv of 64 channels on 56x56, 1 thread, Zen 4: 6 outputs
# 6.8 ms vs 8 outputs blocked 0.37 ms, 20 outputs 27 ms vs 24 blocked 0.53 ms). So its outputs
# are padded (Note [channel padding] in alter_layout) while the padded channels are at most
# MAX_PAD_WORK times the true ones: 3 outputs padded to 8 still ran 1.35x faster, one output
# padded to 8 1.7x slower than its generic schedule. Channels that a smaller block divides are
# padded to whole vectors when that adds at most LANE_PAD_WORK - 1 of the work (an eighth).
# Both are rule knobs (Note [rule knobs] in topi/rules.py); the blocks they choose are searched
# (knob `out_block`, with the padded block among its candidates, and the nchw implementation).
MAX_PAD_WORK = RuleKnob(
    "conv.max_pad_work", (2, 3, 4, 6, 8), 4,
    "the most padded output channels per true one of a blocked conv (Note [few output channels])",
)  # fmt: skip
LANE_PAD_WORK = RuleKnob(
    "conv.lane_pad_work", (1.0, 1.0625, 1.125, 1.25, 1.5), 1.125,
    "output channels padded to whole vectors while that adds at most this work (x true)",
)  # fmt: skip


def output_block(channels: int, lanes: int, min_block: int = 1) -> tuple[int, int]:
    """(block, padded channels) of a conv's output (Note [channel padding] in alter_layout;
    Note [few output channels] where no block of `min_block` divides the channels)."""
    block = channel_block(channels, lanes)
    padded = -(-channels // lanes) * lanes
    if block < lanes and padded <= LANE_PAD_WORK.value() * channels:
        return lanes, padded
    if block < min_block:
        padded = -(-channels // min_block) * min_block
        if padded <= MAX_PAD_WORK.value() * channels:
            return channel_block(padded, lanes), padded
    return block, channels


def _powers(lo: int, hi: int) -> list[int]:
    out, b = [], 1
    while b <= hi:
        if b >= lo:
            out.append(b)
        b *= 2
    return out


# -- conv2d ----------------------------------------------------------------------------------------


# Note [half blocks]
# A float16 conv on a core with half-precision arithmetic (FEAT_FP16: "fullfp16", Note [half
# sums] in topi/nn/dense.py) sums in half, 8 lanes per 128-bit register: its blocks, tiles and
# layouts are the float32 rules' with the half lanes (NCHW8c on NEON, channel blocks of 8 -
# min_block counts channels, as for float32 - register tiles of 8-lane vectors), so the
# float16 build does half the float32 build's vector work rather than running the generic
# NCHW schedule (which took 3.4x the float32 build's instructions under QEMU: bench/arm.py
# --fp16). Its matrix products likewise take the "blocked" micro-kernel on half lanes (the ARM
# strategy's default; the packed weights stay float32's). Without FEAT_FP16, float16 is
# widened op by op and keeps the generic schedules; x86 never blocks float16. Winograd stays
# float32-only (its transforms in half would lose digits).


def blocked_dtypes(target) -> tuple[str, ...]:
    """The float types whose convs take the blocked kernels on this target."""
    return target.blocked_float_dtypes


class _Conv:
    """What the rules need of an NCHW conv workload (None from `of` when not a float32 2-d
    conv with a constant weight)."""

    @staticmethod
    def of(wl: Workload, target) -> _Conv | None:
        if len(wl.inputs) != 2 or not wl.constant or not wl.constant[1]:
            return None
        (xs, xd), (ws, wd) = wl.inputs
        if len(xs) != 4 or len(ws) != 4 or xd != wd or xd not in blocked_dtypes(target):
            return None
        if not isinstance(xs[1], int):
            return None  # a symbolic channel count
        c = _Conv()
        c.ic, c.oc, c.kh, c.kw = xs[1], ws[0], ws[2], ws[3]
        # a symbolic batch or size: the rules at the representative size (topi/symbolic.py)
        c.symbolic = not all(isinstance(d, int) for d in (*xs, *wl.output))
        c.n, _, c.oh, c.ow = representative_shape(wl.output)
        c.groups = wl.attr("groups", 1)
        c.strides, c.dilation = tuple(wl.attr("strides")), tuple(wl.attr("dilation"))
        c.depthwise = c.groups > 1 and c.groups == c.ic == c.oc and ws[1] == 1
        c.dtype = xd
        c.lanes = target.vector_lanes(xd)
        c.min_block = min_block(target, xd)
        c.budget = _accumulator_budget(vector_registers(target))
        c.registers = vector_registers(target)
        c.chains = fma_chains(target)
        return c

    def out_blocks(self) -> list[int]:
        """Candidate output blocks: powers of two from min_block to the lanes dividing the
        output channels, and the lanes with padded channels where the rule pads (not for
        groups: Note [grouped blocks] in conv2d.py)."""
        if self.groups > 1:
            return [b for b in _powers(self.min_block, self.lanes) if self.oc % b == 0]
        blocks = [b for b in _powers(self.min_block, self.lanes) if self.oc % b == 0]
        block, padded = output_block(self.oc, self.lanes, self.min_block)
        if padded != self.oc:
            blocks.append(block)
        return blocks

    def default_out_block(self, context=None) -> int:
        if self.groups > 1:
            return self.group_blocks(context or {})[1]
        return output_block(self.oc, self.lanes, self.min_block)[0]

    def group_blocks(self, context) -> tuple[int, int]:
        """(input block, output block) of a grouped conv (Note [grouped blocks] in conv2d.py).
        Blocks that divide the channels of a group when the output's fills a vector (no
        wasted work); else the input's own block and the output block doing the least work per
        lane (multiply-adds by zero weights included), kept while that work is at most ob / 2
        times the grouped conv's: the generic NCHW schedule it replaces ran ShuffleNet's
        grouped convs at 1-2% of the FMA peak. An output block under min_block: NCHW."""
        cg, og = self.ic // self.groups, self.oc // self.groups
        aligned = channel_block(og, self.lanes)
        if aligned >= self.min_block:
            return channel_block(cg, self.lanes), aligned
        ib = context.get("in_block") or channel_block(self.ic, self.lanes)
        best, best_cost = (ib, aligned), math.inf
        for ob in self.out_blocks():
            work = GroupWindow.of(self.ic, self.oc, self.groups, ib, ob).work()
            if work <= ob / 2 and work / ob < best_cost:
                best, best_cost = (ib, ob), work / ob
        return best

    def in_blocks(self) -> list[int]:
        """Candidate input blocks of a grouped conv (knob `in_block`): powers of two up to
        the lanes dividing the input channels."""
        return [b for b in _powers(1, self.lanes) if self.ic % b == 0]

    def window(self, config, context=None) -> GroupWindow:
        """The input-block window of a grouped conv's config (Note [shared windows])."""
        ib = config.get("in_block") or self.group_blocks(context or {})[0]
        return GroupWindow.of(
            self.ic, self.oc, self.groups, ib, config["out_block"], window_share(config)
        )

    def padded_out(self, block: int) -> int:
        return -(-self.oc // block) * block

    def is_winograd_shape(self) -> bool:
        return (
            self.dtype == "float32"  # half-precision transforms would lose the digits
            and self.groups == 1
            and (self.kh, self.kw) == (3, 3)
            and self.strides == (1, 1)
            and self.dilation == (1, 1)
        )


conv2d = register_strategy("nn.conv2d", "cpu")


@conv2d.implementation("nchw")
def _nchw_space(wl: Workload, target) -> ConfigSpace | None:
    return ConfigSpace()


def _tile_knobs(c: _Conv) -> list[Knob]:
    return [Knob("ow_block", tuple(range(1, min(c.ow, c.budget) + 1)), default=_default_tile(0))]


def _parallel_knob() -> Knob:
    """Note [conv threading split] in conv2d.py: the loops of the tiles run in parallel;
    the default, every row of every channel chunk (today's rule)."""
    return Knob("parallel", CONV_SPLITS, default="rows")


def _default_tile(field: int):
    def rule(wl, target, context):
        c = _Conv.of(wl, target)
        ob = c.default_out_block(context)
        ocb = c.padded_out(ob) // ob
        grouped = c.groups > 1 and not c.depthwise
        work = None
        if grouped and ocb * ob == c.oc:  # Note [shared windows] in conv2d.py
            ib = c.group_blocks(context)[0]

            def work(share):
                return GroupWindow.of(c.ic, c.oc, c.groups, ib, ob, share).work()

        tile = choose_conv_tile(c.ow, ocb, c.registers, c.depthwise, c.chains, grouped, work)
        return (tile.ow_block, tile.oc_vectors, tile.shared)[field]

    return rule


def _default_prefetch(wl, target, context) -> bool:
    """Note [weight prefetch] in conv2d.py: weights larger than L2, two chunks within half of
    it, few outputs reusing each weight (of the default tile)."""
    c = _Conv.of(wl, target)
    ob = c.default_out_block(context)
    ocp = c.padded_out(ob)
    icp = context.get("in_channels", c.ic)
    total = ocp * (icp // c.groups) * c.kh * c.kw * 4
    chunk = total // (ocp // ob) * _default_tile(1)(wl, target, context)
    l2 = target_cache_sizes(target)[2]
    return total > l2 and 4 * chunk <= l2 and c.n * c.oh * c.ow <= prefetch_max_reuse(target)


def _in_block(c, context) -> int:
    """The input block of a direct conv in its model's layout."""
    if c.groups > 1:
        return c.group_blocks(context)[0]
    return context.get("in_block") or channel_block(c.ic, c.lanes)


def _default_row_accumulators(wl, target, context) -> bool:
    """Note [row accumulators] in conv2d.py: the default tile's weights past L1, enough steps
    per input block, two or more tiles per row."""
    c = _Conv.of(wl, target)
    ob = c.default_out_block(context)
    icp = context.get("in_channels", c.ic)
    per_block = ob * (icp // c.groups) * c.kh * c.kw * 4
    owb, ocv = _default_tile(0)(wl, target, context), _default_tile(1)(wl, target, context)
    steps = c.kh * c.kw * _in_block(c, context)
    return row_accumulators_rule(per_block * ocv, steps, c.ow, owb, target)


def _default_pad_per_tile(wl, target, context) -> bool:
    """Note [padding per tile] in conv2d.py: a blocked input's window per register tile (or
    row of tiles, Note [row accumulators]), when it fits the stack (of the default tile)."""
    c = _Conv.of(wl, target)
    ib = _in_block(c, context)
    window_h = (c.kh - 1) * c.dilation[0] + 1
    window_w = (c.kw - 1) * c.dilation[1] + 1
    owb = _default_tile(0)(wl, target, context)
    if _default_row_accumulators(wl, target, context):
        owb = -(-c.ow // owb) * owb
    window = pad_tile_bytes(window_h, window_w, c.strides[1], owb, ib)
    return pad_per_tile_rule(ib, window, target)


def _direct_space(wl: Workload, target) -> ConfigSpace | None:
    c = _Conv.of(wl, target)
    if c is None or c.depthwise or not c.out_blocks():
        return None
    knobs = [
        Knob("out_block", tuple(c.out_blocks()), default=lambda *a: c.default_out_block(a[2])),
        *_tile_knobs(c),
        Knob("oc_vectors", OC_VECTORS, default=_default_tile(1)),
        Knob("prefetch", (False, True), default=_default_prefetch),
        _parallel_knob(),
    ]
    if any(wl.attr("padding")):
        knobs.append(Knob("pad_per_tile", (False, True), default=_default_pad_per_tile))
    if c.groups > 1:  # Note [shared windows] in conv2d.py
        knobs.append(Knob("in_block", tuple(c.in_blocks()), default=_default_in_block))
        shared = Knob("shared_window", (False, True), default=_default_tile(2), before=False)
        knobs.append(shared)
    if c.kh * c.kw > 1:  # Note [conv reduction order] in conv2d.py: today's order the default
        knobs.append(Knob("reduce_order", CONV_REDUCE_ORDERS, default="channels"))
        knobs.append(Knob("unroll_window", (False, True), default=False))
    knobs.append(Knob("unroll_block", (False, True), default=False))
    knobs.append(Knob("row_accumulators", (False, True), default=_default_row_accumulators))
    constraints = [
        lambda v: (c.padded_out(v["out_block"]) // v["out_block"]) % v["oc_vectors"] == 0,
        lambda v: v["ow_block"] * v["oc_vectors"] <= c.budget,
    ]
    if c.groups > 1:  # a shared window of one block is the unshared one: one of them only
        constraints.append(lambda v: not (v["shared_window"] and v["oc_vectors"] == 1))
    return ConfigSpace(knobs, constraints)


def _default_in_block(wl, target, context) -> int:
    """A grouped conv's input block by the rule of `group_blocks` (Note [grouped blocks])."""
    return _Conv.of(wl, target).group_blocks(context)[0]


def _depthwise_space(wl: Workload, target) -> ConfigSpace | None:
    c = _Conv.of(wl, target)
    if c is None or not c.depthwise or channel_block(c.oc, c.lanes) < c.min_block:
        return None

    def unroll_default(wl, target, context):
        return -(-c.ow // _default_tile(0)(wl, target, context)) == 2

    return ConfigSpace(
        [
            *_tile_knobs(c),
            Knob("unroll_tiles", (False, True), default=unroll_default),
            _parallel_knob(),
        ]
    )


def _winograd_space(wl: Workload, target) -> ConfigSpace | None:
    c = _Conv.of(wl, target)
    if c is None or c.symbolic or not c.is_winograd_shape() or not c.out_blocks():
        return None  # (its tiles are per size: no symbolic kernel)
    if channel_block(c.ic, c.lanes) < c.min_block:
        return None

    def tile_default(wl, target, context):
        plan = _winograd_plan(c, c.default_out_block(), context, target)
        return plan[0] if plan is not None else 4

    knobs = [
        Knob("out_block", tuple(c.out_blocks()), default=lambda *a: c.default_out_block()),
        Knob("tile", (2, 4), default=tile_default),
    ]
    return ConfigSpace(knobs)


def _winograd_plan(c: _Conv, ob: int, context, target):
    return plan_winograd(target, c.oh, c.ow, context.get("in_channels", c.ic), c.padded_out(ob))


@conv2d.choose_default
def _conv_default(wl: Workload, target, context) -> str:
    """Today's rule (transform/alter_layout.py before strategies): blocked when the output
    block fills a vector; Winograd where Note [winograd rule] estimates it faster."""
    c = _Conv.of(wl, target)
    if c is None or not context.get("rewrite", True):
        return "nchw"
    if c.depthwise:
        ob = context.get("in_block") or channel_block(c.oc, c.lanes)
        if ob < c.min_block or ob % c.min_block or _depthwise_space(wl, target) is None:
            return "nchw"  # (padded channels blocked wider than the true ones divide: NCHW)
        return "depthwise_nchwc"
    if c.groups > 1 and context.get("in_padded"):
        return "nchw"
    ob = c.default_out_block(context)
    if ob < c.min_block:
        return "nchw"
    ib = context.get("in_block") or channel_block(c.ic, c.lanes)
    use = context.get("winograd", True) and c.is_winograd_shape() and ib >= c.min_block
    use = use and not c.symbolic
    if use and _winograd_plan(c, ob, context, target) is not None:
        return "winograd"
    return "direct_nchwc"


def _padded_weight(c: _Conv, w: np.ndarray, ocp: int, icp: int) -> np.ndarray:
    if (ocp, icp) == (c.oc, c.ic if not c.depthwise else c.oc):
        return w
    pads = [(0, ocp - c.oc), (0, 0 if c.depthwise else icp - c.ic), (0, 0), (0, 0)]
    return np.pad(w, pads)


def _direct_layout(wl: Workload, config: Config, context, target, w: np.ndarray):
    c = _Conv.of(wl, target)
    ob, extra = config["out_block"], {}
    if c.groups > 1:
        if context.get("in_padded"):
            return None  # channel offsets of groups need the true channels
        win = c.window(config, context)
        ib, weight = win.ib, win.pack(w)
        if win.share > 1:  # Note [shared windows] in conv2d.py
            extra["share"] = win.share
    else:
        ib = context.get("in_block") or channel_block(c.ic, c.lanes)
        icp, ocp = context.get("in_channels", c.ic), c.padded_out(ob)
        weight = transform_array(_padded_weight(c, w, ocp, icp), "OIHW", f"OIHW{ib}i{ob}o")
    attrs = dict(wl.attrs, **extra, config=config.as_attr())
    return {
        "op": "nn.conv2d_nchwc",
        "in_block": ib,
        "out_block": ob,
        "weight": weight,
        "attrs": attrs,
    }


def _depthwise_layout(wl: Workload, config: Config, context, target, w: np.ndarray):
    c = _Conv.of(wl, target)
    ob = context.get("in_block") or channel_block(c.oc, c.lanes)
    ocp = context.get("in_channels", c.oc)
    array = _padded_weight(c, w, ocp, ocp)
    weight = transform_array(array, "OIHW", f"OIHW1i{ob}o")
    attrs = dict(wl.attrs, config=config.as_attr())
    if ocp != c.oc:
        attrs["groups"] = ocp
    return {
        "op": "nn.conv2d_nchwc",
        "in_block": ob,
        "out_block": ob,
        "weight": weight,
        "attrs": attrs,
    }


def _winograd_layout(wl: Workload, config: Config, context, target, w: np.ndarray):
    from tessera.topi.x86.winograd import (
        _panel_blocking,
        product_rows,
        transform_weight_np,
    )

    c = _Conv.of(wl, target)
    ob, m = config["out_block"], config["tile"]
    ib = context.get("in_block") or channel_block(c.ic, c.lanes)
    icp, ocp = context.get("in_channels", c.ic), c.padded_out(ob)
    blk = _panel_blocking(target, ocp, icp)  # the products' panels (Note [winograd rule])
    rows = product_rows(-(-c.oh // m) * -(-c.ow // m), blk.mr, blk.nv)
    u = transform_weight_np(_padded_weight(c, w, ocp, icp), m, blk.nr)
    attrs = {
        "padding": list(wl.attr("padding")), "tile": m, "channels": ocp, "out_block": ob,
        "rows": rows, "config": config.as_attr(),
    }  # fmt: skip
    return {
        "op": "nn.conv2d_winograd_nchwc",
        "in_block": ib,
        "out_block": ob,
        "weight": u,
        "attrs": attrs,
    }


conv2d.implementation("direct_nchwc", priority=1, layout=_direct_layout)(_direct_space)
conv2d.implementation("depthwise_nchwc", priority=1, layout=_depthwise_layout)(_depthwise_space)
conv2d.implementation("winograd", priority=2, layout=_winograd_layout)(_winograd_space)


# -- dense, matmul, batch_matmul ---------------------------------------------------------------


class _Gemm:
    """M x N x K of a matrix-product workload as its x86 schedule sees it (None: not a float32
    product of matrices with static shapes)."""

    @staticmethod
    def of(wl: Workload, dtypes: tuple = ("float32",)) -> _Gemm | None:
        out = wl.output
        if len(wl.inputs) != 2 or len(out) < 2 or any(d not in dtypes for _, d in wl.inputs):
            return None
        if len({d for _, d in wl.inputs}) != 1:
            return None
        (a, _), (b, _) = wl.inputs
        # symbolic dims (names): the rules at their representative sizes (topi/symbolic.py)
        symbolic = not all(isinstance(d, int) for d in (*a, *b, *out))
        a, b, out = (representative_shape(s) for s in (a, b, out))
        if wl.op == "matmul" and (len(a) < 2 or len(b) < 2):
            return None  # numpy.matmul drops the axis of a 1-D operand: matrix-vector
        g = _Gemm()
        g.symbolic = symbolic
        g.M, g.N = out[-2], out[-1]
        g.batch = math.prod(out[:-2]) if len(out) > 2 else 0
        if wl.op == "nn.batch_matmul":
            g.K = a[1] if wl.attr("transpose_a", False) else a[2]
        else:
            g.K = a[-1]
        return g


def _packed_gemm(wl: Workload) -> _Gemm | None:
    """A dense/matmul whose weight is a constant 2-D float32 matrix (transform/pack_weights)."""
    if wl.op not in ("nn.dense", "matmul") or len(wl.inputs) != 2 or not wl.constant[1]:
        return None
    (xs, xd), (ws, wd) = wl.inputs
    if len(ws) != 2 or len(xs) < 1 or (xd, wd) != ("float32", "float32"):
        return None
    if not isinstance(xs[-1], int) or not all(isinstance(d, int) for d in ws):
        return None
    g = _Gemm()
    g.symbolic = not all(isinstance(d, int) for d in xs)  # rows: representative sizes
    xs = representative_shape(xs)
    g.M, g.K, g.batch = math.prod(xs[:-1]), xs[-1], 0
    g.N = ws[0] if wl.op == "nn.dense" else ws[1]
    return g


def _parallel(g: _Gemm, target, default_blocking) -> str:
    blk = default_blocking(target)
    return parallel_rule(g.batch, g.M, g.N, blk.mr, blk.nr, blk.tasks)


def _gemm_space(g: _Gemm, target, default_blocking) -> ConfigSpace:
    regs, lanes = vector_registers(target), target.vector_lanes("float32")
    widths = range(1, min(regs // 2, -(-g.N // lanes)) + 1)  # Note [tile waste] in dense.py
    nvs = sorted({1, 2, 4, default_blocking(target).nv, *widths})
    kcs = sorted({min(1 << i, g.K) for i in range(3, 12)} | {default_blocking(target).kc})
    knobs = [
        Knob(
            "mr",
            tuple(range(1, min(regs - 2, g.M) + 1)),
            default=lambda *a: default_blocking(a[1]).mr,
        ),
        Knob("nv", tuple(nvs), default=lambda *a: default_blocking(a[1]).nv),
        Knob("kc", tuple(kcs), default=lambda *a: default_blocking(a[1]).kc),
        Knob(
            "parallel",
            ("batch", "cols", "rows"),
            default=lambda *a: _parallel(g, a[1], default_blocking),
        ),
    ]
    # Note [k unrolling] in dense.py: today's loop (1) the default
    knobs.append(Knob("unroll_k", (1, 2, 4, 8), default=1))
    # Note [cache blocks] in dense.py: k blocks inside each tile (today's) the default; blocks
    # of mc row tiles x nc panels (0: all) only where the k blocks run around them
    knobs += [
        Knob("kc_scope", ("tile", "block"), default="tile"),
        Knob("mc", tuple(v for v in (0, 1, 2, 4, 8, 16, 32, 64) if v < g.M), default=0),
        Knob("nc", tuple(v for v in (0, 1, 2, 4, 8, 16, 32) if v * lanes < g.N), default=0),
    ]
    if g.symbolic:  # Note [size buckets] in topi/symbolic.py: the tile above is the top one's
        knobs.append(Knob("size_buckets", (False, True), default=True))
    constraints = [
        lambda v: v["mr"] * v["nv"] + v["nv"] + 1 <= regs,
        lambda v: v["kc"] % v["unroll_k"] == 0,
        lambda v: v["kc_scope"] == "block" or v["mc"] == v["nc"] == 0,
        # a block of one tile is the tile scope's loop nest
        lambda v: v["kc_scope"] == "tile" or -(-g.M // v["mr"]) * -(-g.N // (v["nv"] * lanes)) > 1,
    ]
    if g.symbolic:  # Note [cache blocks]: blocks of a constant size where extents are symbolic
        constraints.append(lambda v: v["kc_scope"] == "tile" or (v["mc"] > 0 and v["nc"] > 0))
    return ConfigSpace(knobs, constraints)


def _generic_gemm_space(wl, target) -> ConfigSpace:
    return ConfigSpace()


def _blocked_space(wl: Workload, target) -> ConfigSpace | None:
    g = _Gemm.of(wl)
    if g is None:
        return None
    return _gemm_space(g, target, lambda t: fit_blocking(t, g.M, g.N, g.K))


def _packed_space(wl: Workload, target) -> ConfigSpace | None:
    g = _packed_gemm(wl)
    if g is None:
        return None

    def blocking(t):
        return blocking_for_panel(t, g.M, g.N, g.K, panel_width(t, g.N), fit=True)

    return _gemm_space(g, target, blocking)


def _packed_layout(wl: Workload, config: Config, context, target, w: np.ndarray):
    g = _packed_gemm(wl)
    nr = config["nv"] * target.vector_lanes("float32")
    weight = pack_weight_np(w, nr, transposed=wl.op == "nn.dense")
    attrs = {"units": g.N, "config": config.as_attr()}
    return {"op": "nn.dense_packed", "weight": weight, "attrs": attrs}


def _gemm_default(wl: Workload, target, context) -> str:
    if context.get("rewrite", True) and _packed_gemm(wl) is not None:
        return "packed"
    return "blocked" if _Gemm.of(wl) is not None else "generic"


for _op in ("nn.dense", "matmul", "nn.batch_matmul"):
    _s = register_strategy(_op, "cpu")
    _s.implementation("generic")(_generic_gemm_space)
    _s.implementation("blocked", priority=1)(_blocked_space)
    if _op != "nn.batch_matmul":
        _s.implementation("packed", priority=2, layout=_packed_layout)(_packed_space)
    _s.choose_default(_gemm_default)


# -- pools -----------------------------------------------------------------------------------------
# A pool is blocked when its input is (alter_layout: a pool alone is no reason to change
# layouts); its knobs are those of Note [pool rows] in pooling.py.


def _pool_space(wl: Workload, target) -> ConfigSpace | None:
    (xs, xd), *_ = wl.inputs
    kind = "max" if "max" in wl.op else "avg"
    # a max pool is exact on int8 data (blocked int8 activations, Note [blocked int8
    # activations] in topi/qnn.py): its window max runs on the integers
    dtypes = ("float32", "uint8", "int8") if kind == "max" else ("float32",)
    if len(xs) != 4 or xd not in dtypes or not all(isinstance(d, int) for d in xs):
        return None
    ow = wl.output[3]

    def pad_rows_default(wl, target, context):
        from tessera.topi.x86.pooling import pad_rows_rule

        block = context.get("in_block") or 1
        pad = tuple(wl.attr("padding"))
        dilation = tuple(wl.attr("dilation") or (1, 1))
        window_h = (wl.attr("pool_size")[0] - 1) * dilation[0] + 1
        return pad_rows_rule(kind, window_h * (xs[3] + pad[1] + pad[3]) * block * 4, target)

    knobs = [
        Knob("column_group", tuple(range(1, min(ow, COLUMN_GROUP) + 1)), default=_column_default),
        Knob("pad_rows", (False, True), default=pad_rows_default),
    ]
    return ConfigSpace(knobs)


def _column_default(wl, target, context) -> int:
    from tessera.topi.x86.pooling import _column_group

    return _column_group(wl.output[3])


def _pool_layout(wl: Workload, config: Config, context, target, weight):
    block = context.get("in_block")
    if block is None:
        return None
    op = wl.op + "_nchwc"
    attrs = dict(wl.attrs, config=config.as_attr())
    return {"op": op, "in_block": block, "out_block": block, "attrs": attrs}


def _pool_default(wl: Workload, target, context) -> str:
    return "nchwc" if context.get("in_block") is not None else "nchw"


for _op in ("nn.max_pool2d", "nn.avg_pool2d"):
    _s = register_strategy(_op, "cpu")
    _s.implementation("nchw")(_nchw_space)
    _s.implementation("nchwc", priority=1, layout=_pool_layout)(_pool_space)
    _s.choose_default(_pool_default)


# -- row reductions: softmax, log_softmax, layer_norm --------------------------------------------


def _rows_space(wl: Workload, target) -> ConfigSpace | None:
    (xs, xd), *_ = wl.inputs
    axis = wl.attr("axis", -1)
    if not xs or axis not in (-1, len(xs) - 1):
        return None
    row = xs[-1]  # symbolic: one vector (Note [symbolic row split])
    xs = representative_shape(xs)  # symbolic dims: topi/symbolic.py
    stack = stack_bytes_rule(target)
    sizes = tuple(sorted({0, 4 << 10, 16 << 10, 64 << 10, 256 << 10, stack}))
    # the row split (Note [lane split] in topi/nn/softmax.py): 1, 2, 4 or 8 vectors of the
    # target for the dtype it reduces; the default is the rule over the target's vectors, as
    # lowering computes it (the group's target is current there)
    n, dtype = xs[-1], str(_norm_acc(xd)) if wl.op == "nn.layer_norm" else xd
    lanes = max(1, target.vector_lanes(dtype))
    default = default_split(n if is_static(row) else row, lanes)
    splits = sorted({a * lanes for a in (1, 2, 4, 8) if a * lanes <= max(n, lanes)} | {default})
    knobs = [
        Knob("stack_bytes", sizes, default=stack),
        Knob("split", tuple(splits), default=default),
    ]
    return ConfigSpace(knobs)


for _op in ("nn.softmax", "nn.log_softmax", "nn.layer_norm"):
    _s = register_strategy(_op, "x86")
    _s.implementation("generic")(_generic_gemm_space)
    _s.implementation("rows", priority=1)(_rows_space)
