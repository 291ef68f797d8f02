"""What `tessera.build(mod, target="c -device=micro -mcpu=...")` returns: a compiled model that
runs here (the host build of the very C sources a board gets) and exports as a source project.

    lib = tessera.build(mod, target="c -device=micro -mcpu=cortex-m4", params=params)
    lib.export_library("kws.tar")          # or a folder: C sources, one header, memory report
    lib.memory_report()                    # flash, RAM, per layer (code sizes with the toolchain)
    m = GraphModule(lib["default"](cpu(0)))  # the host build, as any compiled model

Exporting to a name ending in .so writes the host shared library instead, as for target "c".
"""

from __future__ import annotations

from pathlib import Path

from tessera.micro import boards, project, toolchain
from tessera.runtime.graph_executor import GraphExecutorFactory

_LIBRARY_SUFFIXES = (".so", ".dylib", ".dll")


class MicroModelFactory(GraphExecutorFactory):
    """A GraphExecutorFactory that also holds each kernel's micro C source and the target."""

    def __init__(self, lib, plan, weights, entry, *, kernels, target):
        super().__init__(lib, plan, weights, entry=entry)
        self.target = target
        self.kernel_sources = {k.name: k.source for k in kernels}
        self.kernel_infos = {k.name: k.info for k in kernels}

    @property
    def mcpu(self) -> str | None:
        return self.target.mcpu

    def c_sources(self) -> dict[str, str]:
        """The C files and the header of the project (no report: nothing is measured)."""
        return project.model_sources(self.plan, self.kernel_sources, self._blob)

    def sources(self) -> dict[str, str]:
        """{file name: text} of the exported project (see tessera/micro/project.py)."""
        files = self.c_sources()
        files[project.REPORT] = project.report_text(self.memory_report(files))
        return files

    def memory_report(self, files: dict | None = None) -> dict:
        """Flash and RAM in bytes, and per call (layer). With the Arm toolchain installed, code
        sizes and the deepest stack frame for this model's CPU are measured too."""
        files = files or self.c_sources()
        weights = len(project.repack_weights(self.plan, self._blob)[1])
        report = project.memory_report(self.plan, weights, self.kernel_infos)
        report["target"] = str(self.target)
        if not toolchain.available():
            report["code_bytes"] = None
            report["note"] = "code and stack sizes need arm-none-eabi-gcc (40-micro.sh)"
            return report
        measured = toolchain.measure(files, self.mcpu)
        objects, stack = measured["objects"], measured["stack"]
        code = sum(o["code"] for o in objects.values())
        report["code_bytes"] = code
        kernel_stack = {n: stack.get(n, 0) for n in self.kernel_sources}
        # the entry's frames plus the deepest kernel: calls are sequential, never nested
        entry_stack = sum(
            stack.get(f, 0) for f in ("tessera_model_run_static", "tessera_model_call")
        )
        report["ram_bytes"]["stack"] = entry_stack + max(kernel_stack.values(), default=0)
        report["flash_bytes"]["code"] = code
        for layer in report["layers"]:
            name = layer["kernel"]
            layer["code_bytes"] = objects.get(f"tessera_kernel_{name}", {}).get("code", 0)
            layer["stack_bytes"] = kernel_stack.get(name, 0)
        report["flash_bytes"]["total"] = code + weights
        report["ram_bytes"]["total"] = sum(
            report["ram_bytes"][k] for k in ("arena", "inputs_outputs", "stack")
        )
        return report

    def export_library(self, path, options=(), board: str | None = None) -> Path:
        """A folder or tarball (.tar, .tar.gz, .tgz) of C sources; a .so is the host build.
        With `board` (tessera.micro.BOARDS), also its startup code, linker script, a main that
        runs the model once and a Makefile: `make run` runs it under QEMU."""
        if str(path).endswith(_LIBRARY_SUFFIXES):
            return super().export_library(path, options)
        files = self.sources()
        if board is not None:
            target = boards.get_board(board)
            if self.mcpu is not None and self.mcpu != target.mcpu:
                raise ValueError(
                    f"the model is compiled for -mcpu={self.mcpu}, board {board} is a "
                    f"{target.mcpu}: build it for that CPU"
                )
            files = boards.board_project(files, target)
        return project.write_project(files, path)

    def __repr__(self) -> str:
        return (
            f"<tessera MicroModelFactory for {self.target}: {len(self.plan['calls'])} calls of "
            f"{self.num_kernels} kernels, arena {self.plan['arena_nbytes']} bytes>"
        )
