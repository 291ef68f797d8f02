"""`tessera compile` (a model -> one artifact .so, with a progress bar and a summary) and
`tessera run` (an artifact on given or random inputs, optionally with a per-kernel profile).

    tessera compile model.onnx -o model.so --input-shape data:1x3x224x224
    tessera run model.so --inputs in.npz --outputs out.npz --profile
"""

from __future__ import annotations

import json
import os
import sys
import time

import click
import numpy as np

from tessera.cli.common import (
    DEFAULT_OPT_LEVEL,
    ModelError,
    human_bytes,
    import_model,
    op_histogram,
    parse_input_shapes,
    read_model,
    stderr_console,
    stdout_console,
)
from tessera.cli.options import (
    TargetType,
    input_shape_option,
    opt_level_option,
    quiet,
    run_threads_option,
    verbosity_options,
)
from tessera.logging import get_logger
from tessera.micro.boards import BOARDS
from tessera.target import MICRO_TRIPLES

log = get_logger(__name__)


class _Progress:
    """A PassContext instrument: keeps the fused graph, dumps IR, and ticks a progress bar once
    per kernel (the last tir pass of each kernel is `remove_no_op`)."""

    def __init__(self, bar=None, dump_dir=None):
        self.bar, self.task, self.dump_dir = bar, None, dump_dir
        self.fused, self.kernels_done, self.step = None, 0, 0

    def enter_pass_ctx(self):
        pass

    def exit_pass_ctx(self):
        pass

    def run_before_pass(self, name, ir):
        pass

    def run_after_pass(self, name, ir, seconds):
        self.step += 1
        if name == "fuse_ops":
            self.fused = ir["main"] if hasattr(ir, "functions") else ir
            if self.bar is not None:
                self.task = self.bar.add_task("compiling kernels", total=_distinct_kernels(ir))
        if name == "remove_no_op":
            self.kernels_done += 1
            if self.bar is not None and self.task is not None:
                self.bar.advance(self.task)
        if self.dump_dir and (self.kernels_done == 0 or name == "remove_no_op"):
            stem = name if self.kernels_done == 0 else f"kernel{self.kernels_done:03d}"
            path = os.path.join(self.dump_dir, f"{self.step:03d}_{stem}.txt")
            with open(path, "w") as f:
                f.write(str(ir) + "\n")


def _distinct_kernels(ir) -> int:
    from tessera.graph_build import group_key

    func = ir["main"] if hasattr(ir, "functions") else ir
    groups = [c.attrs["func"] for c in func.body if c.op.name == "fused"]
    return len({group_key(g) for g in groups}) or len(func.body)


def _build(mod, params, target, opt_level, instrument, db=None, precision="fp32", pretuned=True):
    import tessera
    from tessera.transform import PassContext

    try:
        config = {"tuning.database": db} if db else {}  # tuned configs: `tessera tune`
        if not pretuned:  # the configs shipped for this machine kind: docs/tuning.md
            config["tuning.pretuned"] = False
        if precision != "fp32":  # bf16 dense/matmul layers: docs/quantization.md
            config["precision"] = precision
        with PassContext(opt_level=opt_level, instruments=[instrument], config=config):
            return tessera.build(mod, target=target, params=params)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ModelError(f"compiling the model failed: {e}") from e


pretuned_option = click.option(
    "--no-pretuned",
    is_flag=True,
    help="Leave out the configs shipped pre-tuned for this machine kind (docs/tuning.md).",
)


