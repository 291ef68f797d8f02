"""What the `tessera` commands share: reading a model (a file or the built-in example), parsing
`--input-shape`, the graph pipeline that `show` and `compile` display, consoles, and the error
a command raises for a model or compile problem (exit code 1, one paragraph, no traceback).

    model, label = read_model("resnet.onnx")          # or read_model(None): the built-in example
    shapes = parse_input_shapes(["data:1x3x224x224"])  # {"data": (1, 3, 224, 224)}
    stages = graph_stages(mod, params, opt_level=3)    # [Stage("from_onnx", func, 0.3), ...]
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import click

DEFAULT_OPT_LEVEL = 3


class ModelError(click.ClickException):
    """A problem with the model, the artifact or the inputs: exit code 1, the message alone."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def stdout_console():
    """Tables and results. Away from a terminal: no colours, and wide enough for long names."""
    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


# ---------------------------------------------------------------- models


def is_artifact(path: str) -> bool:
    """A compiled artifact (a shared library, or a GPU module's zip) rather than an ONNX file:
    by its ELF magic or its tessera trailer (runtime/artifact.py)."""
    from tessera.runtime.artifact import ArtifactError, read_header

    with open(path, "rb") as f:
        if f.read(4) == b"\x7fELF":
            return True
    try:
        read_header(path)
    except ArtifactError:
        return False
    return True


def read_model(path: str | None):
    """(onnx.ModelProto, a label for messages). None: the built-in example (ResNet-50)."""
    import onnx

    if path is None:
        from tessera.models import example_model

        model = example_model()
        return model, f"built-in example: {model.graph.name}"
    if is_artifact(path):
        raise ModelError(f"{path} is a compiled artifact, not an ONNX model")
    try:
        model = onnx.load(path)
    except Exception as e:  # DecodeError, OSError, ...: all mean "not a model we can read"
        raise ModelError(f"{path} is not an ONNX model: cannot parse it ({e})") from None
    # A protobuf parser accepts some garbage as an empty message: insist on a graph.
    if not model.HasField("graph") or not model.graph.output:
        raise ModelError(f"{path} is not an ONNX model: it has no graph with outputs")
    return model, path


def parse_input_shapes(specs) -> dict[str, tuple[int, ...]]:
    """['NAME:1x3x224x224', ...] -> {NAME: (1, 3, 224, 224)}; a bad spec is a usage error."""
    shapes = {}
    for spec in specs:
        name, sep, dims = spec.rpartition(":")
        if not sep or not name:
            raise click.BadParameter(
                f"{spec!r} is not NAME:DIMS (for example data:1x3x224x224)",
                param_hint="--input-shape",
            )
        try:
            shape = tuple(int(d) for d in dims.replace(",", "x").split("x"))
        except ValueError:
            raise click.BadParameter(
                f"{spec!r}: the dims {dims!r} are not integers separated by 'x'",
                param_hint="--input-shape",
            ) from None
        if any(d < 0 for d in shape):
            raise click.BadParameter(f"{spec!r}: negative dimension", param_hint="--input-shape")
        shapes[name] = shape
    return shapes


def import_model(model, shapes: dict):
    """from_onnx with the frontend's errors (unsupported ops, bad shapes) as ModelErrors."""
    from tessera.frontend import from_onnx

    try:
        return from_onnx(model, shapes)
    except (ValueError, TypeError, NotImplementedError) as e:
        # The frontend speaks of its Python argument; the user here typed an option.
        raise ModelError(str(e).replace("shape_dict", "--input-shape NAME:DIMS")) from e


# ---------------------------------------------------------------- the graph pipeline


@dataclass
class Stage:
    """The graph after one step of the pipeline, and how long that step took."""

    name: str
    func: object  # tessera.graph.Function
    seconds: float


class _Capture:
    """A PassInstrument that keeps the IR after every pass."""

    def __init__(self):
        self.stages: list[Stage] = []

    def enter_pass_ctx(self):
        pass

    def exit_pass_ctx(self):
        pass

    def run_before_pass(self, name, ir):
        pass

    def run_after_pass(self, name, ir, seconds):
        func = ir["main"] if hasattr(ir, "functions") else ir
        self.stages.append(Stage(name, func, seconds))


def graph_stages(
    mod, params: dict, opt_level: int = DEFAULT_OPT_LEVEL, target: str = "llvm"
) -> list[Stage]:
    """The function after import (params bound as constants, as the build does), then after
    every graph pass the driver runs at `opt_level` for `target` (alter_layout depends on it)."""
    from tessera.driver import optimize_graph
    from tessera.target import Target
    from tessera.transform import PassContext, bind_params

    start = time.perf_counter()
    mod = bind_params(mod, params)  # the build's first step
    stages = [Stage("import", mod["main"], time.perf_counter() - start)]
    capture = _Capture()
    try:
        with PassContext(opt_level=opt_level, instruments=[capture]), Target(target):
            optimize_graph(mod)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ModelError(f"a graph pass failed: {e}") from e
    return stages + capture.stages


def op_histogram(func) -> dict[str, int]:
    """Op name -> number of calls (the calls inside `fused` groups counted by their ops)."""
    counts: dict[str, int] = {}
    for call in func.body:
        inner = call.attrs["func"].body if call.op.name == "fused" else (call,)
        for c in inner:
            counts[c.op.name] = counts.get(c.op.name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def format_shape(shape) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
