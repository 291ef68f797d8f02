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
PLUGIN_SOURCE = Path(__file__).parent / "insn_count.c"


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


def plugin_path() -> Path:
    """The instruction-counting QEMU plugin (insn_count.c), built for this machine on first use."""
    from tessera.runtime import cc, config

    digest = hashlib.sha256(PLUGIN_SOURCE.read_bytes())
    digest.update(" ".join(cc.compiler_command()).encode())
    path = config.cache_dir() / "cross" / f"insn_count-{digest.hexdigest()[:16]}.so"
    if not path.exists():
        cc.compile_shared(path, sources=[PLUGIN_SOURCE], libs=())
    return path


def _run(toolchain: CrossToolchain, args: list[str], cpu: str, count: bool = False) -> str:
    cmd = [toolchain.emulator(), "-L", toolchain.sysroot, "-cpu", cpu]
    if count:  # the plugin's "insns N" goes to stderr (-d plugin)
        cmd += ["-plugin", str(plugin_path()), "-d", "plugin"]
    cmd += [str(runner_path(toolchain)), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"the model failed under {toolchain.qemu} (exit {proc.returncode}): "
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stderr if count else proc.stdout


def read_metadata(lib_path, cpu: str = "max") -> tuple[list, dict]:
    """(the FunctionInfo of each kernel, the rest of the metadata) of a cross-built library."""
    from tessera.runtime import function_info

    toolchain = toolchain_of_library(lib_path)
    return function_info.loads(_run(toolchain, [str(lib_path), "--metadata"], cpu))


def read_plan(lib_path, cpu: str = "max") -> dict:
    """The executor plan stored in a cross-built model library (read by the runner under QEMU)."""
    from tessera.runtime.graph_executor import PLAN_KEY

    _, extra = read_metadata(lib_path, cpu)
    if PLAN_KEY not in extra:
        raise ValueError(f"{str(lib_path)!r} holds kernels, not a compiled model")
    return extra[PLAN_KEY]


def runner_args(lib_path, plan: dict, input_paths, output_paths, num_threads: int = 1) -> list:
    """The runner's command line (after the runner itself) that runs the model of `plan` in
    `lib_path` on the raw little-endian input files and writes each output to its file: what
    run_under_qemu runs, and what to type on the board (docs/arm.md)."""
    from tessera.runtime.graph_executor import nbytes_of

    offsets = [int(p["offset"]) for p in plan["params"]]
    args = [str(lib_path), "--arena", str(int(plan["arena_nbytes"])), "--threads", str(num_threads)]
    for path in input_paths:
        args += ["--input", str(path)]
    for k, out in enumerate(plan["outputs"]):
        own = tuple(out["storage"]) == ("output", k)  # else an input, a weight or a repeat
        args += ["--output", str(nbytes_of(out["dtype"], out["shape"]) if own else 0)]
    for out, path in zip(plan["outputs"], output_paths, strict=True):
        kind, index = out["storage"]
        index = offsets[index] if kind == "param" else index
        args += ["--save", f"{kind}:{index}:{nbytes_of(out['dtype'], out['shape'])}:{path}"]
    return args


def _input_arrays(plan: dict, inputs) -> list[np.ndarray]:
    """`inputs` (a dict by name, or a list in the model's order) checked against the plan."""
    from tessera.runtime.ndarray import STORAGE

    specs = plan["inputs"]
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - {s["name"] for s in specs})
        missing = [s["name"] for s in specs if s["name"] not in inputs]
        if unknown or missing:
            raise ValueError(f"run_under_qemu: inputs missing {missing}, unknown {unknown}")
        inputs = [inputs[s["name"]] for s in specs]
    if len(inputs) != len(specs):
        raise ValueError(f"run_under_qemu: the model takes {len(specs)} inputs, got {len(inputs)}")
    arrays = []
    for spec, value in zip(specs, inputs, strict=True):
        array = np.ascontiguousarray(value, dtype=STORAGE[spec["dtype"]])
        if array.shape != tuple(spec["shape"]):
            raise ValueError(
                f"run_under_qemu: input {spec['name']!r} has shape {array.shape}, the model "
                f"takes {tuple(spec['shape'])}"
            )
        arrays.append(array)
    return arrays