def compile_model(
    model_path,
    output,
    target,
    input_shape,
    opt_level,
    dump_ir,
    db=None,
    key=None,
    quantize=None,
    calibrate=None,
    board=None,
    precision="fp32",
    pretuned=True,
    target_sqnr=None,
    budget_mode="float",
):
    """Compile; returns (lib, summary rows). Shared by `compile` and `bench`. `db`: tuning
    records (`tessera tune`); `pretuned`: False leaves out the configs shipped for this machine
    kind; `key`: sign the artifact written to `output` with it;
    `quantize`/`calibrate`/`target_sqnr`/`budget_mode`: post-training quantization; `board`: a micro
    model's sources are exported as a project for that board (docs/micro.md)."""
    onnx_model, label = read_model(model_path)
    start = time.perf_counter()
    mod, params = import_model(onnx_model, parse_input_shapes(input_shape))
    if quantize:  # int8 (tessera.quantize, calibrated on the .npz): docs/quantization.md
        from tessera.quantize.cli import quantize_for_cli

        mod, params = quantize_for_cli(mod, params, quantize, calibrate, target, target_sqnr,
                                       budget_mode)  # fmt: skip
    if dump_ir:
        os.makedirs(dump_ir, exist_ok=True)
    show_bar = sys.stderr.isatty() and not quiet()
    if show_bar:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        columns = ("{task.description}", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=stderr_console(), transient=True) as bar:
            inst = _Progress(bar, dump_ir)
            lib = _build(mod, params, target, opt_level, inst, db, precision, pretuned)
    else:
        inst = _Progress(None, dump_ir)
        lib = _build(mod, params, target, opt_level, inst, db, precision, pretuned)
    seconds = time.perf_counter() - start
    plan = lib.plan
    n_ops = sum(op_histogram(mod["main"]).values())
    summary = [
        ("model", label),
        ("target", str(target)),
        ("ops", f"{n_ops} graph ops from {len(onnx_model.graph.node)} ONNX nodes"),
        ("fused kernels", f"{len(plan['calls'])} calls of {lib.num_kernels} distinct kernels"),
        ("weights", f"{human_bytes(plan['params_nbytes'])} in {len(plan['params'])} tensors"),
        ("arena", human_bytes(plan["arena_nbytes"])),
        ("compile time", f"{seconds:.2f} s"),
        ("cache hits", _cache_hits()),
    ]
    if output:
        if board:
            lib.export_library(output, board=board)
        else:
            lib.export_library(output, key=key)
        if os.path.isdir(output):  # a micro model's source project (docs/micro.md)
            with open(os.path.join(output, "memory_report.json")) as f:
                report = json.load(f)
            summary.append(("sources", f"{output}/ ({len(os.listdir(output))} files)"))
            summary.append(("micro memory", _micro_memory(report)))
        else:
            summary.append(("artifact", f"{output} ({human_bytes(os.path.getsize(output))})"))
    log.info("compiled %s in %.2f s", label, seconds)
    return lib, onnx_model, summary


def _micro_memory(report: dict) -> str:
    flash, ram = report["flash_bytes"], report["ram_bytes"]
    code = f" + code {human_bytes(flash['code'])}" if "code" in flash else ""
    weights, arena = human_bytes(flash["weights"]), human_bytes(ram["arena"])
    return f"flash: weights {weights}{code}; RAM: arena {arena}"


def _cache_hits() -> str:
    from tessera.codegen import cache_stats

    stats = cache_stats()
    return f"{stats['hits']} of {stats['hits'] + stats['misses']}"


def print_summary(rows, title="compiled") -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    for k, v in rows:
        table.add_row(k, v)
    stdout_console().print(table)


