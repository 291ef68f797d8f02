"""Cross-compilation for ARM Linux (and any architecture with a row in `toolchain.TOOLCHAINS`):
link a model built for another CPU with its cross toolchain, and run it here under QEMU.

    lib = tessera.build(mod, target="llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a76", params=p)
    lib.export_library("model.so")                      # aarch64-linux-gnu-gcc links it
    y, = tessera.cross.run_under_qemu("model.so", {"input": x})

docs/arm.md is the deploy story: build here, copy the one file, run it on the board.
"""

from tessera.cross.qemu import (
    count_instructions,
    count_kernel_instructions,
    read_metadata,
    read_plan,
    run_under_qemu,
    runner_args,
    runner_path,
)
from tessera.cross.runtime_wheel import build_runtime_wheel
from tessera.cross.toolchain import (
    TOOLCHAINS,
    CrossToolchain,
    ToolchainMissing,
    is_foreign,
    toolchain_for,
    toolchain_of_library,
)

__all__ = [
    "TOOLCHAINS",
    "build_runtime_wheel",
    "CrossToolchain",
    "ToolchainMissing",
    "count_instructions",
    "count_kernel_instructions",
    "is_foreign",
    "read_metadata",
    "read_plan",
    "run_under_qemu",
    "runner_args",
    "runner_path",
    "toolchain_for",
    "toolchain_of_library",
]
