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

Convolutions keep the cpu strategy: its tile rule (Note [conv micro-kernel]) already counts one
load per broadcast input and sizes the tile from the register file (32 vector registers on
aarch64, 16 on armv7); under QEMU no ARM-specific rule did better on every shape measured.
"""

from __future__ import annotations

from tessera.graph.op import get_op
from tessera.topi.strategy import Config, ConfigSpace, Workload, register_strategy
from tessera.topi.x86 import batch_matmul as x86_bmm
from tessera.topi.x86 import dense as x86_dense
from tessera.topi.x86 import strategy as cpu
from tessera.topi.x86.cpu import vector_registers

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
TAIL_PENALTY = 0.75  # the conv tile rule's (topi/x86/conv2d.py choose_conv_tile)


def arm_tile(registers: int, lanes: int, M: int, N: int, nv: int | None = None) -> tuple:
    """(mr, nv) of the micro-kernel by Note [arm register tile]; `nv` given: the panel width
    is fixed (packed weights)."""
    best, best_score = (1, nv or 1), -1.0
    widths = (nv,) if nv is not None else tuple(v for v in (1, 2, 4) if v <= -(-N // lanes))
    for v in widths or (1,):
        for mr in range(1, M + 1):
            if mr * v + v + mr > registers:
                break
            score = mr * v / (mr + v)
            tiles = -(-M // mr)
            if tiles * mr != M:
                score *= TAIL_PENALTY * M / (tiles * mr)
            if score > best_score + 1e-9 or (abs(score - best_score) <= 1e-9 and v > best[1]):
                best, best_score = (mr, v), score
    return best


def arm_blocking(target, M: int, N: int, K: int, nv: int | None = None) -> x86_dense.Blocking:
    """The Blocking of the shared micro-kernel with the ARM tile (kc: dense.py's L1 rule)."""
    lanes = target.vector_lanes("float32")
    mr, nv = arm_tile(vector_registers(target), lanes, M, N, nv)
    # choose_blocking with M = mr rows returns that mr and sizes kc for it
    return x86_dense.choose_blocking(target, mr, N, K, nv=nv)


def packed_width(target, N: int) -> int:
    """Columns per packed weight panel (nr) on ARM, for any number of rows (as panel_width)."""
    return arm_blocking(target, 1 << 10, N, 1 << 10).nr


# -- strategies ------------------------------------------------------------------------------------


def _blocked_space(wl: Workload, target) -> ConfigSpace | None:
    g = cpu._Gemm.of(wl)
    if g is None:
        return None
    return cpu._gemm_space(g, target, lambda t: arm_blocking(t, g.M, g.N, g.K))


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
    _s.choose_default(cpu._gemm_default)


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
            blk = arm_blocking(target, shape[-2], shape[-1], K)
            config = Config("blocked", {"mr": blk.mr, "nv": blk.nv, "kc": blk.kc})
    return x86_bmm.schedule_matmul(outs, target, config)


get_op("nn.dense_packed").schedule("arm")(schedule_dense_packed)
for _name in ("nn.batch_matmul", "matmul", "nn.dense"):
    get_op(_name).schedule("arm")(schedule_matmul)
