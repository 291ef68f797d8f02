"""`tessera show ARTIFACT.so`: what a compiled artifact holds (inputs, outputs, weights, arena,
and the kernel calls of its executor plan with the ONNX nodes each came from)."""

from __future__ import annotations

from tessera.cli.common import format_shape, human_bytes, stdout_console
from tessera.cli.options import quiet


def show_artifact(path: str) -> None:
    from rich.table import Table

    from tessera.cli.build import load_factory

    factory = load_factory(path)
    plan = factory.plan
    console = stdout_console()
    console.print(
        f"[bold]{path}[/bold]: {len(plan['calls'])} calls of {factory.num_kernels} kernels, "
        f"weights {human_bytes(plan['params_nbytes'])}, arena {human_bytes(plan['arena_nbytes'])}"
    )
    if quiet():  # -q: the line above only
        return
    for title, specs in (("inputs", plan["inputs"]), ("outputs", plan["outputs"])):
        table = Table(title=title, title_justify="left")
        for col in ("name", "shape", "dtype"):
            table.add_column(col)
        for s in specs:
            table.add_row(s["name"], format_shape(s["shape"]), s["dtype"])
        console.print(table)
    table = Table(title="kernel calls", title_justify="left")
    for col in ("#", "kernel", "ONNX nodes"):
        table.add_column(col)
    for i, call in enumerate(plan["calls"]):
        table.add_row(str(i), call["kernel"], ", ".join(call.get("nodes", ())) or "-")
    console.print(table)
