"""The exported sources built with this machine's C compiler and run here: what a board's
results are checked against, and the proof that the project is plain portable C.

    lib = HostBuild(lib.c_sources())       # cc -std=c99 -Wall -Wextra -Werror, one .so
    outputs = lib.run([x])                 # through tessera_model_run_static
    lib.invoke([x])                        # through the typed entry, tessera_model_invoke
    lib.close()                            # or `with HostBuild(...) as lib:`; or when collected

The files are compiled as they are exported (no flag of the host runtime, no tessera library):
a model that builds here and on the board computes the same thing on both, up to the
compilers' floating-point contraction (results of float models agree to rounding).
"""

from __future__ import annotations

import ctypes
import hashlib
import weakref
from pathlib import Path

import numpy as np

from tessera.micro import project
from tessera.runtime.module import Library
from tessera.runtime.ndarray import STORAGE

HOST_FLAGS = ["-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-fPIC"]


def _library(files: dict[str, str]) -> Path:
    from tessera.runtime import cc, config

    digest = hashlib.sha256("\0".join(cc.compiler_command() + HOST_FLAGS).encode())
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name].encode() + b"\0")
    folder = config.cache_dir() / "micro" / f"host-{digest.hexdigest()[:20]}"
    library = folder / "model.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    sources = [folder / n for n in project.c_files(files)]
    cc.compile_shared(library, sources=sources, flags=HOST_FLAGS)
    return library


class HostBuild:
    """A model's exported C sources compiled into a shared library here (module docstring).

    The library is open (dlopen) from construction until `close()`, the end of a `with` block,
    or the object's collection, whichever comes first (Note [library handles] in
    tessera/runtime/module.py: a test run that builds many models must not keep them all mapped).
    """

    def __init__(self, files: dict[str, str], plan: dict):
        self.plan = plan
        self.path = _library(files)
        # a Library of its own, closed by close() or when this object is collected: a function
        # pointer ctypes makes from a library references itself (a cycle that holds the library
        # until the cyclic collector runs), so its collection alone would close it late
        self._lib: Library | None = Library(str(self.path))
        self._finalizer = weakref.finalize(self, self._lib.close)
        self._finalizer.atexit = False  # at exit the process unmaps everything anyway

    def close(self) -> None:
        """Close the library (dlclose) now; run and invoke raise afterwards. Idempotent."""
        self._lib = None
        self._finalizer()  # calls Library.close once, and never again

    def __enter__(self) -> HostBuild:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _function(self, name: str):
        if self._lib is None:
            raise RuntimeError(f"HostBuild of {str(self.path)!r} is closed")
        fn = self._lib[name]
        fn.restype = ctypes.c_int32
        return fn

    def _buffers(self, inputs) -> tuple[list[np.ndarray], list[np.ndarray]]:
        ins = []
        for spec, x in zip(self.plan["inputs"], inputs, strict=True):
            storage = np.dtype(STORAGE[spec["dtype"]])
            ins.append(np.ascontiguousarray(x, dtype=storage).reshape(spec["shape"]))
        outs = [
            np.zeros(spec["shape"], np.dtype(STORAGE[spec["dtype"]]))
            for spec in self.plan["outputs"]
        ]
        return ins, outs

    def run(self, inputs) -> list[np.ndarray]:
        """Outputs for `inputs` (arrays in the plan's order) through tessera_model_run_static."""
        ins, outs = self._buffers(inputs)
        in_ptrs = (ctypes.c_void_p * max(1, len(ins)))(*[a.ctypes.data for a in ins])
        out_ptrs = (ctypes.c_void_p * max(1, len(outs)))(*[a.ctypes.data for a in outs])
        fn = self._function("tessera_model_run_static")
        code = fn(in_ptrs, out_ptrs)
        if code:
            raise RuntimeError(f"tessera_model_run_static failed in call {code - 1}")
        return outs

    def invoke(self, inputs) -> list[np.ndarray]:
        """The same through the typed entry tessera_model_invoke(inputs..., outputs...)."""
        ins, outs = self._buffers(inputs)
        fn = self._function("tessera_model_invoke")
        code = fn(*[ctypes.c_void_p(a.ctypes.data) for a in ins + outs])
        if code:
            raise RuntimeError(f"tessera_model_invoke failed in call {code - 1}")
        return outs
