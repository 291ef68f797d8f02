"""The ARM strategies (key "arm"): dense, matmul and batch_matmul with the register tile of a
load-store machine; the other ops take the "cpu" strategies (topi/x86/strategy.py).

    blk = arm_blocking(Target("llvm -mtriple=aarch64-linux-gnu"), M=16, N=256, K=256)
    # Blocking(mr=4, nv=4): 16 accumulators + 4 B vectors + 4 A elements of 32 registers
    # armv7 (16 registers): mr=2, nv=4

    nn.dense, matmul   generic | blocked (B read as it is) | packed (constant B in panels)
    nn.batch_matmul    generic | blocked

The implementations, knobs (mr, nv, kc), config spaces and the weight packing are the cpu
strategy's (shared, not copied); the defaults are Note [arm register tile]'s. The schedules are
the CPU micro-kernels (topi/x86/dense.py, batch_matmul.py) registered under "arm" with these
defaults: a kernel built without a config (the default one) is scheduled by this rule.

    nn.conv2d          nchw | direct_nchwc | depthwise_nchwc | winograd (the cpu strategy's)
    qnn.dense          panels (the cpu int8 kernel) | mmla (I8MM's usmmla: int8_mmla.py)

Convolutions take the cpu strategy's implementations, spaces and layouts; on AArch64 its tile
rule (Note [conv micro-kernel]) serves as it is. On SVE cores every rule sees the SVE vector
length (Note [fixed-length SVE]): 8 float32 lanes on neoverse-v1. On 32-bit ARM the direct
conv's defaults are Note [armv7 conv tile]'s: one output-channel vector per tile, the input
padded once.
"""

from __future__ import annotations

import math

from tessera import te
from tessera.graph.op import get_op
from tessera.topi.arm import int8_mmla  # qnn.dense_mmla, its compute and schedule
from tessera.topi.generic import inline_injective
from tessera.topi.qnn import DENSE_TAG as QNN_DENSE_TAG
from tessera.topi.strategy import Config, ConfigSpace, Workload, register_strategy
from tessera.topi.x86 import batch_matmul as x86_bmm
from tessera.topi.x86 import conv2d as x86_conv
from tessera.topi.x86 import dense as x86_dense
from tessera.topi.x86 import int8_dense as x86_int8
from tessera.topi.x86 import strategy as cpu
from tessera.topi.x86.conv2d import choose_conv_tile
from tessera.topi.x86.cpu import vector_registers

# Note [fixed-length SVE]
# SVE code is either vector-length agnostic (scalable vectors, predicated loops) or built for one
# length. tessera's kernels are built for one: every schedule rule sizes its blocks from
# Target.vector_width_bits, which on an SVE core is its SVE length (-msve-vector-bits=N, else
# the core's own: target.SVE_VECTOR_BITS, 256 on neoverse-v1), so a neoverse-v1 conv blocks
# 8 output channels (NCHW8c) and a dense kernel's panel is nv x 8 columns, in 32 registers.
# The code generator then states the length in each function (vscale_range(N/128, N/128),
# codegen/llvm/build.py), which is what lets LLVM lower the 256-bit vectors to whole SVE
# registers with ptrue predicates rather than pairs of NEON registers; int8's dot becomes SVE's
# usdot or sdot (codegen/llvm/int8_dot.py). Tails need no predicated loops: the schedules pad
# or guard them as for any vector width. The price is that the library runs only where the
# thread's SVE length is N: it asks Linux for N when loaded (prctl), and runners check (Note
# [SVE length guard], tessera/cross/link.py). Neoverse-N2/V2 have 128-bit SVE: there the NEON
# kernels are as wide, so their builds are the NEON ones.


# Note [arm register tile]
# A matrix-product micro-kernel holds mr x nv accumulators and, per step of k, loads nv vectors
# of B and one element of A per row. x86 folds the broadcast of A into the FMA's memory operand
# (AVX-512) or reuses one broadcast register, so its rule (dense.choose_blocking) budgets
# mr * nv + nv + 1 registers. ARM has no memory operands: each row's element of A is loaded
# into a register of its own (`ld1r`, or `ldr s` for `fmla v.4s, v.4s, v.s[0]`; armv7 `vld1.32
# {d[], d[]}`) and stays live while the row's nv FMAs use it, so a tile takes mr * nv + nv + mr
# registers. Among the tiles that fit, the rule takes the most FMAs per load, mr * nv /
# (mr + nv), with a row tail (M not a multiple of mr: guarded rows inside the k loop) counted
# as lost work and penalized as the conv tile rule does; ties go to the wider panel. Measured
# with QEMU's instruction counts (bench/arm.py), matmul 16x256 @ 256x256: aarch64 6x4 (the x86
# rule: 34 registers, spills and a tail) 527 k -> 4x4 413 k; armv7 6x2 800 k -> 2x4 627 k.
TAIL_PENALTY = x86_conv.TAIL_PENALTY  # the conv tile rule's rule knob ("tile.tail_penalty")


