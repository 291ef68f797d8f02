"""`tessera show` (what a model holds and what the compiler does to it) and `tessera ops` (the
ONNX op coverage table).

    tessera show model.onnx                  # inputs, outputs, op histogram, stages, kernels
    tessera show model.onnx --ir fuse_ops    # ... and the graph text after that stage
    tessera show model.onnx --html g.html    # a page that draws the fused graph
    tessera ops --missing                    # the ONNX ops tessera cannot import yet
"""

from __future__ import annotations

import json

import click

from tessera.cli.common import (
    DEFAULT_OPT_LEVEL,
    ModelError,
    format_shape,
    graph_stages,
    import_model,
    is_artifact,
    op_histogram,
    parse_input_shapes,
    read_model,
    stdout_console,
)
from tessera.cli.options import input_shape_option, opt_level_option, quiet, verbosity_options


def _unsupported(model) -> list[tuple[str, str, str]]:
    from tessera.frontend import UnsupportedOpError
    from tessera.frontend.onnx import _check_supported, _opsets

    try:
        _check_supported(model.graph, _opsets(model))
    except UnsupportedOpError as e:
        return e.nodes
    return []


def _io_table(title, rows):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in ("name", "shape", "dtype"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


def _onnx_io(model):
    import onnx

    inits = {i.name for i in model.graph.initializer}

    def rows(values):
        out = []
        for vi in values:
            if vi.name in inits:
                continue
            t = vi.type.tensor_type
            dims = [d.dim_param or str(d.dim_value) for d in t.shape.dim]
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "?"
            out.append((vi.name, "x".join(dims) or "scalar", dtype))
        return out

    return rows(model.graph.input), rows(model.graph.output)


def _histogram_table(model, unsupported):
    from rich.table import Table

    counts: dict[str, int] = {}
    for node in model.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    missing = {op for _, op, _ in unsupported}
    table = Table(title=f"ONNX ops ({len(model.graph.node)} nodes)", title_justify="left")
    table.add_column("op")
    table.add_column("count", justify="right")
    table.add_column("supported")
    for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(op, str(n), "no" if op in missing else "yes")
    return table


def _stage_table(stages):
    from rich.table import Table

    table = Table(title="graph after each stage", title_justify="left")
    for col, just in (("stage", "left"), ("time (ms)", "right"), ("calls", "right")):
        table.add_column(col, justify=just)
    table.add_column("ops")
    for s in stages:
        hist = op_histogram(s.func)
        shown = ", ".join(f"{op} {n}" for op, n in list(hist.items())[:5])
        more = f", +{len(hist) - 5} more" if len(hist) > 5 else ""
        table.add_row(s.name, f"{s.seconds * 1e3:.1f}", str(len(s.func.body)), shown + more)
    return table


def _kernel_table(func):
    from rich.table import Table

    table = Table(title=f"fused kernels ({len(func.body)})", title_justify="left")
    for col in ("#", "kernel", "output"):
        table.add_column(col)
    for i, call in enumerate(func.body):
        name = call.attrs["func"].name if call.op.name == "fused" else call.op.name
        out = ", ".join(format_shape(v.type.shape) for v in call.outputs)
        table.add_row(str(i), name, out)
    return table


@click.command()
@click.argument("model", required=False, type=click.Path(exists=True, dir_okay=False))
@input_shape_option
@opt_level_option(DEFAULT_OPT_LEVEL)
@click.option(
    "--ir",
    "ir_stage",
    metavar="STAGE",
    help="Print the graph text after STAGE (a pass name, 'import', or 'all').",
)
@click.option("--kernels", is_flag=True, help="List the fused kernels.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write the graph page.")
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(exists=True, dir_okay=False),
    help="A profile from `tessera run --profile-json` that colours the page by time.",
)
@verbosity_options
def show(model, input_shape, opt_level, ir_stage, kernels, html_path, profile_path):
    """Show what MODEL (default: the built-in ResNet-50) holds and what the compiler does to it.

    For an ONNX file: inputs, outputs, the op histogram, unsupported ops, and the graph after
    each stage of the pipeline. For a compiled artifact (.so): its inputs, outputs and kernels.
    With -q: one line of summary instead of the tables, and what --ir / --kernels ask for.
    """
    if model is not None and is_artifact(model):
        from tessera.cli.artifact import show_artifact

        return show_artifact(model)
    onnx_model, label = read_model(model)
    console = stdout_console()
    inputs, outputs = _onnx_io(onnx_model)
    unsupported = _unsupported(onnx_model)
    if not quiet():
        console.print(f"[bold]{label}[/bold]  (opset {_opset(onnx_model)})")
        console.print(_io_table("inputs", inputs))
        console.print(_io_table("outputs", outputs))
        console.print(_histogram_table(onnx_model, unsupported))
    if unsupported:
        from tessera.frontend import UnsupportedOpError

        raise ModelError(str(UnsupportedOpError(unsupported)))
    mod, params = import_model(onnx_model, parse_input_shapes(input_shape))
    stages = graph_stages(mod, params, opt_level)
    if quiet():
        click.echo(
            f"{label}: {len(inputs)} input(s), {len(outputs)} output(s), "
            f"{len(onnx_model.graph.node)} ONNX nodes -> {len(stages[-1].func.body)} kernel calls"
        )
    else:
        console.print(_stage_table(stages))
    _print_ir(console, stages, ir_stage)
    fused = stages[-1].func
    if kernels:
        console.print(_kernel_table(fused))
    if html_path:
        from tessera.cli.html import write_graph_page

        profile = _read_profile(profile_path) if profile_path else None
        if profile and max(profile) >= len(fused.body):
            raise ModelError(
                f"{profile_path} profiles {max(profile) + 1} kernel calls, the graph has "
                f"{len(fused.body)}: was it made from this model at this --opt-level?"
            )
        write_graph_page(html_path, fused, title=label, profile=profile)
        if not quiet():
            console.print(f"wrote {html_path}")


