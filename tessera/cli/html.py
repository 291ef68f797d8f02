"""The graph page of `tessera show --html`: one self-contained HTML file (inline CSS, SVG and a
little JS; no network, no server) that draws a fused graph.

    write_graph_page("graph.html", fused_func, title="resnet50", profile={0: 1.2e-3, ...})

Kernels (the `fused` calls) are boxes, model inputs and outputs are rounded boxes, tensors are
edges labelled with their shapes; weights are listed in the box's tooltip, not drawn. With a
profile (seconds by call index, from `tessera run --profile-json`) each kernel is coloured by its
time. The layout is computed here (layers by longest path, order in a layer by the mean position
of the inputs), so the SVG is complete without JS: the script only adds highlighting and the
details panel. Every element a test looks for carries a class: `kernel`, `io`, `edge`.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

BOX_W, BOX_H, GAP_X, GAP_Y, MARGIN = 260, 46, 90, 56, 30


@dataclass
class _Node:
    key: str
    kind: str  # "kernel" | "input" | "output"
    label: str
    detail: str
    info: dict = field(default_factory=dict)
    inputs: list[tuple[str, str]] = field(default_factory=list)  # (producer key, edge label)
    layer: int = 0
    x: float = 0.0
    y: float = 0.0


def _shape(v) -> str:
    return "x".join(str(d) for d in v.type.shape) or "scalar"


def _ops_text(call) -> list[str]:
    inner = call.attrs["func"].body if call.op.name == "fused" else (call,)
    return [c.op.name for c in inner]


def _nodes(func, profile: dict[int, float] | None) -> list[_Node]:
    """Inputs, kernels, outputs, each with the edges into it."""
    from tessera.graph.ir import Constant

    nodes, producer = [], {}
    for p in func.params:
        nodes.append(_Node(f"in:{p.name}", "input", p.name, str(p.type)))
        producer[id(p)] = f"in:{p.name}"
    for i, call in enumerate(func.body):
        name = call.attrs["func"].name if call.op.name == "fused" else call.op.name
        ops = _ops_text(call)
        weights = [f"{c.name}: {c.type}" for c in call.inputs if isinstance(c, Constant)]
        info = {"index": i, "ops": ops, "nodes": list(call.span), "weights": weights}
        if profile and i in profile:
            info["seconds"] = profile[i]
        node = _Node(f"k{i}", "kernel", name, " + ".join(o.split(".")[-1] for o in ops), info)
        for v in call.inputs:
            if id(v) in producer:
                node.inputs.append((producer[id(v)], _shape(v)))
        for v in call.outputs:
            producer[id(v)] = node.key
        nodes.append(node)
    for k, v in enumerate(func.outputs):
        out = _Node(f"out:{k}", "output", f"output {k}: {v.name}", str(v.type))
        if id(v) in producer:
            out.inputs.append((producer[id(v)], _shape(v)))
        nodes.append(out)
    return nodes


def _layout(nodes: list[_Node]) -> tuple[float, float]:
    """Assign layers (longest path from the inputs) and positions; returns (width, height)."""
    by_key = {n.key: n for n in nodes}
    for n in nodes:  # nodes are in topological order
        n.layer = max((by_key[k].layer + 1 for k, _ in n.inputs), default=0)
    layers: dict[int, list[_Node]] = {}
    for n in nodes:
        layers.setdefault(n.layer, []).append(n)
    width = 0.0
    for depth in sorted(layers):
        row = layers[depth]
        if depth:  # barycenter of the inputs keeps edges short and mostly vertical
            row.sort(key=lambda n: sum(by_key[k].x for k, _ in n.inputs) / max(1, len(n.inputs)))
        for j, n in enumerate(row):
            n.x = MARGIN + j * (BOX_W + GAP_X)
            n.y = MARGIN + depth * (BOX_H + GAP_Y)
        width = max(width, MARGIN * 2 + len(row) * (BOX_W + GAP_X) - GAP_X)
    height = MARGIN * 2 + len(layers) * (BOX_H + GAP_Y) - GAP_Y
    return width + GAP_X + 90, height  # room for the residual edges and their labels


def _heat(share: float) -> str:
    """White-yellow for cheap kernels to red for the most expensive one."""
    share = min(1.0, max(0.0, share))
    green = int(235 - 175 * share)
    blue = int(200 - 170 * share)
    return f"rgb(250,{green},{blue})"


_KIND_COLOURS = {"conv": "#dbe8fb", "dense": "#dbe8fb", "matmul": "#dbe8fb", "pool": "#dff3e3"}


def _fill(node: _Node, max_seconds: float) -> str:
    if node.kind != "kernel":
        return "#f2f2f2"
    if "seconds" in node.info and max_seconds > 0:
        return _heat(node.info["seconds"] / max_seconds)
    for key, colour in _KIND_COLOURS.items():
        if any(key in op for op in node.info["ops"]):
            return colour
    return "#fff8e1"


def _svg(nodes: list[_Node], width: float, height: float) -> str:
    by_key = {n.key: n for n in nodes}
    max_seconds = max((n.info.get("seconds", 0.0) for n in nodes), default=0.0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}">']
    for n in nodes:
        for src_key, label in n.inputs:
            parts.append(_edge(by_key[src_key], n, label))
    for n in nodes:
        parts.append(_box(n, _fill(n, max_seconds)))
    defs = (
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#777"/></marker></defs>'
    )
    return parts[0] + defs + "".join(parts[1:]) + "</svg>"


def _edge(src: _Node, dst: _Node, label: str) -> str:
    """A curve from the bottom of `src` to the top of `dst`; an edge that skips layers (a
    residual connection) bows out to the right, so it does not run over the boxes between."""
    if dst.layer - src.layer > 1:
        x1, y1 = src.x + BOX_W, src.y + BOX_H / 2
        x2, y2 = dst.x + BOX_W, dst.y + BOX_H / 2
        bow = min(GAP_X - 10, 25 + 6 * (dst.layer - src.layer))
        path = (
            f"M{x1:.0f},{y1:.0f} C{x1 + bow:.0f},{y1:.0f} {x2 + bow:.0f},{y2:.0f} {x2:.0f},{y2:.0f}"
        )
        lx, ly = max(x1, x2) + bow * 0.75 + 4, (y1 + y2) / 2
    else:
        x1, y1 = src.x + BOX_W / 2, src.y + BOX_H
        x2, y2 = dst.x + BOX_W / 2, dst.y
        mid = (y1 + y2) / 2
        path = f"M{x1:.0f},{y1:.0f} C{x1:.0f},{mid:.0f} {x2:.0f},{mid:.0f} {x2:.0f},{y2:.0f}"
        lx, ly = (x1 + x2) / 2 + 4, mid + 4
    return (
        f'<g class="edge" data-from="{src.key}" data-to="{dst.key}">'
        f'<path d="{path}" marker-end="url(#arrow)"/>'
        f'<text x="{lx:.0f}" y="{ly:.0f}">{html.escape(label)}</text></g>'
    )


def _box(n: _Node, fill: str) -> str:
    cls = "kernel" if n.kind == "kernel" else f"io {n.kind}"
    radius = 4 if n.kind == "kernel" else 18
    title = n.label + "\n" + n.detail
    if n.kind == "kernel":
        info = n.info
        title += "\nONNX nodes: " + (", ".join(info["nodes"]) or "-")
        if info["weights"]:
            title += "\nweights: " + "; ".join(info["weights"])
    label = n.label if len(n.label) <= 34 else n.label[:31] + "..."
    detail = n.detail if len(n.detail) <= 38 else n.detail[:35] + "..."
    if "seconds" in n.info:
        detail = f"{n.info['seconds'] * 1e3:.3f} ms · " + detail
    return (
        f'<g class="{cls}" id="{n.key}" data-name="{html.escape(n.label)}">'
        f"<title>{html.escape(title)}</title>"
        f'<rect x="{n.x:.0f}" y="{n.y:.0f}" width="{BOX_W}" height="{BOX_H}" rx="{radius}" '
        f'fill="{fill}"/>'
        f'<text class="name" x="{n.x + 8:.0f}" y="{n.y + 18:.0f}">{html.escape(label)}</text>'
        f'<text class="detail" x="{n.x + 8:.0f}" y="{n.y + 35:.0f}">{html.escape(detail)}</text>'
        "</g>"
    )


_CSS = """
body { font: 14px system-ui, sans-serif; margin: 0; display: flex; height: 100vh; }
#graph { flex: 1; overflow: auto; background: #fcfcfc; }
#side { width: 340px; padding: 12px 16px; border-left: 1px solid #ddd; overflow: auto; }
h1 { font-size: 16px; margin: 0 0 8px; }
.edge path { fill: none; stroke: #999; stroke-width: 1.3; }
.edge text { font-size: 10px; fill: #666; }
.edge.on path { stroke: #d33; stroke-width: 2.5; }
.kernel rect, .io rect { stroke: #888; }
.kernel.on rect { stroke: #d33; stroke-width: 2.5; }
.kernel, .io { cursor: pointer; }
text.name { font-size: 12px; font-weight: 600; }
text.detail { font-size: 11px; fill: #444; }
#details pre { white-space: pre-wrap; font-size: 12px; }
"""

_JS = """
const DATA = JSON.parse(document.getElementById('graph-data').textContent);
function select(id) {
  document.querySelectorAll('.on').forEach(e => e.classList.remove('on'));
  const box = document.getElementById(id);
  if (!box) return;
  box.classList.add('on');
  document.querySelectorAll(`.edge[data-from="${id}"], .edge[data-to="${id}"]`)
    .forEach(e => e.classList.add('on'));
  const info = DATA.nodes[id] || {};
  const lines = [box.dataset.name, ''];
  for (const [k, v] of Object.entries(info))
    lines.push(`${k}: ${Array.isArray(v) ? v.join(', ') : v}`);
  document.querySelector('#details pre').textContent = lines.join('\\n');
}
document.querySelectorAll('.kernel, .io')
  .forEach(g => g.addEventListener('click', () => select(g.id)));
"""


def graph_page(func, title: str = "tessera graph", profile: dict[int, float] | None = None) -> str:
    """The page's HTML text for a fused graph Function."""
    nodes = _nodes(func, profile)
    width, height = _layout(nodes)
    kernels = [n for n in nodes if n.kind == "kernel"]
    summary = f"{len(kernels)} kernels, {len(func.params)} inputs, {len(func.outputs)} outputs"
    if profile:
        total = sum(profile.values())
        summary += f"; {total * 1e3:.3f} ms in kernels (colour: time, red is slowest)"
    data = {"title": title, "nodes": {n.key: n.info for n in kernels}}
    # "</" cannot appear inside the script element: JSON escapes it.
    data_json = json.dumps(data).replace("</", "<\\/")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>"
        f"<div id='graph'>{_svg(nodes, width, height)}</div>"
        f"<div id='side'><h1>{html.escape(title)}</h1><p id='summary'>{html.escape(summary)}</p>"
        "<p>Click a kernel to see its ops, the ONNX nodes it came from and its weights.</p>"
        "<div id='details'><pre></pre></div></div>"
        f"<script type='application/json' id='graph-data'>{data_json}</script>"
        f"<script>{_JS}</script></body></html>\n"
    )


def write_graph_page(path: str, func, title: str = "tessera graph", profile=None) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(graph_page(func, title, profile))