def arm_tile(registers: int, lanes: int, M: int, N: int, nv: int | None = None) -> tuple:
    """(mr, nv) of the micro-kernel by Note [arm register tile]; `nv` given: the panel width
    is fixed (packed weights)."""
    best, best_score, penalty = (1, nv or 1), -1.0, TAIL_PENALTY.value()
    widths = (nv,) if nv is not None else tuple(v for v in (1, 2, 4) if v <= -(-N // lanes))
    for v in widths or (1,):
        for mr in range(1, M + 1):
            if mr * v + v + mr > registers:
                break
            score = mr * v / (mr + v)
            tiles = -(-M // mr)
            if tiles * mr != M:
                score *= penalty * M / (tiles * mr)
            if score > best_score + 1e-9 or (abs(score - best_score) <= 1e-9 and v > best[1]):
                best, best_score = (mr, v), score
    return best


def arm_blocking(target, M: int, N: int, K: int, nv: int | None = None,
                 dtype: str = "float32") -> x86_dense.Blocking:  # fmt: skip
    """The Blocking of the shared micro-kernel with the ARM tile (kc: dense.py's L1 rule);
    float16 on half lanes (Note [half blocks])."""
    lanes = target.vector_lanes(dtype)
    mr, nv = arm_tile(vector_registers(target), lanes, M, N, nv)
    # choose_blocking with M = mr rows returns that mr and sizes kc for it
    return x86_dense.choose_blocking(target, mr, N, K, nv=nv, dtype=dtype)


def packed_width(target, N: int) -> int:
    """Columns per packed weight panel (nr) on ARM, for any number of rows (as panel_width)."""
    return arm_blocking(target, 1 << 10, N, 1 << 10).nr


# -- strategies ------------------------------------------------------------------------------------


def _blocked_space(wl: Workload, target) -> ConfigSpace | None:
    g = cpu._Gemm.of(wl, cpu.blocked_dtypes(target))
    if g is None:
        return None
    dtype = wl.dtype(0)
    return cpu._gemm_space(g, target, lambda t: arm_blocking(t, g.M, g.N, g.K, dtype=dtype))


def _gemm_default(wl: Workload, target, context) -> str:
    """The cpu rule; a float16 product "blocked" where the core computes in half (Note [half
    blocks]: the packed weights are float32's)."""
    name = cpu._gemm_default(wl, target, context)
    if name == "generic" and cpu._Gemm.of(wl, cpu.blocked_dtypes(target)) is not None:
        return "blocked"
    return name


def _packed_space(wl: Workload, target) -> ConfigSpace | None:
    g = cpu._packed_gemm(wl)
    if g is None:
        return None

    def blocking(t):
        return arm_blocking(t, g.M, g.N, g.K, nv=packed_width(t, g.N) // t.vector_lanes("float32"))

    return cpu._gemm_space(g, target, blocking)


for _op in ("nn.dense", "matmul", "nn.batch_matmul"):
    _s = register_strategy(_op, "arm")
    _s.implementation("generic")(cpu._generic_gemm_space)
    _s.implementation("blocked", priority=1)(_blocked_space)
    if _op != "nn.batch_matmul":
        _s.implementation("packed", priority=2, layout=cpu._packed_layout)(_packed_space)
    _s.choose_default(_gemm_default)


# Note [armv7 conv tile]
# AArch32 NEON loads (`vld1`) take no immediate offset: every vector read at its own address
# needs an address register or an add, and the core has 13 general registers for all the
# pointers and counters of a conv's loop nest. A register tile of several output-channel
# vectors (oc_vectors > 1) reads as many weight streams, each its own pointer; the per-tile
# padding (Note [padding per tile]) adds a copy loop's pointers inside the tile loop. Both
# spill general registers there: under QEMU (bench/arm.py), 3x3 stride-2 convs on armv7 execute
# 20-30% fewer instructions with one weight stream and the input padded once: 64->128 on
# 28x28, 2x4 tile with per-tile padding (the cpu rule) 16.3 M -> 7x1 padded once 11.6 M; 32->64
# on 56x56 15.1 M -> 12.0 M; 128->256 on 14x14 takes 7x1 either way. So on 32-bit ARM the
# direct conv's tile is the cpu rule's with oc_vectors = 1 (its depthwise rule: most outputs per
# load within the accumulator budget, row tails penalized), and pad_per_tile is off. AArch64
# (immediate offsets, 31 general registers) keeps the cpu rule. The weight prefetch of Note
# [weight prefetch] (measured on x86 caches) is off by default there too: a knob to tune.


def _aarch32(target) -> bool:
    return target.llvm_triple.startswith(("arm", "thumb")) and not target.llvm_triple.startswith(
        "arm64"
    )


def _arm_direct_space(wl: Workload, target) -> ConfigSpace | None:
    space = cpu._direct_space(wl, target)
    if space is None or not _aarch32(target):
        return space
    c = cpu._Conv.of(wl, target)

    def ow_block(wl, target, context):
        return choose_conv_tile(c.ow, 1, c.registers, depthwise=True).ow_block

    rules = {"ow_block": ow_block, "oc_vectors": 1, "pad_per_tile": False, "prefetch": False}
    knobs = [
        cpu.Knob(k.name, k.candidates, rules[k.name]) if k.name in rules else k for k in space.knobs
    ]
    return ConfigSpace(knobs, space.constraints)


# Note [depthwise tap order]
# A depthwise register tile (ow_block columns of one channel vector) takes its 3x3 window with
# the taps outside the loop over its columns: for each tap, one FMA per column. The input
# vectors a kernel row reads, (ow_block - 1) * stride + kw of them, are loaded once and stay
# live across the row's taps, next to ow_block accumulators and a weight. Where that exceeds
# the register file (a 14-wide 3x3 tile at stride 2: 14 + 29 + 1 > 32), LLVM spills the inputs it
# hoisted. With the row's taps inside the column loop instead, a column takes its taps in turn
# (the same order of sums per output: bit-identical results) and each input is live for one or
# two columns only. Under QEMU (bench/arm.py), depthwise 3x3 stride 2, 96 channels 56x56 ->
# 28x28, cortex-a76: 379 k -> 308 k instructions; stride 1 (14 + 16 + 1 fit): 321 k either
# way; 256-bit SVE at stride 2: 191 k either way. On 32-bit ARM it costs (7-wide tiles at
# stride 2: 502 k -> 629 k): each of the column-wise reads takes an address register or an add
# there (Note [armv7 conv tile]). So the rule: taps inside on AArch64 when the window order's
# live vectors exceed the register file; a knob (taps_inner) to tune.


def taps_inner_rule(target, ow_block: int, stride_w: int, window_w: int) -> bool:
    """Note [depthwise tap order]: the row's taps inside the column loop? (window_w: the
    columns a kernel row spans, (kw - 1) * dilation + 1)"""
    live = ow_block + (ow_block - 1) * stride_w + window_w + 1
    return not _aarch32(target) and live > vector_registers(target)


def _arm_depthwise_space(wl: Workload, target) -> ConfigSpace | None:
    space = cpu._depthwise_space(wl, target)
    if space is None:
        return None
    c = cpu._Conv.of(wl, target)

    def taps_default(wl, target, context):
        ow_block = choose_conv_tile(c.ow, 1, c.registers, depthwise=True).ow_block
        return taps_inner_rule(target, ow_block, c.strides[1], (c.kw - 1) * c.dilation[1] + 1)

    return ConfigSpace([*space.knobs, cpu.Knob("taps_inner", (False, True), taps_default)])


_conv = register_strategy("nn.conv2d", "arm")
_conv.implementation("nchw")(cpu._nchw_space)
_conv.implementation("direct_nchwc", priority=1, layout=cpu._direct_layout)(_arm_direct_space)
_conv.implementation("depthwise_nchwc", priority=1, layout=cpu._depthwise_layout)(
    _arm_depthwise_space
)
_conv.implementation("winograd", priority=2, layout=cpu._winograd_layout)(cpu._winograd_space)
_conv.choose_default(cpu._conv_default)


# -- schedules: the CPU micro-kernels with the ARM defaults ----------------------------------------


def schedule_dense_packed(outs, target=None, config=None):
    """dense_packed (x86_dense.schedule_dense_packed) with Note [arm register tile]'s rows and
    kc for the packed panel's width when no config is given."""
    if config is None:
        anchor = x86_dense.find_tagged(list(outs), x86_dense.PACKED_TAG)
        M, N = (int(d.value) for d in anchor.shape)
        K = int(anchor.op.reduce_axis[0].dom.extent.value)
        nv = int(anchor.op.attrs["nr"]) // target.vector_lanes("float32")
        blk = arm_blocking(target, M, N, K, nv=nv)
        config = Config("packed", {"mr": blk.mr, "nv": blk.nv, "kc": blk.kc})
    return x86_dense.schedule_dense_packed(outs, target, config)


def schedule_matmul(outs, target=None, config=None):
    """dense / matmul / batch_matmul with B read as it is (x86_bmm.schedule_matmul) with Note
    [arm register tile]'s defaults when no config is given."""
    if config is None:
        anchor = x86_bmm._anchor(list(outs))
        shape = x86_bmm._static(anchor.shape) if anchor is not None else None
        if shape is not None and len(shape) >= 2:
            K = int(anchor.op.reduce_axis[0].dom.extent.value)
            blk = arm_blocking(target, shape[-2], shape[-1], K, dtype=str(anchor.dtype))
            config = Config("blocked", {"mr": blk.mr, "nv": blk.nv, "kc": blk.kc})
    return x86_bmm.schedule_matmul(outs, target, config)


def schedule_conv2d_nchwc(outs, target=None, config=None):
    """conv2d_nchwc (x86_conv.schedule_conv2d_nchwc) with Note [armv7 conv tile]'s defaults for
    a direct (not depthwise) conv on 32-bit ARM, and Note [depthwise tap order]'s for a
    depthwise one, when no config is given."""
    if config is None and target is not None:
        config = _depthwise_default(list(outs), target)
    if config is None and target is not None and _aarch32(target):
        conv = x86_conv._find_conv(list(outs))
        if not conv.op.attrs.get("depthwise", 0):
            ow = int(conv.shape[3].value)
            tile = choose_conv_tile(ow, 1, vector_registers(target), depthwise=True)
            knobs = {"ow_block": tile.ow_block, "oc_vectors": 1}
            knobs.update(pad_per_tile=False, prefetch=False, parallel="rows")
            config = Config("direct_nchwc", knobs)
    return x86_conv.schedule_conv2d_nchwc(outs, target, config)


def _depthwise_default(outs, target) -> Config | None:
    """The depthwise config of the rules (x86_conv's tile and unrolling) with the tap order
    of Note [depthwise tap order] where it says taps inside; else None (the cpu schedule)."""
    conv = x86_conv._find_conv(outs)
    if not conv.op.attrs.get("depthwise", 0):
        return None
    ow = int(conv.shape[3].value)
    tile = choose_conv_tile(ow, 1, vector_registers(target), depthwise=True)
    attrs = conv.op.attrs
    if not taps_inner_rule(target, tile.ow_block, attrs["stride_w"], attrs["window_w"]):
        return None
    unroll = -(-ow // tile.ow_block) == 2  # x86_conv.schedule_conv2d_nchwc's rule
    knobs = {"ow_block": tile.ow_block, "unroll_tiles": unroll, "taps_inner": True}
    knobs["parallel"] = "rows"  # Note [conv threading split]: the x86 rule
    return Config("depthwise_nchwc", knobs)


# Note [arm int8 panel]
# (Cores without I8MM: with it, qnn.dense runs usmmla, Note [i8mm matrix step].)
# The int8 dense kernel (topi/x86/int8_dense.py) reads weights packed in panels of 16 int32
# columns (topi/qnn.py pack_dense_weight) and lets a tile span several panels, each of its
# vectors reading one. With 8 int32 lanes (256-bit SVE) a vector is half a panel, and the
# lanes' panel and column (j // 16, j % 16) are not resolved to one contiguous read: LLVM gets
# 8 scalar loads per vector (dense 16x768 @ 768x768 on neoverse-v1: 2.25 M instructions, twice
# NEON's 1.06 M). On ARM a tile's vectors stay within one panel (nv at most 16 / lanes: 2 on
# 256-bit SVE), rows by the same rule: 0.74 M on neoverse-v1's SVE. NEON's tiles (4 vectors,
# one panel) are as before; the ARM register tile (mr 4 rather than 6) would cost 4-6% more
# there, the int8 step's broadcast row word being reused by the sdot pair's correction.


def schedule_qnn_dense(outs, target=None):
    """qnn.dense (x86_int8.schedule_qnn_dense) with Note [arm int8 panel]'s tile."""
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    s = te.create_schedule([t.op for t in outs])
    inline_injective(s, outs)
    x86_int8.schedule_pack(s, outs, target)
    anchor = x86_dense.find_tagged(outs, QNN_DENSE_TAG)
    M, N = (int(d.value) for d in anchor.shape)
    K4 = int(anchor.op.reduce_axis[0].dom.extent.value)
    nr = int(anchor.op.attrs["nr"])
    blk = x86_int8.int32_blocking(target, M, N, K4, nr)
    if blk.nv > nr // blk.lanes:
        fit = x86_dense.choose_blocking(target, M, N, K4, nv=nr // blk.lanes)
        blk = x86_dense.Blocking(blk.lanes, fit.registers, fit.mr, fit.nv, fit.kc, fit.l1, fit.l2)
    return x86_dense.schedule_gemm(s, outs, anchor, blk, target)


get_op("qnn.dense").schedule("arm")(schedule_qnn_dense)
get_op("nn.conv2d_nchwc").schedule("arm")(schedule_conv2d_nchwc)
get_op("nn.dense_packed").schedule("arm")(schedule_dense_packed)
for _name in ("nn.batch_matmul", "matmul", "nn.dense"):
    get_op(_name).schedule("arm")(schedule_matmul)


# -- int8 dense on the i8mm matrix step (topi/arm/int8_mmla.py, Note [i8mm matrix step]) -----------
#   qnn.dense   panels (dot_u8i8 on the 16-column panels: usdot, the sdot pair, ...) |
#               mmla (usmmla on column-pair panels; cores with FEAT_I8MM, constant weights)


def _mmla_gemm(wl: Workload, target):
    """(M2 row pairs, N2 column pairs, K8 steps) of a qnn.dense the mmla kernel can take on
    this target, else None: AArch64 with i8mm (the target table's features, from -mcpu and
    -mattr), a constant weight, static shapes."""
    if _aarch32(target) or "i8mm" not in target.features or not wl.constant[1:2] == (True,):
        return None
    xs, units = wl.shape(0), wl.attr("units")
    if not all(isinstance(d, int) for d in xs) or not isinstance(units, int):
        return None
    M = math.prod(xs[:-1]) if len(xs) > 1 else 1
    return -(-M // 2), -(-units // 2), -(-xs[-1] // 8)


def _mmla_space(wl: Workload, target) -> ConfigSpace | None:
    g = _mmla_gemm(wl, target)
    if g is None:
        return None
    m2, n2, k8 = g
    regs, lanes = vector_registers(target), int8_mmla.mmla_lanes(target)

    def default(field):
        return lambda wl, target, context: getattr(
            int8_mmla.mmla_blocking(target, m2, 4 * n2, k8), field
        )

    kcs = tuple(sorted({min(1 << i, k8) for i in range(3, 12)} | {default("kc")(wl, target, {})}))
    knobs = [
        cpu.Knob("mr", tuple(range(1, min(regs - 2, m2) + 1)), default("mr")),
        cpu.Knob(
            "nv", tuple(v for v in (1, 2, 4, 8) if v <= max(1, -(-4 * n2 // lanes))), default("nv")
        ),  # fmt: skip
        cpu.Knob("kc", kcs, default("kc")),
    ]
    return ConfigSpace(knobs, [lambda v: v["mr"] * v["nv"] + v["nv"] + v["mr"] <= regs])


def _mmla_layout(wl: Workload, config: Config, context, target, wp) -> dict | None:
    from tessera.topi import qnn as topi_qnn

    if wp is None:
        return None
    units = int(wl.attr("units"))
    w = topi_qnn.unpack_dense_weight(wp, units, wl.shape(0)[-1])
    lanes = int8_mmla.mmla_lanes(target)
    weight = int8_mmla.pack_mmla_weight(w, config["nv"] * lanes // 4)
    attrs = {"units": units, "lanes": lanes, "config": config.as_attr()}
    return {"op": "qnn.dense_mmla", "weight": weight, "attrs": attrs}


_qdense = register_strategy("qnn.dense", "arm")
_qdense.implementation("panels")(cpu._generic_gemm_space)
_qdense.implementation("mmla", priority=1, layout=_mmla_layout)(_mmla_space)


@_qdense.choose_default
def _qdense_default(wl: Workload, target, context) -> str:
    ok = context.get("rewrite", True) and _mmla_gemm(wl, target) is not None
    return "mmla" if ok else "panels"
