"""What schedule rules ask of a CPU besides `Target.features`: vector registers and cache sizes.

    vector_registers(Target("llvm -mcpu=haswell"))   # 16 (32 with AVX-512 and on AArch64)
    cache_sizes()                                    # {1: 49152, 2: 1048576, 3: ...} from sysfs

Cache sizes come from sysfs for the host, defaults elsewhere (cross targets, no sysfs). Rules
over these numbers, never tables of shapes, choose the block sizes of the x86 kernels.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

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
    """Architectural vector registers: 32 with AVX-512 and on AArch64, else 16."""
    if target is None:
        return 16
    if "avx512f" in target.features or target.llvm_triple.startswith(("aarch64", "arm64")):
        return 32
    return 16
