"""Per-kernel profile of a compiled model: every kernel call timed alone, mapped to the ONNX
nodes it came from (the plan's `nodes` of each call), sorted by time, with shares of the total.

    rows = profile_kernels(graph_module, factory.plan, repeat=10)
    print_profile(rows);  write_profile("prof.json", rows, "model.so")

The executor runs its calls in a Python loop over native functions, so a call is timed by
wrapping exactly that native call: the timer's overhead (well under a microsecond) is all that
is added. Each call's time is the median over `repeat` runs of the whole model.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import numpy as np


@dataclass
class KernelTime:
    index: int  # position in the executor plan
    kernel: str
    nodes: list[str]
    seconds: float


def profile_kernels(module, plan: dict, repeat: int = 10) -> list[KernelTime]:
    """Time each kernel call of `module` (a GraphModule) over `repeat` runs; slowest first."""
    calls = module._ex.calls  # (native function, buffers, vars, kernel name), in plan order
    module.run()  # warm-up: caches, thread pool, lazy pages of the weights
    times = np.zeros((repeat, len(calls)))
    for r in range(repeat):
        for i, (cfunc, buffers, values, name) in enumerate(calls):
            start = time.perf_counter()
            code = cfunc(buffers, values)
            times[r, i] = time.perf_counter() - start
            if code:
                raise RuntimeError(f"kernel {name} failed (it returned a non-zero code)")
    medians = np.median(times, axis=0)
    rows = [
        KernelTime(i, call["kernel"], list(call.get("nodes", ())), float(medians[i]))
        for i, call in enumerate(plan["calls"])
    ]
    return sorted(rows, key=lambda r: -r.seconds)


def _nodes_text(nodes: list[str], limit: int = 3) -> str:
    if not nodes:
        return "-"
    more = f" +{len(nodes) - limit}" if len(nodes) > limit else ""
    return ", ".join(nodes[:limit]) + more


def print_profile(rows: list[KernelTime], top: int | None = None) -> None:
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


def write_profile(path: str, rows: list[KernelTime], artifact: str) -> None:
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
