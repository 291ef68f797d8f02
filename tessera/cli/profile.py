"""Per-kernel profile of a compiled model: every kernel call timed natively, mapped to the ONNX
nodes it came from (the plan's `nodes` of each call), sorted by time, with shares of the total.

    rows = profile_kernels(graph_module, repeat=10)
    print_profile(rows);  write_profile("prof.json", rows, "model.so")

`GraphModule.profile` runs the model's native entry with a clock around each kernel call (no
Python between the calls); a row's time is the mean over `repeat` runs of the whole model.
"""

from __future__ import annotations

import json


def profile_kernels(module, repeat: int = 10) -> list:
    """Rows (runtime.graph_module.CallProfile: index, kernel, nodes, seconds, share) of every
    kernel call of `module` (a GraphModule) over `repeat` runs, slowest first."""
    return sorted(module.profile(repeat=repeat), key=lambda r: -r.seconds)


def _nodes_text(nodes: list[str], limit: int = 3) -> str:
    if not nodes:
        return "-"
    more = f" +{len(nodes) - limit}" if len(nodes) > limit else ""
    return ", ".join(nodes[:limit]) + more


def print_profile(rows: list, top: int | None = None) -> None:
    from rich.table import Table

    from tessera.cli.common import stdout_console

    total = sum(r.seconds for r in rows) or 1.0
    table = Table(
        title=f"per-kernel profile ({len(rows)} calls, {total * 1e3:.3f} ms in kernels)",
        title_justify="left",
    )
    for col, just in (("#", "right"), ("kernel", "left"), ("ONNX nodes", "left")):
        table.add_column(col, justify=just)
    table.add_column("time (ms)", justify="right")
    table.add_column("share", justify="right")
    table.add_column("cumulative", justify="right")
    cumulative = 0.0
    for r in rows[:top] if top else rows:
        cumulative += r.seconds
        table.add_row(
            str(r.index),
            r.kernel,
            _nodes_text(r.nodes),
            f"{r.seconds * 1e3:.3f}",
            f"{100 * r.seconds / total:.1f}%",
            f"{100 * cumulative / total:.1f}%",
        )
    stdout_console().print(table)


def write_profile(path: str, rows: list, artifact: str) -> None:
    """JSON: {"artifact", "total_seconds", "kernels": [{"index", "name", "nodes", "seconds"}]};
    `tessera show --profile` reads it to colour the graph page."""
    data = {
        "artifact": str(artifact),
        "total_seconds": sum(r.seconds for r in rows),
        "kernels": [
            {"index": r.index, "name": r.kernel, "nodes": r.nodes, "seconds": r.seconds}
            for r in sorted(rows, key=lambda r: r.index)
        ],
    }
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