@click.command()
@click.argument("model", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", type=click.Path(), help="Artifact to write (.so; micro: a folder or .tar)."
)
@click.option(
    "--target",
    type=TargetType(allow_micro=True),
    default="llvm",
    show_default=True,
    help='What to compile for: "llvm", "c", a full target string (docs/arm.md), or "micro" '
    "(C sources for a bare-metal microcontroller, docs/micro.md).",
)
@click.option(
    "--mcpu",
    type=click.Choice(sorted(MICRO_TRIPLES)),
    default="cortex-m4",
    show_default=True,
    help="The microcontroller's CPU (--target micro).",
)
@click.option(
    "--board",
    type=click.Choice(sorted(BOARDS)),
    help="--target micro: a project for this emulated board (its CPU; `make run`).",
)
@input_shape_option
@opt_level_option(DEFAULT_OPT_LEVEL)
@click.option(
    "--dump-ir", type=click.Path(file_okay=False), help="Write the IR after every pass to DIR."
)
@click.option(
    "--sign",
    "key_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Sign the artifact with the key in this file (HMAC-SHA256); `run --key` checks it.",
)
@click.option("--quantize", type=click.Choice(["int8"]), help="Post-training quantization.")
@click.option(
    "--calibrate",
    type=click.Path(exists=True, dir_okay=False),
    help="Calibration data for --quantize: .npz, one array per input, samples stacked.",
)
@click.option(
    "--target-sqnr",
    type=float,
    help="--quantize: keep float the layers that cost the output most until its SQNR vs fp32 "
    "reaches this many dB (0: none, QConfig's default; docs/quantization.md, layer "
    "sensitivity).",
)
@click.option(
    "--budget-mode",
    type=click.Choice(["float", "a16"]),
    default="float",
    show_default=True,
    help="--quantize: how the --target-sqnr budget buys accuracy. float: the costliest layers "
    "run float; a16: every layer stays on the int8 kernels, the costliest in 2 or 3 passes "
    "(16-bit activations and/or weights split in two: levels a16, w16, a16w16), chosen by "
    "noise removed per added pass (docs/quantization.md).",
)
@click.option(
    "--precision",
    type=click.Choice(["fp32", "bf16"]),
    default="fp32",
    help="bf16: dense/matmul layers on bfloat16 products (AVX512_BF16), float32 sums.",
)
@click.option(
    "--db", type=click.Path(exists=True, dir_okay=False), help="Tuning records (tessera tune)."
)
@pretuned_option
@verbosity_options
def compile_cmd(
    model,
    output,
    target,
    mcpu,
    board,
    input_shape,
    opt_level,
    dump_ir,
    key_file,
    quantize,
    calibrate,
    target_sqnr,
    budget_mode,
    precision,
    db,
    no_pretuned,
):
    """Compile MODEL (an ONNX file; default: the built-in ResNet-50) into one artifact.

    The artifact holds the kernels, the executor plan and the weights; `tessera run` and
    `tessera.runtime.load_module` load it. With --target micro it is a folder (or a .tar) of
    C sources for a microcontroller: kernels, entry, weights, static arena, memory report.
    """
    stem = os.path.splitext(os.path.basename(model))[0] if model else "resnet50"
    if board and target != "micro":
        raise click.UsageError("--board needs --target micro")
    if target == "micro":
        mcpu = BOARDS[board].mcpu if board else mcpu
        target = f"c -device=micro -mcpu={mcpu}"
        output = output or f"{stem}_micro"
    if output is None:
        output = f"{stem}.so"
    key = _read_key(key_file)
    _, _, summary = compile_model(
        model,
        output,
        target,
        input_shape,
        opt_level,
        dump_ir,
        db=db,
        key=key,
        quantize=quantize,
        calibrate=calibrate,
        board=board,
        precision=precision,
        target_sqnr=target_sqnr,
        budget_mode=budget_mode,
        pretuned=not no_pretuned,
    )
    if not quiet():
        print_summary(summary)
    else:
        click.echo(output)


# ---------------------------------------------------------------- run


def _read_key(path) -> bytes | None:
    """The signing key in the file at `path` (its bytes, a final newline dropped), or None."""
    if path is None:
        return None
    with open(path, "rb") as f:
        key = f.read().rstrip(b"\r\n")
    if not key:
        raise ModelError(f"the key file {path} is empty")
    return key


def load_factory(path, key=None):
    """The factory of a compiled artifact (a CPU GraphExecutorFactory or a GPUGraphFactory),
    with clear errors; with `key`, it must be signed with it."""
    from tessera.runtime import load_module
    from tessera.runtime.gpu_graph import GPUGraphFactory

    try:
        lib = load_module(path, key=key)
        return lib if isinstance(lib, GPUGraphFactory) else _factory_of(lib)
    except (ValueError, TypeError, OSError, KeyError) as e:
        raise ModelError(f"cannot load {path} as a tessera artifact: {e}") from e


def load_artifact(path, key=None):
    """(factory, module) of a compiled artifact: a GraphModule on the CPU, or the GPU model on
    device 0 of its kind (an error naming what is missing where there is none)."""
    from tessera.runtime import GraphModule, cpu
    from tessera.runtime.gpu_graph import GPUGraphFactory

    factory = load_factory(path, key)
    if not isinstance(factory, GPUGraphFactory):
        return factory, GraphModule(factory["default"](cpu(0)))
    try:
        return factory, factory.create()
    except NotImplementedError as e:  # CUDAUnavailable / OpenCLUnavailable
        raise ModelError(f"cannot run {path} here: {e}") from e


def _factory_of(lib):
    from tessera.runtime.graph_executor import GraphExecutorFactory

    if isinstance(lib, GraphExecutorFactory):
        return lib
    if "graph_executor" not in getattr(lib, "metadata", {}):
        raise ValueError("it holds kernels but no model (no executor plan)")
    return GraphExecutorFactory.from_library(lib)


