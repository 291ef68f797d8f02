"""2-d convolution in the blocked layout NCHW[x]c with weights OIHW[x]i[y]o, and its x86 schedule.

    y = conv2d_nchwc(x, w, strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    # x: (N, C/ib, H, W, ib), w: (O/ob, C/groups/ib, KH, KW, ib, ob) -> y: (N, O/ob, OH, OW, ob)
    s = schedule_conv2d_nchwc([relu(add(y, bias))], target)

Three cases share the layout: dense (groups=1), grouped (any channels per group: a block of
outputs reads the window of input blocks its groups span, Note [grouped blocks]), and depthwise
(groups = C = O, weights (C/b, 1, KH, KW, 1, b), input and output blocks equal). See Note [conv
micro-kernel]. Data of input block 1 may come as plain NCHW (N, C, H, W): the same memory as
NCHW1c, so the first conv of a network reads its input without a layout transform.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from tessera import te, tir
from tessera.topi.generic import inline_injective
from tessera.topi.nn.conv import _dims, _ints, _static
from tessera.topi.rules import RuleKnob
from tessera.topi.strategy import Config, record_config
from tessera.topi.symbolic import all_static, representative_shape
from tessera.topi.x86.cpu import (
    fma_chains,
    memory_cost,
    stack_share,
    target_cache_sizes,
    vector_registers,
)

CONV_TAG = "conv2d_nchwc"
PAD_TAG = "pad"


def pad_nchwc(x: te.Tensor, before, after, fill=None) -> te.Tensor:
    """x padded with `fill` (zero by default) on the spatial axes (2, 3) of a blocked
    (N, C/b, H, W, b) tensor."""
    _, _, h, w, _ = _dims(x.shape)  # h and w may be symbolic
    shape = (x.shape[0], x.shape[1], h + before[0] + after[0], w + before[1] + after[1], x.shape[4])

    def f(n, c, i, j, k):
        conds = []
        for v, lo, hi, size in ((i, before[0], after[0], h), (j, before[1], after[1], w)):
            if lo:
                conds.append(v >= lo)
            if hi:
                conds.append(v < lo + size)
        inside = x(n, c, i - before[0], j - before[1], k)
        outside = te.const(0, x.dtype) if fill is None else fill
        return te.if_then_else(te.all(*conds), inside, outside)

    return te.compute(shape, f, name="pad", tag=PAD_TAG)


def as_nchw1c(x: te.Tensor) -> te.Tensor:
    """A plain NCHW tensor read as NCHW1c (an injective view that inlines); others as they are."""
    if len(x.shape) != 4:
        return x
    return te.compute(
        (*x.shape, 1), lambda n, c, i, j, _: x[n, c, i, j], name="nchw1c", tag="injective"
    )


# Note [grouped blocks]
# A grouped conv whose channels per group are not multiples of the blocks (ShuffleNet: 4 groups
# of 68) still runs blocked, at full vector width. A block of `ob` output channels covers the
# groups g0..g1 of its channels and reads the input channels of those groups, the input blocks
# [start, end) around them; its weight holds zeros where an output channel's group does not own
# the input channel. The reduction runs over a fixed window of `blocks` input blocks (the
# widest block's span, a te reduction has one extent), each step guarded by "inside this
# block's span": a block whose groups span fewer input blocks skips the rest (a branch per step
# of the channel loop, invariant over the kernel window, the tile and the lanes), so the work is
# the spans' sum, not blocks x the widest span (ShuffleNet's 68-channel groups on blocks of 16:
# 1.34x the grouped FLOPs, where a dense conv would do 4x). The window's start is pulled back
# where it would pass the last input block, so every read is in bounds. When the blocks divide
# the channels of a group, each span is the group's `cg / ib` blocks: no guard, no zeros.
# Zero weights meet other groups' inputs, which are finite (padded channels hold finite values,
# Note [channel padding]); an inf or NaN in one group's input would leak into its neighbours'
# outputs of a shared block.


# Note [shared windows]
# A grouped conv's register tile of `oc_vectors` output blocks read, each, its own window of
# input blocks (Note [grouped blocks]): the window's start is a function of the block, so the
# blocks of a tile share no broadcast, and a tile of w columns x v blocks loaded w * v
# broadcasts and v weight vectors for w * v FMAs -- more loads than FMAs, where a dense conv
# loads w + v. ShuffleNet's 272->272 1x1 (4 groups of 68) on 14x14 ran at 0.62x the speed of
# the dense conv of the same FLOPs (68->272), its 7x1 tile load-bound. With knob
# `shared_window`, the `oc_vectors` blocks of a tile read one window, the union of their
# groups' spans (GroupWindow's `share`: the weight is packed per window of share blocks, the
# compute takes the window's start from the tile's chunk of blocks, and the schedule's split
# of the blocks by oc_vectors makes it one expression, so LLVM loads each broadcast once).
# Wider windows straddle more groups: more multiply-adds by zero weights (groups of 68 on
# blocks of 8: 1.114x the grouped FLOPs for windows of 8 outputs, 1.232x for 16). The tile
# rule (`choose_conv_tile`'s window_work) scores a shared tile by its FMAs per load over the
# work its windows do, an unshared one likewise, and takes the better: ShuffleNet's 272->272
# 5x2 shared (0.78-0.89x the kernel time of the 7x1 unshared tile, 1 thread, AVX2 Zen 3, load
# 1-2, bench/grouped_conv.py), 112->112 on 28x28 4x2 (0.84x), 544->544 on 7x7 (aligned, no
# work added) 4x2 (0.92-1.06x: noise), 2, 3 and 8 groups 0.65-0.83x; ResNeXt's 32 groups of
# 4 stay unshared (a window of 16 outputs would read 4 groups: twice the work). The score
# overrates narrow tiles of many vectors: 8 groups of 60 on 14x14 take 2x4 shared, 1.01-1.05x
# the unshared tile's time, where 3x3 and 5x2 shared ran 0.84x (the tuner searches them).
# The input block (knob `in_block`, default the rule of group_blocks in strategy.py) is
# searched too: a smaller block can divide the channels of a group (ShuffleNet's first
# grouped conv, 6 inputs a group: blocks of 1 ran 0.67x the kernel time of blocks of 8), at
# the price of a layout transform before the conv, which the tuner measures in the model's
# layout (Note [in-model layout]).


@dataclass(frozen=True)
class GroupWindow:
    """The input blocks each output block of a grouped conv reads (Note [grouped blocks]):
    `share` consecutive output blocks (a register tile's oc_vectors, Note [shared windows])
    read one window, the union of their groups' input blocks."""

    ic: int
    oc: int
    groups: int
    ib: int
    ob: int
    blocks: int  # the reduction's extent over input blocks: the widest span
    clamped: bool  # some window start is pulled back to stay inside the input
    share: int = 1

    @staticmethod
    def of(ic: int, oc: int, groups: int, ib: int, ob: int, share: int = 1) -> GroupWindow:
        if share < 1 or (oc // ob) % share:
            raise ValueError(f"{share} output blocks per window do not divide {oc // ob} blocks")
        spans = [_span(ic, oc, groups, ib, ob * share, k) for k in range(oc // ob // share)]
        blocks = max(e - s for s, e in spans)
        clamped = any(s + blocks > ic // ib for s, _ in spans)
        return GroupWindow(ic, oc, groups, ib, ob, blocks, clamped, share)

    @property
    def aligned(self) -> bool:
        """Every span is one group's cg / ib blocks: no guard, no zeros."""
        cg, og = self.ic // self.groups, self.oc // self.groups
        return og % (self.ob * self.share) == 0 and cg % self.ib == 0

    def start(self, k: int) -> int:
        """The first input block of output block `k`'s window."""
        s, _ = _span(self.ic, self.oc, self.groups, self.ib, self.ob * self.share, k // self.share)
        return min(s, self.ic // self.ib - self.blocks)

    def work(self) -> float:
        """Multiply-adds done per multiply-add of the grouped conv (1 when aligned)."""
        wb = self.ob * self.share
        spans = (_span(self.ic, self.oc, self.groups, self.ib, wb, k) for k in range(self.oc // wb))
        done = sum(e - s for s, e in spans) * self.ib * wb
        return done / (self.oc * self.ic // self.groups)

    def pack(self, w):
        """numpy: the grouped OIHW weight (oc, cg, kh, kw) as (oc/ob, blocks, kh, kw, ib, ob)."""
        cg, og = self.ic // self.groups, self.oc // self.groups
        oc, _, kh, kw = w.shape
        out = np.zeros((oc // self.ob, self.blocks, kh, kw, self.ib, self.ob), w.dtype)
        for o in range(oc):
            k, oi = divmod(o, self.ob)
            first = self.start(k) * self.ib
            g = o // og
            lo, hi = g * cg - first, (g + 1) * cg - first  # the group's channels in the window
            cols = np.arange(max(lo, 0), min(hi, self.blocks * self.ib))
            src = w[o, cols - lo]  # (n, kh, kw)
            out[k, cols // self.ib, :, :, cols % self.ib, oi] = src
        return out

    def unpack(self, wb):
        """numpy: the inverse of `pack` (the grouped OIHW weight)."""
        cg, og = self.ic // self.groups, self.oc // self.groups
        ocb, _, kh, kw, _, _ = wb.shape
        out = np.zeros((self.oc, cg, kh, kw), wb.dtype)
        for o in range(self.oc):
            k, oi = divmod(o, self.ob)
            first = self.start(k) * self.ib
            channels = np.arange(cg) + (o // og) * cg - first
            out[o] = wb[k, channels // self.ib, :, :, channels % self.ib, oi]
        return out


def window_share(config) -> int:
    """Output blocks per window of a grouped conv's config (Note [shared windows]): its tile's
    oc_vectors when knob `shared_window` is set, else 1 (also for None: the rules' kernel)."""
    if config is None:
        return 1
    if not isinstance(config, Config):
        config = Config.from_attr(config)
    return config.get("oc_vectors", 1) if config.get("shared_window", False) else 1


def _span(ic: int, oc: int, groups: int, ib: int, ob: int, k: int) -> tuple[int, int]:
    """[first, end) input blocks of the groups output block `k` (of `ob` channels) covers."""
    cg, og = ic // groups, oc // groups
    g0, g1 = k * ob // og, min((k * ob + ob - 1) // og, groups - 1)
    return g0 * cg // ib, -(-(g1 + 1) * cg // ib)


def _window_expr(win: GroupWindow, oc):
    """(first input block of output block `oc`'s window, its guard for a block index `b`)."""
    cg, og = win.ic // win.groups, win.oc // win.groups
    wb = win.ob * win.share  # the channels of a window's output blocks
    chunk = oc // win.share if win.share > 1 else oc
    g0 = (chunk * wb) // og
    if win.aligned:
        return g0 * (cg // win.ib), None
    g1 = (chunk * wb + wb - 1) // og
    first, end = (g0 * cg) // win.ib, ((g1 + 1) * cg + win.ib - 1) // win.ib
    start = first
    if win.clamped:
        last = win.ic // win.ib - win.blocks
        start = te.if_then_else(first > last, te.const(last, "int32"), first)

    def guard(b):
        return te.all(b >= first, b < end) if win.clamped else b < end

    return start, guard


def conv2d_nchwc_shape(x_shape, w_shape, strides, padding, dilation, groups=1, share=1):
    """(output shape, is_depthwise) of a blocked conv (data NCHW[x]c, or NCHW for blocks of 1;
    `share`: a grouped conv's output blocks per window, Note [shared windows]); ValueError when
    the shapes disagree."""
    x_shape = tuple(x_shape) + (1,) if len(x_shape) == 4 else tuple(x_shape)
    n, icb, h, w, ib = x_shape
    ocb, icgb, kh, kw, wib, ob = w_shape
    ic, oc = icb * ib, ocb * ob
    depthwise = groups > 1 and groups == ic == oc and icgb == 1 and wib == 1 and ib == ob
    if not depthwise:
        if groups < 1 or ic % groups or oc % groups or wib != ib:
            raise ValueError(
                f"channels of data {tuple(x_shape)} and weight {tuple(w_shape)} disagree "
                f"(groups={groups})"
            )
        if groups > 1 and ((ocb % share) or share < 1):
            raise ValueError(f"{share} output blocks per window do not divide {ocb} blocks")
        window = GroupWindow.of(ic, oc, groups, ib, ob, share if groups > 1 else 1).blocks
        if icgb != window:
            raise ValueError(
                f"channels of data {tuple(x_shape)} and weight {tuple(w_shape)} disagree "
                f"(groups={groups}: a block of outputs reads {window} input blocks)"
            )
    out = []
    for i, (size, k) in enumerate(((h, kh), (w, kw))):
        span = size + padding[i] + padding[2 + i] - dilation[i] * (k - 1) - 1
        if isinstance(span, int) and span < 0:
            raise ValueError(f"kernel {(kh, kw)} is larger than the padded input {x_shape}")
        out.append(span // strides[i] + 1)
    return (n, ocb, out[0], out[1], ob), depthwise


def _inside(i, j, size, padding):
    """`likely(0 <= i < h and 0 <= j < w)`, the bounds the padding can cross; None: none."""
    conds = []
    for v, lo, hi, extent in (
        (i, padding[0], padding[2], size[0]),
        (j, padding[1], padding[3], size[1]),
    ):
        if lo:
            conds.append(v >= 0)
        if hi:
            conds.append(v < extent)
    return te.likely(te.all(*conds)) if conds else None


def conv2d_nchwc(
    x: te.Tensor, w: te.Tensor, strides, padding, dilation, groups: int = 1, share: int = 1
):
    """A blocked 2-d convolution (cross-correlation, as ONNX); tag "conv2d_nchwc". `share`: a
    grouped conv's output blocks per window of input blocks (Note [shared windows])."""
    strides = _ints(strides, 2, "strides", CONV_TAG)
    dilation = _ints(dilation, 2, "dilations", CONV_TAG)
    padding = _ints(padding, 4, "pads", CONV_TAG)
    x = as_nchw1c(x)
    # batch, height and width may be symbolic (topi/symbolic.py); channels are static
    x_shape, w_shape = _dims(x.shape), _static(w.shape, CONV_TAG)
    _static(x.shape[1:2] + x.shape[4:], CONV_TAG)
    out_shape, depthwise = conv2d_nchwc_shape(
        x_shape, w_shape, strides, padding, dilation, groups, share
    )
    xp = pad_nchwc(x, padding[:2], padding[2:]) if any(padding) and not depthwise else x
    ocb, icgb, kh, kw, wib, ob = w_shape
    rh = te.reduce_axis((0, kh), name="rh")
    rw = te.reduce_axis((0, kw), name="rw")
    sh, sw = strides
    dh, dw = dilation

    def pos(oh, ow):
        return oh * sh + rh.var * dh, ow * sw + rw.var * dw

    if depthwise:  # reads x itself, its reduction guarded (Note [padding per tile])

        def f(n, c, oh, ow, ci):
            i, j = pos(oh, ow)
            i, j = i - padding[0], j - padding[1]
            inside = _inside(i, j, x_shape[2:4], padding)
            return te.sum(x[n, c, i, j, ci] * w[c, 0, rh, rw, 0, ci], axis=[rh, rw], where=inside)

        attrs = {"depthwise": 1}
    else:
        rco = te.reduce_axis((0, icgb), name="rco")
        rci = te.reduce_axis((0, wib), name="rci")
        win = None
        if groups > 1:
            win = GroupWindow.of(x_shape[1] * wib, ocb * ob, groups, wib, ob, share)

        def f(n, oc, oh, ow, oi):
            i, j = pos(oh, ow)
            block, guard = rco.var, None
            if win is not None:  # Note [grouped blocks]
                start, inside = _window_expr(win, oc)
                block = start + rco.var
                guard = inside(block) if inside is not None else None
            return te.sum(
                xp[n, block, i, j, rci] * w[oc, rco, rh, rw, rci, oi],
                axis=[rco, rh, rw, rci],
                where=guard,
            )

        attrs = {"depthwise": 0, "grouped": int(win is not None), "share": share}
        if win is not None:
            attrs["groups"] = groups
    # the window a register tile reads (Note [padding per tile]): rows, then columns per output
    attrs.update(window_h=(kh - 1) * dh + 1, window_w=(kw - 1) * dw + 1, stride_w=sw)
    return te.compute(out_shape, f, name="conv2d_nchwc", tag=CONV_TAG, attrs=attrs)


# -- the schedule --------------------------------------------------------------------------------

# Note [conv micro-kernel]
# A tile of outputs, `ow_block` positions along a row times `oc_vectors` blocks of output
# channels (one vector each), lives in vector registers while the reduction runs over input
# channel blocks, the kernel window, then the channels in a block: each step loads `oc_vectors`
# weight vectors and broadcasts `ow_block` input values (x86 folds the broadcast into the FMA's
# memory operand), so it does ow_block * oc_vectors FMAs per ow_block + oc_vectors loads. The
# tile is written once, after the epilogue (bias, relu, residual add: inlined into the output
# stage) is applied to it. Depthwise convs have no channel reduction: each step loads
# `ow_block` input vectors and one weight vector. Tiles run in parallel over (n, oc chunk, oh).
# The 1x1 convs need no special kernel: the same tile is a matmul micro-kernel over the channels.


@dataclass(frozen=True)
class ConvTile:
    ow_block: int
    oc_vectors: int
    shared: bool = False  # a grouped conv's oc_vectors read one window (Note [shared windows])

    @property
    def accumulators(self) -> int:
        return self.ow_block * self.oc_vectors


def _accumulator_budget(registers: int) -> int:
    # Measured on AVX-512 (32 registers): 16-24 accumulators run at the FMA peak, 28 spill; on
    # AVX2 (16, no broadcast memory operands) 10-12. Leave the rest to weights and broadcasts.
    return registers * 5 // 8


# A tile rule's penalty for a row tail (peeled into slower code), on top of the lost work: the
# conv tile's here and ARM's register tile (Note [arm register tile]). A rule knob (Note [rule
# knobs] in topi/rules.py); the tiles themselves are searched (knobs ow_block, oc_vectors).
TAIL_PENALTY = RuleKnob(
    "tile.tail_penalty", (0.5, 0.625, 0.75, 0.875, 1.0), 0.75,
    "a register tile with a row tail keeps this share of its score (x the work it does not waste)",
)  # fmt: skip


# Note [oc vectors]
# A tile's oc_vectors divide the output channel blocks (no tail along channels). Counts of
# blocks with no factor 2, 3 or 4 are common: 1000 classes are 125 blocks of 8 on AVX2 (a
# classifier's 1x1 conv, squeezenet's conv10), 40 or 56 channels 5 or 7 blocks. With
# oc_vectors up to 4 only, those took one vector (about one load per FMA): squeezenet's
# 512 -> 1000 conv on 13x13 ran at 1.37x ORT's time. Their candidates go up to 8 (the score,
# FMAs per load within the accumulator budget, picks 5 x 2 for 125 blocks on AVX2, 5 x 4 on
# AVX-512); counts that 2, 3 or 4 divide keep the candidates 1-4 (their tiles as before; the
# tuner's oc_vectors knob offers up to 8 for every count).
OC_VECTORS = (1, 2, 3, 4, 5, 6, 7, 8)


def oc_vector_candidates(oc_blocks: int) -> tuple[int, ...]:
    """The rule's oc_vectors candidates for a count of output channel blocks (Note [oc
    vectors])."""
    if any(oc_blocks % v == 0 for v in (2, 3, 4)):
        return OC_VECTORS[:4]
    return OC_VECTORS


def choose_conv_tile(
    out_width: int,
    oc_blocks: int,
    registers: int,
    depthwise: bool,
    chains: int = 0,
    grouped: bool = False,
    window_work=None,
) -> ConvTile:
    """The register tile by rules (see Note [conv micro-kernel]): the most FMAs per load within
    the accumulator budget, oc_vectors dividing the oc blocks, a row tail (a width that is not
    a multiple of ow_block, peeled into slower code) counted as lost work and penalized, and a
    tile of fewer accumulators than `chains` (cpu.fma_chains: Note [FMA chains]) by the share
    of the FMA pipes it can keep busy. `grouped`: each output block reads its own window of
    input blocks (Note [grouped blocks]), so the oc_vectors of a tile share no broadcast --
    unless they share one window (Note [shared windows]): `window_work(share)`, the work of
    windows of `share` output blocks, makes that a choice, scored by the work it adds."""
    budget, penalty = _accumulator_budget(registers), TAIL_PENALTY.value()
    best, best_score = ConvTile(1, 1), -1.0
    for ocv in (1,) if depthwise else oc_vector_candidates(oc_blocks):
        if oc_blocks % ocv:
            continue
        sharing = (False, True) if grouped and window_work is not None and ocv > 1 else (False,)
        for owb, shared in itertools.product(range(1, min(out_width, budget // ocv) + 1), sharing):
            per_block = grouped and not shared
            loads = owb * (ocv if per_block else 1) + (1 if depthwise else ocv)
            score = owb * ocv / loads
            if window_work is not None:
                score /= window_work(ocv if shared else 1)
            if owb * ocv < chains:
                score *= owb * ocv / chains
            tiles = -(-out_width // owb)
            if tiles * owb != out_width:
                score *= penalty * out_width / (tiles * owb)
            if score > best_score + 1e-9:
                best, best_score = ConvTile(owb, ocv, shared), score
    return best


def _window_work(conv: te.Tensor):
    """`choose_conv_tile`'s window_work of a grouped conv stage (Note [shared windows])."""
    data = next(t for t in conv.op.input_tensors if len(t.shape) == 5)
    icb, ib = int(data.shape[1].value), int(data.shape[4].value)
    ocb, ob = int(conv.shape[1].value), int(conv.shape[4].value)
    groups = conv.op.attrs["groups"]

    def work(share: int) -> float:
        return GroupWindow.of(icb * ib, ocb * ob, groups, ib, ob, share).work()

    return work


def _find_conv(outs) -> te.Tensor:
    found = []

    def visit(op):
        if op.tag == CONV_TAG:
            found.append(op.output(0))
        for t in op.input_tensors:
            if isinstance(t.op, te.ComputeOp):
                visit(t.op)

    for t in outs:
        visit(t.op)
    if not found:
        raise ValueError(f"no stage tagged {CONV_TAG} among {list(outs)}")
    return found[0]


def _same_shape(a: te.Tensor, b: te.Tensor) -> bool:
    from tessera.arith import Analyzer

    an = Analyzer()
    return len(a.shape) == len(b.shape) and all(
        an.can_prove_equal(x, y) for x, y in zip(a.shape, b.shape, strict=True)
    )


# Note [padding per tile]
# A padded conv reads a zero-padded copy of its input. Padding the whole input first costs a
# pass over memory and a heap buffer per call (as much time as a depthwise conv itself), so
# each register tile pads just the window it reads (the kernel's rows, the tile's columns) into
# a stack buffer right before its reduction: the copy is about
# (tile width + kw - 1) / (kw * tile width * oc vectors * block) of the FMAs (1-3% for dense
# convs, a third for depthwise ones). A dense conv pads one input channel block at a time, inside
# its reduction over the blocks: the window of all blocks (92 KiB for 512 channels, a 7-wide tile
# of stride 2) would not stay in L1 while the weights stream through (-15% speed for a 3x3 conv
# of stride 2 onto 7x7). Windows too large for a thread's stack keep the whole-input copy, in
# parallel over rows. So do inputs of channel block 1 (plain NCHW data, the first conv of a
# network): a tile's window would be copied element by element (its rows are a few elements
# long), about as many instructions as the tile's FMAs for a 7x7 window over 3 channels (-15%
# speed); the whole input's rows copy as vectors, and a stride-2 7x7 window reads each padded
# element ~5 times, so the copy is 1/5 of the per-tile one.
# A depthwise conv copies no window: a third of its FMAs in copies made it store-bound (a tile
# of 14 outputs stored 48 window vectors and 14 outputs for 126 FMAs). It reads its input
# directly, each update of its reduction guarded by `likely(the input position is inside)`;
# partition_loop proves the guards true for the interior tiles (and kernel rows) and peels
# the border ones off, so interior tiles run unguarded FMAs on loads from the input itself:
# 1.2-1.5x faster at 1 thread (32 channels on 112x112: 89 -> 61 us, 96 on 112x112 stride 2:
# 100 -> 77 us, 576 on 14x14: 22 -> 16 us), for ~0.3 s more compile time per kernel.
# The stack buffer's cap: 1 / PAD_TILE_STACK_SHARE of the target's thread stack (`stack_share`
# in cpu.py: 256 KiB of the default 8 MiB).
PAD_TILE_STACK_SHARE = 32


def _pad_tile_bytes(pad: te.Tensor, conv: te.Tensor, tile: ConvTile, row: bool = False) -> int:
    """Bytes of one channel block's window of a register tile (`row`: of a row of tiles, Note
    [row accumulators])."""
    ib = int(pad.shape[4].value)
    a = conv.op.attrs
    width = tile.ow_block
    if row:
        ow = representative_shape(conv.shape)[3]
        width = -(-ow // tile.ow_block) * tile.ow_block
    cols = (width - 1) * a["stride_w"] + a["window_w"]
    return a["window_h"] * cols * ib * pad.dtype.bits // 8


def pad_per_tile_rule(block: int, tile_bytes: int, target=None) -> bool:
    """Note [padding per tile]: blocked inputs whose tile window fits the stack (the
    target's, else the current target's)."""
    return block > 1 and tile_bytes <= stack_share(target, PAD_TILE_STACK_SHARE)


def pad_tile_bytes(window_h, window_w, stride_w, ow_block, block) -> int:
    """Bytes of one channel block's window of a register tile (float32)."""
    return window_h * ((ow_block - 1) * stride_w + window_w) * block * 4


def _schedule_pad(
    s,
    conv: te.Tensor,
    acc: te.Tensor,
    tile: ConvTile,
    per_tile=None,
    target=None,
    parallel=True,
    row=False,
) -> bool:
    """See Note [padding per tile]; `per_tile`: the config's choice (None: the rule);
    `parallel`: a padding stage computed whole runs its rows in parallel; `row`: the window
    is a row's (Note [row accumulators]). Returns the choice made (False when there is no
    padding)."""
    made = False
    for t in conv.op.input_tensors:
        if not (isinstance(t.op, te.ComputeOp) and t.op.tag == PAD_TAG):
            continue
        block = int(t.shape[4].value)
        if per_tile is None:
            made = pad_per_tile_rule(block, _pad_tile_bytes(t, conv, tile, row), target)
        else:
            made = bool(per_tile)
        if made:
            s[t].compute_at(s[acc], s[acc].op.reduce_axis[0])  # rco: one input block
            s[t].set_scope("local")
            s[t].vectorize(s[t].op.axis[-1])
        else:
            n, c, h, _, k = s[t].op.axis
            if parallel:
                s[t].parallel(s[t].fuse(n, c, h))
            s[t].vectorize(k)
    return made


def schedule_conv2d_nchwc(outs, target=None, config=None) -> te.Schedule:
    """The x86 schedule of a fused group anchored on `conv2d_nchwc` (Note [conv micro-kernel]).
    `config`: the knobs of the x86 conv2d strategy (topi/x86/strategy.py: ow_block, oc_vectors,
    prefetch, unroll_tiles, parallel: Note [conv threading split]); None: the hand rules (the
    strategy's defaults)."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    conv = _find_conv(outs)
    depthwise = bool(conv.op.attrs.get("depthwise", 0))
    # a symbolic width (or batch, height): the rules at the representative size, the
    # accumulators' tail tile computed whole (Note [clamped tails] in te/lower.py)
    _, ocb, _, ow, _ = representative_shape(conv.shape)
    if config is not None:
        tile = ConvTile(config["ow_block"], config.get("oc_vectors", 1))
    else:
        grouped = bool(conv.op.attrs.get("grouped", 0))
        registers = vector_registers(target)
        work = _window_work(conv) if grouped else None
        tile = choose_conv_tile(ow, ocb, registers, depthwise, fma_chains(target), grouped, work)
    share = conv.op.attrs.get("share", 1)
    if share > 1 and tile.oc_vectors != share:  # the windows of the weight's packing
        budget = _accumulator_budget(vector_registers(target))
        tile = ConvTile(max(1, min(tile.ow_block, budget // share)), share, True)
    out_ops = {id(t.op) for t in outs}
    acc = s.cache_write(conv, "local")
    if not all_static(conv.shape):
        s[acc].clamp_tails()
    if id(conv.op) in out_ops:
        out = conv
    elif len(outs) == 1 and _same_shape(outs[0], conv):
        s[conv].compute_inline()  # now a copy of the accumulators: the epilogue reads them
        out = outs[0]
    else:  # several outputs: the conv is stored whole, the others read it
        out = conv
        for t in outs:
            if t.op is not conv.op:
                _schedule_elementwise(s, t)
    if config is not None:
        prefetch = bool(config.get("prefetch", False))
    else:
        prefetch = _prefetch_pays(out, acc, tile, target)
    taps_inner = bool(config.get("taps_inner", False)) if config is not None else False
    split = config.get("parallel", "rows") if config is not None else "rows"
    order = config.get("reduce_order", "channels") if config is not None else "channels"
    unrolled = tuple(k for k in UNROLL_KNOBS if config is not None and config.get(k, False))
    if depthwise:  # no channel reduction to keep a row's sums over (Note [row accumulators])
        row_acc = False
    elif config is not None:
        row_acc = bool(config.get("row_accumulators", False))
    else:
        row_acc = _row_accumulators_pay(conv, tile, target)
    tiles = _schedule_tile(s, out, acc, tile, prefetch, taps_inner, split, order, unrolled, row_acc)
    pad_knob = config.get("pad_per_tile") if config is not None else None
    per_tile = _schedule_pad(s, conv, acc, tile, pad_knob, target, split != "none", row_acc)
    if config is not None:
        unroll = bool(config.get("unroll_tiles", False))
    else:
        unroll = depthwise and -(-ow // tile.ow_block) == 2
    if unroll:
        # Unroll the loop over a row's register tiles. A depthwise conv guards its input reads
        # (Note [padding per tile]); with two tiles per row both are border tiles and
        # partition_loop finds no interior to split off, leaving rw loops of symbolic extents
        # (no unrolling, no load reuse across rw). Unrolled, each tile's column is a constant
        # and its guards resolve: 192 channels on 28x28 (two 14-wide tiles, AVX-512) 28.5 ->
        # 22.5 us, 576 on 14x14 (two 7-wide tiles, AVX2) 41 -> 25 us at 1 thread.
        s[out].unroll(tiles)
    if depthwise:
        knobs = {"ow_block": tile.ow_block, "unroll_tiles": unroll}
        if config is not None and config.get("taps_inner") is not None:  # ARM's knob
            knobs["taps_inner"] = taps_inner
    else:
        ob = int(conv.shape[4].value)
        knobs = {"out_block": ob, "ow_block": tile.ow_block, "oc_vectors": tile.oc_vectors}
        if conv.op.attrs.get("grouped", 0):
            data = next(t for t in conv.op.input_tensors if len(t.shape) == 5)
            knobs["in_block"] = int(data.shape[4].value)
            knobs["shared_window"] = conv.op.attrs.get("share", 1) > 1
        knobs["prefetch"] = prefetch
        if any(getattr(t.op, "tag", "") == PAD_TAG for t in conv.op.input_tensors):
            knobs["pad_per_tile"] = per_tile
        if has_taps(conv):
            knobs.update(reduce_order=order, unroll_window="unroll_window" in unrolled)
        knobs["unroll_block"] = "unroll_block" in unrolled
        knobs["row_accumulators"] = row_acc
    knobs["parallel"] = split
    record_config(s, Config("depthwise_nchwc" if depthwise else "direct_nchwc", knobs))
    return s


# Note [conv threading split]
# Which loops of a conv's register tiles run in parallel is a decision of its own (knob
# `parallel` of the x86 direct and depthwise convs, measured in the model's layout like every
# knob, Note [in-model layout]): "rows", the default (today's rule), every (image, output
# channel chunk, output row) a parallel iteration -- the most iterations, so the pool's guided
# chunks balance best; "chunks", the (image, channel chunk) pairs only, each iteration all the
# rows of its chunk -- fewer, longer iterations that keep a chunk's weights in the core's cache
# across its rows (a map with few channel chunks then has little to balance); "none", no
# parallel loop at all -- a kernel of a few microseconds pays the wake-up and join of the
# pool's workers (Note [waiting] in runtime/native/tessera_rt.c) for little work, and on a
# loaded machine a preempted worker holds it up. A padding stage computed whole (Note [padding
# per tile]) follows: parallel over its rows unless the split is "none".
CONV_SPLITS = ("rows", "chunks", "none")


# Note [row accumulators]
# A register tile sums its whole reduction (every input block, tap and channel) before the next
# tile starts, so each tile reads all the weights of its oc_vectors: oc_vectors * block * input
# channels * taps floats, 73 KiB for a 3x3 conv of 128 channels in a tile of 2 blocks of 8, 295
# KiB for 512 channels. Past the L1 data cache they come from L2 (or memory) again for every
# tile of a few outputs, a weight load per ow_block FMAs: ResNet-50's three 3x3 convs of
# stride 2 ran at 1.56x ORT's time on Zen 3 (AVX2), and no register tile of the space did
# better. With knob `row_accumulators` the accumulators of a whole output row (oc_vectors
# blocks x the row's width: 28 x 2 x 8 floats, 1.8 KiB) live in a stack buffer, and the input
# blocks are the outermost reduction loop around the row's tiles: a block's weights
# (oc_vectors * block * block * taps floats, 4.6 KiB) stay in L1 while every tile of the row
# uses them, and the padded window per input block is the row's (Note [padding per tile]). What
# it costs: each tile loads and stores its accumulators once per input block, 2 / (taps *
# block) memory accesses per FMA -- nothing for a 3x3 kernel (1/36 with blocks of 8), a quarter
# for a 1x1 kernel with blocks of 8 (slower: 1x1 convs keep the tile's reduction whole, their
# weights per tile are a single tap anyway). A row whose width the tile does not divide
# computes its last tile whole (Note [clamped tails] in te/lower.py; guards inside the unrolled
# tile kept its accumulators in memory), work the tile form does not do (it peels the tail).
# The rule (the knob's default): the tile's weights exceed the L1 data cache, a block's
# reduction has at least ROW_MIN_STEPS steps (taps x the input block), the row holds at least
# two tiles (else nothing reuses a block's weights) and its whole last tile wastes at most
# ROW_MAX_WASTE of the row's work. Measured in ResNet-50 on Zen 3 (1 thread, each call's
# minimum, load ~7): 128 channels 28 wide (7 tiles of 4) 3.88 -> 3.11 ms, 256 channels 14 wide
# (7 of 2) 3.13 -> 2.81, but 512 channels 7 wide (4 + a whole 4 for 3: 1/7 wasted) 3.75 ->
# 5.09: the waste bound leaves that one its tiles. The sums' order is the same as the tile's
# (blocks, taps, channels): the results are bitwise the same.
ROW_MIN_STEPS = RuleKnob(
    "conv.row_min_steps", (16, 32, 64, 128), 32,
    "row accumulators only where one input block's reduction takes at least this many steps",
)  # fmt: skip
ROW_MAX_WASTE = RuleKnob(
    "conv.row_max_waste", (0.0, 0.0625, 0.125, 0.25), 0.0625,
    "row accumulators only where the row's whole last tile wastes at most this share of work",
)  # fmt: skip


def row_accumulators_rule(
    tile_weight_bytes: int, steps_per_block: int, out_width: int, ow_block: int, target=None
) -> bool:
    """Note [row accumulators]: the tile's weights past L1, enough steps per input block to
    hide the accumulators' reload, two or more tiles per row, a little waste in its last."""
    l1 = target_cache_sizes(target)[1]
    tiles = -(-out_width // ow_block)
    return (
        tile_weight_bytes > l1
        and steps_per_block >= ROW_MIN_STEPS.value()
        and tiles >= 2
        and tiles * ow_block - out_width <= ROW_MAX_WASTE.value() * out_width
    )


def _row_accumulators_pay(conv: te.Tensor, tile: ConvTile, target) -> bool:
    """`row_accumulators_rule` for a direct (not depthwise) conv stage and its tile."""
    w = next(t for t in conv.op.input_tensors if len(t.shape) == 6)
    _, *rest = _static(w.shape, CONV_TAG)  # (O/o, I/i, KH, KW, i, o)
    per_block = math.prod(rest) * w.dtype.bits // 8
    steps = math.prod(int(r.dom.extent.value) for r in conv.op.reduce_axis[1:])
    _, _, _, ow, _ = representative_shape(conv.shape)
    return row_accumulators_rule(per_block * tile.oc_vectors, steps, ow, tile.ow_block, target)


# Note [conv reduction order]
# A direct (not depthwise) conv's register tile sums over input-channel blocks (rco), kernel
# rows and columns (rh, rw) and the channels of a block (rci). "channels", the default (today's
# order), runs rco outermost: a tile reads one input block's window at a time (a padding stage
# per tile is computed there, Note [padding per tile]) and the weights in their packed order
# (OIHW{i}i{o}o: a block's taps are contiguous). "taps" runs the kernel's taps outermost, then
# the blocks: each tap walks all the input channels of one input row segment, so a tile's loads
# per tap are the same rows of every block -- for a kernel with few input channels (a stem
# conv, 3 channels in blocks of 1) the innermost reduction is then a run over channels instead
# of a 1-long loop under three others, and for strided convs a tap reads one row of each block
# in turn. Both orders compute the same sums in a different order (float rounding differs in
# the last bits). With either order, knob `unroll_window` unrolls the loop over a kernel row's
# taps (rw) and knob `unroll_block` the loop over an input block's channels (rci), both off by
# default (as before): the loops around the register tile are a few iterations each (3 taps,
# 8 channels), which LLVM may leave rolled, paying a loop's compare and branch and the
# address arithmetic of each step. `reduce_order` and `unroll_window` are knobs of the direct
# conv where the kernel has more than one tap (a 1x1 kernel has one order and no row to
# unroll), `unroll_block` of every direct conv; the tuner measures which is faster.
CONV_REDUCE_ORDERS = ("channels", "taps")
UNROLL_KNOBS = ("unroll_window", "unroll_block")  # rw, rci: the last two reduce axes


def has_taps(conv: te.Tensor) -> bool:
    """Does a direct conv's kernel have more than one tap (so its reduction order matters)?"""
    reduce = conv.op.reduce_axis
    return len(reduce) == 4 and any(int(r.dom.extent.value) > 1 for r in reduce[1:3])


def _schedule_tile(
    s,
    out,
    acc,
    tile: ConvTile,
    prefetch: bool,
    taps_inner: bool = False,
    split: str = "rows",
    order: str = "channels",
    unrolled: tuple = (),
    row_acc: bool = False,
):
    """The register tile's loops; returns the loop over a row's tiles. `taps_inner` (depthwise):
    a kernel row's taps inside the loop over the tile's columns (Note [depthwise tap order] in
    topi/arm/strategy.py); else the whole window outside it. `split`: the loops run in parallel
    (Note [conv threading split]); `order`, `unrolled`: a direct conv's reduction order and
    the reduction loops unrolled, of UNROLL_KNOBS (Note [conv reduction order]); `row_acc`:
    a direct conv's accumulators of a whole row, input blocks outermost (Note [row
    accumulators])."""
    if split not in CONV_SPLITS:
        raise ValueError(f"conv threading split {split!r}: expected one of {CONV_SPLITS}")
    if order not in CONV_REDUCE_ORDERS:
        raise ValueError(f"conv reduction order {order!r}: expected one of {CONV_REDUCE_ORDERS}")
    st = s[out]
    n, oc, oh, ow, oi = st.op.axis
    oco, oci = st.split(oc, factor=tile.oc_vectors)
    owo, owi = st.split(ow, factor=tile.ow_block)
    st.reorder(n, oco, oh, owo, oci, owi, oi)
    row = oh
    if split == "rows":
        row = st.fuse(n, oco, oh)
        st.parallel(row)
    elif split == "chunks":
        st.parallel(st.fuse(n, oco))
    st.unroll(oci)
    st.unroll(owi)
    st.vectorize(oi)
    a = s[acc]
    an, aoc, aoh, aow, aoi = a.op.axis
    a.compute_at(st, row if row_acc else owo)
    if row_acc:  # Note [row accumulators]
        width = aow.dom.extent
        if not (isinstance(width, tir.IntImm) and width.value % tile.ow_block == 0):
            a.clamp_tails()  # the last tile computed whole
        aowo, aow = a.split(aow, factor=tile.ow_block)
        rco, rh, rw, rci = a.op.reduce_axis  # the blocks outermost, whatever `order` says
        a.reorder(an, aoh, rco, aowo, rh, rw, rci, aoc, aow, aoi)
    elif taps_inner and len(a.op.reduce_axis) == 2:
        rh, rw = a.op.reduce_axis
        a.reorder(an, aoh, rh, aoc, aow, rw, aoi)
        a.unroll(rw)
    elif order == "taps" and len(a.op.reduce_axis) == 4:
        rco, rh, rw, rci = a.op.reduce_axis
        a.reorder(an, aoh, rh, rw, rco, rci, aoc, aow, aoi)
    else:
        a.reorder(an, aoh, *a.op.reduce_axis, aoc, aow, aoi)
    if len(a.op.reduce_axis) == 4:
        for knob, axis in zip(UNROLL_KNOBS, a.op.reduce_axis[2:], strict=True):
            if knob in unrolled:
                a.unroll(axis)  # rw: a kernel row's taps; rci: an input block's channels
    a.unroll(aoc)
    a.unroll(aow)
    a.vectorize(aoi)
    if prefetch:
        w = next(t for t in a.op.input_tensors if len(t.shape) == 6)
        a.prefetch(w, aoc, tile.oc_vectors)  # Note [weight prefetch]
    return owo


# Note [weight prefetch]


# Note [weight prefetch]
# A model streams its weights from memory on every inference (ResNet-50: ~170 MB). A tile's
# chunk of oc blocks reads its weights from memory for the first output row and from L2 for
# the others; nothing overlaps those memory reads with computation. So each step of a tile's
# reduction (one input channel) prefetches the next chunk's weights for the same step, one line
# per oc block, interleaved with the FMAs: the rows of a chunk cover the next chunk's reads.
# Where it pays (measured cold, weights flushed, 1 thread, Zen 5, AVX-512): 1x1 512->2048 on
# 7x7 0.557 -> 0.485 ms, 1024->2048 s2 14->7 1.09 -> 1.01, 2048->512 on 7x7 0.515 -> 0.501.
# Where it does not: the weights fit in L2 (they stay cached between calls, or are small next
# to the computation); two chunks take more than half of L2 (the next chunk evicts the current
# one: 3x3 512 s2, chunks of 590 KiB, 1.32 -> 1.58 ms); each weight serves more than
# `prefetch_max_reuse` outputs (the first row is a small share: 1024->512 on 14x14 0.945 ->
# 0.962). With warm weights the prefetches cost 1-3%. The bound is the target's balance: a
# weight vector takes `memory_cost` FMAs to arrive from memory (Note [machine balance] in
# cpu.py) and feeds one FMA per output, so the memory reads are at least PREFETCH_MEMORY_SHARE
# of the FMAs up to memory_cost / PREFETCH_MEMORY_SHARE outputs (64 with AVX-512: 7x7 maps,
# stage 4 of ResNet-50, prefetch; 14x14 ones do not). The share is a rule knob (Note [rule
# knobs] in topi/rules.py); the choice it shapes is knob `prefetch`.
PREFETCH_MEMORY_SHARE = RuleKnob(
    "conv.prefetch_memory_share", (0.125, 0.25, 0.5, 1.0), 0.25,
    "prefetch a conv's weights while their memory reads are at least this share of its FMAs",
)  # fmt: skip


def prefetch_max_reuse(target) -> float:
    """Note [weight prefetch]: the most outputs per weight for which prefetching pays."""
    return memory_cost(target) / PREFETCH_MEMORY_SHARE.value()


def _prefetch_pays(out: te.Tensor, acc: te.Tensor, tile: ConvTile, target, l2=None) -> bool:
    """Note [weight prefetch]: weights larger than L2, two chunks within half of it, few
    outputs reusing each weight (`l2`: the target's L2 where None)."""
    ws = [t for t in acc.op.input_tensors if len(t.shape) == 6]
    if len(ws) != 1 or len(acc.op.reduce_axis) != 4:  # depthwise: no channel reduction
        return False
    w = ws[0]
    ocb, *rest = _static(w.shape, CONV_TAG)
    total = ocb * math.prod(rest) * w.dtype.bits // 8
    chunk = total // ocb * tile.oc_vectors
    n, _, oh, ow, _ = representative_shape(out.shape)
    l2 = target_cache_sizes(target)[2] if l2 is None else l2
    return total > l2 and 4 * chunk <= l2 and n * oh * ow <= prefetch_max_reuse(target)


def _schedule_elementwise(s, t: te.Tensor) -> None:
    axes = list(s[t].op.axis)
    if len(axes) >= 2:
        s[t].parallel(s[t].fuse(*axes[:2]) if len(axes) > 2 else axes[0])
        s[t].vectorize(axes[-1])