def _opset(model) -> str:
    return ", ".join(str(i.version) for i in model.opset_import if i.domain in ("", "ai.onnx"))


def _print_ir(console, stages, ir_stage):
    if not ir_stage:
        return
    names = [s.name for s in stages]
    if ir_stage != "all" and ir_stage not in names:
        raise click.BadParameter(
            f"no stage {ir_stage!r} (stages: {', '.join(names)}, all)", param_hint="--ir"
        )
    for s in stages:
        if ir_stage in ("all", s.name):
            console.rule(f"after {s.name}")
            console.print(str(s.func), markup=False, highlight=False, soft_wrap=True)


def _read_profile(path) -> dict:
    try:
        with open(path) as f:
            profile = json.load(f)
        return {int(k["index"]): float(k["seconds"]) for k in profile["kernels"]}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelError(
            f"{path} is not a tessera profile (from `tessera run --profile-json`): {e}"
        ) from None


# ---------------------------------------------------------------- ops


def coverage() -> list[tuple[str, str, int | None]]:
    """(domain, ONNX op, first opset tessera converts or None), every op of the default domain
    the installed onnx defines, then the converters of other domains."""
    import onnx

    from tessera.frontend import onnx as _frontend  # noqa: F401  (registers the converters)
    from tessera.frontend.onnx_registry import _CONVERTERS

    ops = sorted({s.name for s in onnx.defs.get_all_schemas() if s.domain in ("", "ai.onnx")})
    rows = []
    for op in ops:
        entries = _CONVERTERS.get(("", op), [])
        rows.append(("", op, entries[0][0] if entries else None))
    for (domain, op), entries in sorted(_CONVERTERS.items()):
        if domain:
            rows.append((domain, op, entries[0][0]))
    return rows


@click.command()
@click.option("--missing", is_flag=True, help="List only the ops that are not supported.")
@click.option("--markdown", is_flag=True, help="Print a markdown table.")
@verbosity_options
def ops(missing, markdown):
    """The ONNX op coverage table: which ops tessera imports, from which opset."""
    rows = coverage()
    default = [r for r in rows if not r[0]]
    n_ok = sum(1 for r in default if r[2] is not None)
    shown = [r for r in rows if r[2] is None] if missing else rows
    status = lambda since: "—" if since is None else f"yes (opset {since}+)"  # noqa: E731
    summary = f"{n_ok} of {len(default)} ONNX ops supported"
    if markdown:
        click.echo(f"{summary}\n\n| op | supported |\n|---|---|")
        for domain, op, since in shown:
            click.echo(f"| {domain + '.' if domain else ''}{op} | {status(since)} |")
        return
    from rich.table import Table

    table = Table(title=summary, title_justify="left")
    table.add_column("op")
    table.add_column("supported")
    for domain, op, since in shown:
        table.add_row(f"{domain + '.' if domain else ''}{op}", status(since))
    stdout_console().print(table)
