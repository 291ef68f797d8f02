"""tessera on microcontrollers: bare-metal Cortex-M, no OS, no heap (docs/micro.md).

    lib = tessera.build(mod, target="c -device=micro -mcpu=cortex-m4", params=params)
    lib.export_library("kws/")                      # C sources + header + memory report
    lib.export_library("kws/", board="mps2-an386")  # + startup, linker script, Makefile
    with tessera.micro.Session(lib, board="mps2-an386") as s:   # QEMU, driven from here
        s.set_input(0, x); counts = s.run(); y = s.get_output(0)

`model` (the compiled model and its export), `project` (the sources), `toolchain` (the Arm
compiler), `boards` (emulated boards and their firmware), `session` (the host-driven session),
`host` (the exported sources built and run on this machine), `mlperf_tiny` (benchmark models,
and their int8 forms), `tune` (knobs measured by instructions on the emulated board).
"""

from tessera.micro.boards import BOARDS, Board
from tessera.micro.session import MicroError, Session

__all__ = ["BOARDS", "Board", "MicroError", "Session"]