def run_under_qemu(lib_path, inputs, *, cpu: str = "max", num_threads: int = 1) -> list:
    """Run the compiled model in `lib_path` once on `inputs` (a dict by input name, or a list in
    the model's order) under QEMU; its outputs as numpy arrays."""
    from tessera.runtime.ndarray import STORAGE

    lib_path = Path(lib_path).resolve()
    toolchain = toolchain_of_library(lib_path)
    plan = read_plan(lib_path, cpu)
    arrays = _input_arrays(plan, inputs)
    with tempfile.TemporaryDirectory(prefix="tessera-qemu-") as tmp:
        input_paths = [Path(tmp) / f"in{k}.bin" for k in range(len(arrays))]
        output_paths = [Path(tmp) / f"out{k}.bin" for k in range(len(plan["outputs"]))]
        for array, path in zip(arrays, input_paths, strict=True):
            array.tofile(path)
        _run(toolchain, runner_args(lib_path, plan, input_paths, output_paths, num_threads), cpu)
        results = []
        for out, path in zip(plan["outputs"], output_paths, strict=True):
            data = np.fromfile(path, dtype=STORAGE[out["dtype"]])
            results.append(data.reshape(tuple(out["shape"])))
        return results


def count_instructions(lib_path, inputs, *, cpu: str = "max") -> int:
    """The guest instructions one run of the model in `lib_path` executes under QEMU (one
    thread; a TCG plugin counts them): two runs minus one, so loading, reading the inputs and
    writing the outputs are not counted. Exact and repeatable, unlike a wall-clock time."""
    lib_path = Path(lib_path).resolve()
    toolchain = toolchain_of_library(lib_path)
    plan = read_plan(lib_path, cpu)
    arrays = _input_arrays(plan, inputs)
    counts = []
    with tempfile.TemporaryDirectory(prefix="tessera-qemu-") as tmp:
        input_paths = [Path(tmp) / f"in{k}.bin" for k in range(len(arrays))]
        for array, path in zip(arrays, input_paths, strict=True):
            array.tofile(path)
        output_paths = [Path(tmp) / f"out{k}.bin" for k in range(len(plan["outputs"]))]
        args = runner_args(lib_path, plan, input_paths, output_paths, num_threads=1)
        for runs in (1, 2):
            log = _run(toolchain, [*args, "--runs", str(runs)], cpu, count=True)
            counts.append(int(log.rsplit("insns", 1)[1].split()[0]))
    return counts[1] - counts[0]


def count_kernel_instructions(lib_path, name: str | None = None, *, cpu: str = "max") -> int:
    """The guest instructions one call of one kernel of `lib_path` executes under QEMU (two
    calls minus one, one thread), on zero-filled buffers of the shapes its FunctionInfo gives:
    one kernel of a model alone (no layout transforms, no executor), or a kernel built with
    `tessera.build(schedule, ...)`. `name`: the kernel (None: the library's only one).
    Instruction counts of these kernels do not depend on the data (no data-dependent branches)."""
    from tessera.runtime.graph_executor import nbytes_of

    lib_path = Path(lib_path).resolve()
    toolchain = toolchain_of_library(lib_path)
    infos = {info.name: info for info in read_metadata(lib_path, cpu)[0]}
    if name is None and len(infos) != 1:
        raise ValueError(f"{str(lib_path)!r} holds kernels {sorted(infos)}: name one")
    info = infos.get(name) if name is not None else next(iter(infos.values()))
    if info is None:
        raise ValueError(f"{str(lib_path)!r} has no kernel {name!r}; it has {sorted(infos)}")
    args = [str(lib_path), "--kernel", info.name]
    for p in info.params:
        if p.kind != "buffer" or not all(isinstance(d, int) for d in p.shape):
            raise ValueError(
                f"count_kernel_instructions: {info.name} takes {p.name} of shape {p.shape} "
                "(kernels with scalar parameters or symbolic shapes are not supported)"
            )
        args += ["--buffer", str(nbytes_of(p.dtype, p.shape))]
    counts = []
    for runs in (1, 2):
        log = _run(toolchain, [*args, "--threads", "1", "--runs", str(runs)], cpu, count=True)
        counts.append(int(log.rsplit("insns", 1)[1].split()[0]))
    return counts[1] - counts[0]
