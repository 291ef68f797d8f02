"""The bare-metal Arm toolchain (Debian's gcc-arm-none-eabi + libnewlib-arm-none-eabi): where it
is, the flags of each Cortex-M CPU, and what a model's sources cost on the device.

    available()                          # True when arm-none-eabi-gcc is on PATH
    cpu_flags("cortex-m4")               # ["-mcpu=cortex-m4", "-mfloat-abi=hard", ...]
    measure(files, "cortex-m4")          # code bytes per file, stack bytes per function

scripts/setup.d/40-micro.sh installs the packages; nothing here installs anything.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

GCC = "arm-none-eabi-gcc"
SIZE = "arm-none-eabi-size"

# gcc's flags per CPU: the FPU and float ABI where the core has one (M4F/M7/M33/M55 boards)
CPU_FLAGS = {
    "cortex-m0": ["-mcpu=cortex-m0", "-mfloat-abi=soft"],
    "cortex-m0plus": ["-mcpu=cortex-m0plus", "-mfloat-abi=soft"],
    "cortex-m3": ["-mcpu=cortex-m3", "-mfloat-abi=soft"],
    "cortex-m4": ["-mcpu=cortex-m4", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"],
    "cortex-m7": ["-mcpu=cortex-m7", "-mfloat-abi=hard", "-mfpu=fpv5-d16"],
    "cortex-m33": ["-mcpu=cortex-m33", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"],
    "cortex-m55": ["-mcpu=cortex-m55", "-mfloat-abi=hard"],
}
# what the generated code is held to: C99, every warning an error
WARNING_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"]
OPT_FLAGS = ["-O2", "-ffunction-sections", "-fdata-sections"]


class ToolchainError(RuntimeError):
    """The Arm toolchain is missing, or it rejected a build (the message has its output)."""


def available() -> bool:
    return shutil.which(GCC) is not None


def require() -> None:
    if not available():
        raise ToolchainError(
            f"{GCC} was not found: install the bare-metal toolchain with "
            "scripts/setup.d/40-micro.sh (Debian: gcc-arm-none-eabi libnewlib-arm-none-eabi)"
        )


def cpu_flags(mcpu: str | None) -> list[str]:
    mcpu = mcpu or "cortex-m4"
    if mcpu not in CPU_FLAGS:
        raise ToolchainError(f"no Arm gcc flags for -mcpu={mcpu}; known: {', '.join(CPU_FLAGS)}")
    return ["-mthumb", *CPU_FLAGS[mcpu]]


def run(cmd: list[str], what: str, cwd=None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise ToolchainError(f"{what} failed:\n$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def compile_objects(folder: Path, sources: list[str], mcpu: str | None, extra=()) -> list[Path]:
    """Compile `sources` (names in `folder`) to objects there, with -Wall -Werror and the
    CPU's flags, and a stack-usage file (.su) beside each object."""
    require()
    objects = []
    for name in sources:
        obj = folder / (Path(name).stem + ".o")
        cmd = [GCC, *cpu_flags(mcpu), *OPT_FLAGS, *WARNING_FLAGS, "-fstack-usage", *extra]
        run([*cmd, "-c", name, "-o", obj.name], f"compiling {name} for {mcpu}", cwd=folder)
        objects.append(obj)
    return objects


def _sizes(objects: list[Path]) -> dict[str, dict[str, int]]:
    out = run([SIZE, "-A", *map(str, objects)], "arm-none-eabi-size")
    sizes, current = {}, None
    for line in out.splitlines():
        if line.endswith(":") and "section" not in line:
            current = Path(line.split()[0].rstrip(":")).stem
            sizes[current] = {"code": 0, "rodata": 0, "data": 0, "bss": 0}
            continue
        parts = line.split()
        if current is None or len(parts) < 2 or not parts[1].isdigit():
            continue
        section, size = parts[0], int(parts[1])
        kind = next((k for k, p in _SECTIONS if section == p or section.startswith(p + ".")), None)
        if kind:
            sizes[current][kind] += size
    return sizes


_SECTIONS = (("code", ".text"), ("rodata", ".rodata"), ("data", ".data"), ("bss", ".bss"))


def _stack_usage(folder: Path) -> dict[str, int]:
    usage = {}
    for su in folder.glob("*.su"):
        for line in su.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) >= 2 and parts[1].strip().isdigit():
                usage[parts[0].rsplit(":", 1)[-1]] = int(parts[1])
    return usage


def measure(files: dict[str, str], mcpu: str | None) -> dict:
    """Build the C files of a project for `mcpu`: {"objects": {stem: {code, rodata, data,
    bss}}, "stack": {function: bytes}}; raises ToolchainError when it does not build cleanly."""
    with tempfile.TemporaryDirectory(prefix="tessera-micro-size-") as tmp:
        folder = Path(tmp)
        for name, text in files.items():
            (folder / name).write_text(text)
        sources = sorted(n for n in files if n.endswith(".c"))
        objects = compile_objects(folder, sources, mcpu)
        return {"objects": _sizes(objects), "stack": _stack_usage(folder)}
