"""Run the system C compiler to make shared libraries (the runtime library, exported modules).

    compile_shared("out.so", sources=["a.c"], objects=["k.o"])

The library is written to a temporary file next to `output` and renamed into place, so a
process that races us (or reads the file meanwhile) never sees a half-written library.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from tessera.runtime import config

SHARED_FLAGS = ("-shared", "-fPIC", "-O2")


def compiler_command() -> list[str]:
    """The compiler as an argv prefix (CC may be e.g. 'ccache gcc')."""
    return shlex.split(config.c_compiler())


def compile_shared(output, sources=(), objects=(), flags=(), libs=("-lm",), compiler=None) -> Path:
    """Compile C `sources` and link `objects` into the shared library `output` (with `compiler`,
    an argv prefix, when given: a cross compiler; else this machine's)."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.name}.", suffix=".tmp", dir=output.parent)
    os.close(fd)
    extra = ["-undefined", "dynamic_lookup"] if sys.platform == "darwin" else []
    cmd = [*(compiler or compiler_command()), *SHARED_FLAGS, *flags, *extra, "-o", tmp]
    cmd += [str(s) for s in sources] + [str(o) for o in objects] + list(libs)
    try:
        run_compiler(cmd)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return output


def run_compiler(cmd: list[str]) -> None:
    """Run a compiler command; a missing compiler or a failed build raises RuntimeError."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise RuntimeError(
            f"no C compiler found: {cmd[0]!r} is not on PATH "
            "(install gcc or clang, or set the CC environment variable)"
        ) from None
    if proc.returncode != 0:
        raise RuntimeError(
            f"C compiler failed (exit {proc.returncode}): {shlex.join(cmd)}\n{proc.stderr.strip()}"
        )
