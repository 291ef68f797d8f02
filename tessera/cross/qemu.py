"""Run a model library built for another architecture here, under QEMU user mode.

    outputs = run_under_qemu("model-aarch64.so", {"input": x})   # a list of numpy arrays

The library runs through the C runner (runner.c, cross-compiled once per toolchain into the cache
directory) that dlopens it and calls its native entry: no Python for the target is needed. The
executor plan comes from the library itself (`runner LIB --metadata`), so this needs nothing but
the file. The toolchain is read from the library's ELF header; `cpu` picks QEMU's CPU model
("max": every feature QEMU emulates, SVE included on aarch64).
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tessera.cross.toolchain import CrossToolchain, toolchain_of_library

RUNNER_SOURCE = Path(__file__).parent / "runner.c"


def runner_path(toolchain: CrossToolchain) -> Path:
    """The runner compiled for `toolchain`'s architecture (built into the cache on first use)."""
    from tessera.runtime import cc, config

    compiler = toolchain.compiler()
    digest = hashlib.sha256(RUNNER_SOURCE.read_bytes())
    digest.update(" ".join(compiler).encode())
    path = config.cache_dir() / "cross" / f"runner-{toolchain.name}-{digest.hexdigest()[:16]}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        cc.run_compiler([*compiler, "-O2", "-o", str(tmp), str(RUNNER_SOURCE), "-ldl"])
        tmp.replace(path)
    return path


def _run(toolchain: CrossToolchain, args: list[str], cpu: str) -> str:
    cmd = [toolchain.emulator(), "-L", toolchain.sysroot, "-cpu", cpu]
    cmd += [str(runner_path(toolchain)), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"the model failed under {toolchain.qemu} (exit {proc.returncode}): "
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout


def read_plan(lib_path, cpu: str = "max") -> dict:
    """The executor plan stored in a cross-built model library (read by the runner under QEMU)."""
    from tessera.runtime import function_info
    from tessera.runtime.graph_executor import PLAN_KEY

    toolchain = toolchain_of_library(lib_path)
    _, extra = function_info.loads(_run(toolchain, [str(lib_path), "--metadata"], cpu))
    if PLAN_KEY not in extra:
        raise ValueError(f"{str(lib_path)!r} holds kernels, not a compiled model")
    return extra[PLAN_KEY]


def run_under_qemu(lib_path, inputs, *, cpu: str = "max", num_threads: int = 1) -> list:
    """Run the compiled model in `lib_path` once on `inputs` (a dict by input name, or a list in
    the model's order) under QEMU; its outputs as numpy arrays."""
    from tessera.runtime.graph_executor import nbytes_of
    from tessera.runtime.ndarray import STORAGE

    toolchain = toolchain_of_library(lib_path)
    plan = read_plan(lib_path, cpu)
    specs = plan["inputs"]
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - {s["name"] for s in specs})
        missing = [s["name"] for s in specs if s["name"] not in inputs]
        if unknown or missing:
            raise ValueError(f"run_under_qemu: inputs missing {missing}, unknown {unknown}")
        inputs = [inputs[s["name"]] for s in specs]
    if len(inputs) != len(specs):
        raise ValueError(f"run_under_qemu: the model takes {len(specs)} inputs, got {len(inputs)}")
    offsets = [int(p["offset"]) for p in plan["params"]]
    with tempfile.TemporaryDirectory(prefix="tessera-qemu-") as tmp:
        args = [str(lib_path), "--arena", str(int(plan["arena_nbytes"]))]
        args += ["--threads", str(num_threads)]
        for k, (spec, value) in enumerate(zip(specs, inputs, strict=True)):
            array = np.ascontiguousarray(value, dtype=STORAGE[spec["dtype"]])
            if array.shape != tuple(spec["shape"]):
                raise ValueError(
                    f"run_under_qemu: input {spec['name']!r} has shape {array.shape}, the model "
                    f"takes {tuple(spec['shape'])}"
                )
            array.tofile(Path(tmp) / f"in{k}.bin")
            args += ["--input", str(Path(tmp) / f"in{k}.bin")]
        for k, out in enumerate(plan["outputs"]):
            nbytes = nbytes_of(out["dtype"], out["shape"])
            own = tuple(out["storage"]) == ("output", k)
            args += ["--output", str(nbytes if own else 0)]
        for k, out in enumerate(plan["outputs"]):
            kind, index = out["storage"]
            index = offsets[index] if kind == "param" else index
            nbytes = nbytes_of(out["dtype"], out["shape"])
            args += ["--save", f"{kind}:{index}:{nbytes}:{Path(tmp) / f'out{k}.bin'}"]
        _run(toolchain, args, cpu)
        results = []
        for k, out in enumerate(plan["outputs"]):
            data = np.fromfile(Path(tmp) / f"out{k}.bin", dtype=STORAGE[out["dtype"]])
            results.append(data.reshape(tuple(out["shape"])))
        return results