def read_inputs(path, module) -> dict[str, np.ndarray]:
    """Inputs from an .npz (by name; `arr_0`... by position), else random ones."""
    from tessera.models import random_array

    shapes, dtypes = module.get_input_info()
    if path is None:
        for n, shape in shapes.items():  # symbolic dims (docs/dynamic.md): no size to make up
            if not all(isinstance(d, int) for d in shape):
                raise ModelError(f"input {n!r} has symbolic dims {shape}: give --inputs")
        rng = np.random.default_rng(0)
        return {n: random_array(shapes[n], dtypes[n], rng) for n in shapes}
    try:
        archive = np.load(path)  # an .npy gives an array, not an archive
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise ModelError(f"{path} is not an .npz archive (write one with numpy.savez)")
        with archive:  # close the file
            data = dict(archive)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read inputs from {path}: {e}") from e
    names = list(shapes)
    feeds = {}
    for k, (key, array) in enumerate(data.items()):
        name = key if key in shapes else (names[k] if key == f"arr_{k}" and k < len(names) else key)
        if name not in shapes:
            raise ModelError(f"{path}: {key!r} is not an input of the model (inputs: {names})")
        feeds[name] = array
    missing = [n for n in names if n not in feeds]
    if missing:
        raise ModelError(f"{path} has no array for input {missing[0]!r} (inputs: {names})")
    return feeds


def set_inputs(module, feeds) -> None:
    try:
        module.set_input(**feeds)
    except (ValueError, TypeError) as e:
        raise ModelError(str(e)) from e


@click.command()
@click.argument("artifact", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--inputs",
    "inputs_path",
    type=click.Path(exists=True, dir_okay=False),
    help="An .npz of the inputs by name (numpy.savez). Default: random inputs.",
)
@click.option(
    "--outputs",
    "outputs_path",
    type=click.Path(dir_okay=False),
    help="Write the outputs by name to this .npz.",
)
@click.option("--profile", is_flag=True, help="Time every kernel call (table by node names).")
@click.option("--profile-json", type=click.Path(dir_okay=False), help="Write the profile as JSON.")
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Runs of the model that --profile averages over.",
)
@run_threads_option
@click.option(
    "--key",
    "key_file",
    type=click.Path(exists=True, dir_okay=False),
    help="Refuse ARTIFACT unless it is signed with the key in this file (compile --sign).",
)
@verbosity_options
def run(artifact, inputs_path, outputs_path, profile, profile_json, repeat, threads, key_file):
    """Run a compiled ARTIFACT on --inputs (an .npz by input name) or on random inputs."""
    from tessera.cli.profile import print_profile, profile_kernels, write_profile
    from tessera.runtime import GraphModule

    _set_threads(threads)
    factory, module = load_artifact(artifact, _read_key(key_file))
    if (profile or profile_json) and not isinstance(module, GraphModule):
        raise ModelError(f"--profile times CPU kernel calls; {artifact} runs on {module.device}")
    set_inputs(module, read_inputs(inputs_path, module))
    start = time.perf_counter()
    module.run()
    first = time.perf_counter() - start
    outputs = {}
    for k, spec in enumerate(factory.plan["outputs"]):
        outputs[spec["name"]] = module.get_output(k).numpy().copy()
    if outputs_path:
        np.savez(outputs_path, **outputs)
    if not quiet():
        _print_outputs(outputs, first)
    if profile or profile_json:
        rows = profile_kernels(module, repeat)
        if profile:
            print_profile(rows)
        if profile_json:
            write_profile(profile_json, rows, artifact)


def _print_outputs(outputs, seconds):
    from rich.table import Table

    table = Table(title=f"outputs (one run: {seconds * 1e3:.2f} ms)", title_justify="left")
    for col in ("name", "shape", "dtype", "min", "max", "mean"):
        table.add_column(col)
    for name, a in outputs.items():
        stats = (a.min(), a.max(), a.mean()) if a.size and a.dtype.kind in "fiu" else ("",) * 3
        shown = [f"{s:.4g}" if s != "" else "" for s in stats]
        table.add_row(name, "x".join(map(str, a.shape)) or "scalar", str(a.dtype), *shown)
    stdout_console().print(table)


def _set_threads(threads) -> None:
    if threads:
        from tessera.runtime import set_num_threads

        set_num_threads(threads)
