"""What schedule rules ask of a CPU besides `Target.features`: vector registers, cache sizes,
the compute-to-bandwidth balance (`memory_cost`, from the target's described DRAM bytes per
cycle) and shares of the described thread stack (`stack_share`).

    vector_registers(Target("llvm -mcpu=haswell"))   # 16 (32 with AVX-512 and on AArch64)
    cache_sizes()                                    # {1: 49152, 2: 1048576, 3: ...} from sysfs

Cache sizes come from sysfs for the host, defaults elsewhere (cross targets, no sysfs). Rules
over these numbers, never tables of shapes, choose the block sizes of the x86 kernels.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from tessera.target import DEFAULT_DRAM_BYTES_PER_CYCLE, DEFAULT_STACK_BYTES, Target

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
DEFAULT_CACHES = {1: 32 * 1024, 2: 1024 * 1024}  # where sysfs is missing (or cross targets)


def _read_cache_sizes(folder: Path) -> dict[int, int]:
    sizes = dict(DEFAULT_CACHES)
    for index in sorted(folder.glob("index*")) if folder.is_dir() else []:
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
        except (OSError, ValueError):
            continue
        match = re.fullmatch(r"(\d+)([KMG]?)", text)
        if kind in ("Data", "Unified") and match:
            sizes[level] = int(match[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[match[2]]
    return sizes


@functools.cache
def _host_cache_sizes() -> dict[int, int]:
    return _read_cache_sizes(CACHE_DIR)


def cache_sizes(folder: Path | None = None) -> dict[int, int]:
    """Bytes of the data (or unified) cache at each level (sysfs; defaults where absent)."""
    return dict(_host_cache_sizes() if folder is None else _read_cache_sizes(folder))


def target_cache_sizes(target) -> dict[int, int]:
    """The host's cache sizes when `target` runs here, else the defaults."""
    return cache_sizes() if getattr(target, "is_host", False) else dict(DEFAULT_CACHES)


def vector_registers(target) -> int:
    """Architectural vector registers (`Target.vector_registers`): 32 with AVX-512 and on
    AArch64, else 16."""
    return 16 if target is None else target.vector_registers


# Note [int8 pair registers]
# Without a uint8 x int8 dot instruction (x86 VNNI's vpdpbusd), dot_u8i8 runs as two vpmaddwd
# on the even and odd bytes (codegen/llvm/int8_dot.py, Note [int8 dot]): each weight vector and
# each broadcast data word lives in two registers (its even and odd bytes as 16-bit lanes),
# beside the byte mask and the two products on their way to the accumulator. A register tile
# sized for one register per operand, as FMAs take, then spills accumulators at every step of
# the reduction: ddddocr_old's int8 convs (4 pixels x 2 vectors of channels on AVX2) stored and
# reloaded six accumulators per step. The int8 tiles budget `int8_operand_registers` per
# operand and `int8_fixed_registers` besides.


def int8_pairs(target) -> bool:
    """Whether dot_u8i8 runs on vpmaddwd pairs on this x86 target (no VNNI)."""
    if target is None or not target.llvm_triple.startswith(("x86_64", "i686", "i386")):
        return False
    feats = target.features
    pairs = "avx2" in feats or "avx512bw" in feats
    return pairs and "avxvnni" not in feats and "avx512vnni" not in feats


def int8_operand_registers(target) -> int:
    """Vector registers one weight vector or broadcast data word of dot_u8i8 takes (Note
    [int8 pair registers])."""
    return 2 if int8_pairs(target) else 1


def int8_fixed_registers(target) -> int:
    """Vector registers dot_u8i8 needs besides its operands and accumulators: the byte mask
    and two products on vpmaddwd pairs (Note [int8 pair registers]), else none."""
    return 3 if int8_pairs(target) else 0


# Note [machine balance]
# The cost rules count work in vector FMAs of one core. Reading weights from memory (they do
# not stay in cache between inferences of a large model) costs the FMAs the core could issue
# while one vector register's bytes arrive: `memory_cost`, the target's compute-to-bandwidth
# balance = FMAs per cycle x vector bytes / DRAM bytes per cycle per core, the last described by
# the target (`Target.dram_bytes_per_cycle`, -dram-bytes-per-cycle: Note [described machine] in
# tessera/target.py; 8 unless told, what DRAM gives one core of a desktop or server part).
# AVX-512 with two FMA pipes: 2 x 64 / 8 = 16; AVX2: 8; 128-bit vectors: 4. The Winograd rule
# (Note [winograd rule]) and the weight prefetch (Note [weight prefetch]) use it.


# Note [FMA chains]
# An FMA's result is ready FMA_LATENCY cycles after it issues (4 on Intel since Skylake, AMD
# since Zen, and the AArch64 cores of Apple and Arm's Neoverse/Cortex-A7x), so a register tile
# whose accumulators are each updated once per reduction step keeps the FMA pipes busy only with
# at least latency x pipes independent accumulators: `fma_chains`. A tile of 4 accumulators on
# two pipes issues at most half the peak (ShuffleNet's 14-wide grouped convs ran a 2 x 2 tile:
# 0.185 ms against ORT's 0.10). `choose_conv_tile` scales its score by accumulators / chains
# below that.
FMA_LATENCY = 4  # cycles; a target description default, as DRAM_BYTES_PER_CYCLE


def fma_chains(target) -> int:
    """Independent accumulators that keep the FMA pipes busy (Note [FMA chains])."""
    return fma_per_cycle(target) * FMA_LATENCY


def fma_per_cycle(target) -> int:
    """Vector FMAs a core issues per cycle: two pipes where the CPU has FMA (x86 FMA3, AArch64),
    one otherwise."""
    if target is None:
        return 1
    arm64 = target.llvm_triple.startswith(("aarch64", "arm64"))
    return 2 if "fma" in target.features or arm64 else 1


def memory_cost(target) -> float:
    """FMAs of one core per vector register read from DRAM (Note [machine balance])."""
    if target is None:
        return fma_per_cycle(None) * 16 / DEFAULT_DRAM_BYTES_PER_CYCLE
    return fma_per_cycle(target) * target.vector_width_bits / 8 / target.dram_bytes_per_cycle


def parallel_tasks(target) -> int:
    """Iterations a parallel loop needs to balance the target's threads: four per core, so
    the runtime's guided chunks even out a thread that starts late or runs slow."""
    return 4 * (target.num_cores if target is not None else 1)


def stack_share(target, share: int) -> int:
    """Bytes of the target's kernel thread stack (`Target.stack_bytes`, Note [described
    machine] in tessera/target.py; None: the current target's) that one buffer may take:
    1 / `share` of it."""
    target = target if target is not None else Target.current()
    stack = getattr(target, "stack_bytes", None) or DEFAULT_STACK_BYTES  # GPU kinds: none
    return stack // share
