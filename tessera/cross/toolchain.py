"""The cross toolchains: for each foreign CPU architecture, the GNU C compiler that links its
libraries, the C library QEMU reads, and the Debian packages that bring them.

    toolchain = toolchain_for(Target("llvm -mtriple=aarch64-linux-gnu"))  # None on an aarch64 host
    toolchain.compiler()   # ["aarch64-linux-gnu-gcc"], or a clear error naming the package

A target's architecture is the first word of its triple; one row per architecture family. The
row is data: a new architecture is a new row, not a branch.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from tessera.target import Target


class ToolchainMissing(RuntimeError):
    """A cross compiler or emulator that is not installed; the message says how to install it."""


@dataclass(frozen=True)
class CrossToolchain:
    """How code for one foreign architecture is linked here, and run here under QEMU."""

    name: str  # the GNU triple of the tools: aarch64-linux-gnu, arm-linux-gnueabihf
    arches: tuple[str, ...]  # the first words of the LLVM triples it serves
    packages: tuple[str, ...]  # Debian packages of the compiler and its C library
    qemu: str  # the QEMU user-mode emulator
    sysroot: str  # the target's C library, for QEMU's -L
    elf_machine: int  # e_machine in the ELF header of its libraries
    c_flags: tuple[str, ...] = ()  # for the runtime's C: the ABI the LLVM objects use

    def compiler(self) -> list[str]:
        """The cross C compiler's argv (with -pthread, for the runtime's thread pool);
        ToolchainMissing when it is not on PATH."""
        gcc = f"{self.name}-gcc"
        if shutil.which(gcc) is None:
            raise ToolchainMissing(
                f"cross-compiling for {self.name} needs {gcc}, which is not installed; install "
                f"it with: apt-get install {' '.join(self.packages)} "
                "(or run scripts/setup.sh, which does)"
            )
        return [gcc, *self.c_flags, "-pthread"]

    def emulator(self) -> str:
        """The QEMU binary; ToolchainMissing when it is not on PATH."""
        if shutil.which(self.qemu) is None:
            raise ToolchainMissing(
                f"running {self.name} code here needs {self.qemu}, which is not installed; "
                "install it with: apt-get install qemu-user (or run scripts/setup.sh)"
            )
        return self.qemu


TOOLCHAINS = (
    CrossToolchain(
        "aarch64-linux-gnu",
        arches=("aarch64", "arm64"),
        packages=("gcc-aarch64-linux-gnu", "libc6-dev-arm64-cross"),
        qemu="qemu-aarch64",
        sysroot="/usr/aarch64-linux-gnu",
        elf_machine=183,
    ),
    CrossToolchain(
        "arm-linux-gnueabihf",
        arches=("armv7a", "armv7", "armv7l", "arm", "thumbv7a", "thumbv7"),
        packages=("gcc-arm-linux-gnueabihf", "libc6-dev-armhf-cross"),
        qemu="qemu-arm",
        sysroot="/usr/arm-linux-gnueabihf",
        elf_machine=40,
        # the hard-float ABI of the LLVM objects (gnueabihf), and NEON for the runtime's C
        c_flags=("-march=armv7-a", "-mfpu=neon", "-mfloat-abi=hard"),
    ),
)


def architecture(target: Target) -> str:
    return target.llvm_triple.split("-", 1)[0]


def is_foreign(target: Target) -> bool:
    """Whether the target's code is for another architecture than this machine's."""
    return architecture(target) != architecture(Target("llvm"))


def toolchain_for(target: Target) -> CrossToolchain | None:
    """The cross toolchain of a foreign target; None when this machine's compiler serves.
    ValueError for a foreign architecture no row serves."""
    if not is_foreign(target):
        return None
    arch = architecture(target)
    for toolchain in TOOLCHAINS:
        if arch in toolchain.arches:
            return toolchain
    known = ", ".join(a for t in TOOLCHAINS for a in t.arches)
    raise ValueError(
        f"no cross toolchain for architecture {arch!r} (of target '{target}'); known: {known}"
    )


def toolchain_of_library(path) -> CrossToolchain:
    """The toolchain whose architecture an ELF shared library is built for (its header says)."""
    with open(path, "rb") as f:
        header = f.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        raise ValueError(f"{str(path)!r} is not an ELF library")
    machine = int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")
    for toolchain in TOOLCHAINS:
        if toolchain.elf_machine == machine:
            return toolchain
    raise ValueError(f"{str(path)!r} is for ELF machine {machine}, which no cross toolchain runs")
