"""Benchmark: a model's kernel time per class of node, tessera artifacts next to ORT's nodes.

    .venv/bin/python bench/conv_classes.py model.onnx before.so after.so [--threads 1]
                                          [--runs 30] [--turns 2] [--calls "Conv 3x3 s2"]

Every kernel call of each artifact (`GraphModule.profile`, the artifacts in turns) and every
node of ONNX Runtime (its profiler, `int8.ort_node_medians`) is put in the class of the node
it is built around: a call's first Conv/Gemm/MatMul source node, else its first node; a call
with no source node (a layout transform between blocked and plain layouts) is "layout". A
Conv's class is its kernel, stride and group kind ("Conv 3x3 s2", "Conv 1x1", "Conv 3x3
depthwise"); other nodes' class is their op type. Each call (node) counts its minimum over
`--runs` runs (the figure least moved by other processes on a shared machine), the artifacts
in `--turns` turns. Prints, per class, ORT's ms and each artifact's ms and ratio, most of ORT's
time first; with `--calls CLASS`, each call of that class too (its first node, each artifact's
ms). A benchmark, not a test.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from int8 import call_seconds, ort_node_medians  # noqa: E402
from kernel_sums import artifacts_parser, loaded_modules, random_feed  # noqa: E402

ANCHORS = ("Conv", "Gemm", "MatMul", "ConvTranspose")


def node_class(node: onnx.NodeProto, channels: dict[str, int]) -> str:
    """The class of one ONNX node (see the module's doc)."""
    if node.op_type != "Conv":
        return node.op_type
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    kernel = "x".join(str(k) for k in attrs.get("kernel_shape", [])) or "?"
    strides = set(attrs.get("strides", [1]))
    group = int(attrs.get("group", 1))
    name = f"Conv {kernel}" + (f" s{max(strides)}" if max(strides) > 1 else "")
    if group > 1:
        name += " depthwise" if channels.get(node.input[0]) == group else " grouped"
    return name


def input_channels(model: onnx.ModelProto) -> dict[str, int]:
    """Channels (dim 1) of every value whose shape inference knows it."""
    inferred = onnx.shape_inference.infer_shapes(model)
    values = [*inferred.graph.value_info, *inferred.graph.input]
    out = {}
    for v in values:
        dims = v.type.tensor_type.shape.dim
        if len(dims) > 1 and dims[1].HasField("dim_value"):
            out[v.name] = dims[1].dim_value
    return out


def call_class(nodes: list[str], classes: dict[str, str], op_types: dict[str, str]) -> str:
    """A kernel call's class: its first anchor source node's, else its first node's."""
    known = [n for n in nodes if n in classes]
    if not known:
        return "layout" if not nodes else "other"
    anchor = next((n for n in known if op_types[n] in ANCHORS), known[0])
    return classes[anchor]


def ort_sources(names: list[str], model: onnx.ModelProto) -> dict[str, str]:
    """Each ORT node's source node. ORT's NCHWc pass names a node after its source node's
    output ("<output>_nchwc"), and a fused conv carries its activation's output: a node whose
    source is element-wise is given the conv or matmul it was fused with (the producer of its
    inputs, up to three steps back) when no ORT node of its own has that one."""
    by_output = {o: n for n in model.graph.node for o in n.output}
    named = {n.name: n for n in model.graph.node}
    found = {}
    for name in names:
        base = name.removesuffix("_nchwc")
        node = named.get(base) or by_output.get(base)
        if node is not None:
            found[name] = node
    claimed = {n.name for n in found.values()}
    out = {}
    for name, node in found.items():
        walk, steps = node, 0
        while walk.op_type not in ANCHORS and steps < 3:
            up = next((by_output[i] for i in walk.input if i in by_output), None)
            if up is None or up.name in claimed:
                break
            walk, steps = up, steps + 1
        out[name] = walk.name if walk.op_type in ANCHORS else node.name
    return out


def main(argv=None) -> int:
    ap = artifacts_parser(__doc__, "the .onnx model (static input shapes)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--turns", type=int, default=2, help="the artifacts' turns (runs split)")
    ap.add_argument("--calls", default="", help="print each call of this class")
    args = ap.parse_args(argv)

    import tessera

    tessera.runtime.set_num_threads(args.threads)
    model = onnx.load(args.model)
    channels = input_channels(model)
    classes = {n.name: node_class(n, channels) for n in model.graph.node}
    op_types = {n.name: n.op_type for n in model.graph.node}
    feed = random_feed(model)
    modules = loaded_modules(args.artifacts, feed)
    samples: list[list[np.ndarray]] = [[] for _ in modules]
    calls = [None] * len(modules)
    for _ in range(args.turns):  # in turns
        for k, module in enumerate(modules):
            calls[k], secs = call_seconds(module, max(1, args.runs // args.turns))
            samples[k].append(secs)
    table: dict[str, list[float]] = {}
    listed: dict[str, list[float]] = {}
    for k in range(len(modules)):
        minima = np.concatenate(samples[k]).min(axis=0)
        for call, t in zip(calls[k], minima, strict=True):
            cls = call_class(call.nodes, classes, op_types)
            row = table.setdefault(cls, [0.0] * (1 + len(modules)))
            row[1 + k] += float(t)
            if cls == args.calls:
                listed.setdefault(call.nodes[0], []).append(float(t))
    for node, times in listed.items():
        print(f"{args.calls} {node}: " + ", ".join(f"{t * 1e3:.3f} ms" for t in times))
    ort_times = ort_node_medians(args.model, args.threads, feed, args.runs, np.min)
    sources = ort_sources(list(ort_times), model)
    for name, t in ort_times.items():
        layout = name.startswith(("ReorderInput", "ReorderOutput"))
        cls = "layout" if layout else classes.get(sources.get(name, ""), "ort:" + name)
        table.setdefault(cls, [0.0] * (1 + len(modules)))[0] += t
    heads = " | ".join(f"{os.path.basename(p)} ms (x ORT)" for p in args.artifacts)
    print(f"| class | ORT ms | {heads} |")
    print("|---|---:|" + "---:|" * len(modules))
    total = [0.0] * (1 + len(modules))
    for cls, row in sorted(table.items(), key=lambda kv: -max(kv[1])):
        total = [a + b for a, b in zip(total, row, strict=True)]
        cells = " | ".join(f"{t * 1e3:.3f} ({t / row[0]:.2f})" if row[0] else f"{t * 1e3:.3f}"
                           for t in row[1:])  # fmt: skip
        print(f"| {cls} | {row[0] * 1e3:.3f} | {cells} |")
    cells = " | ".join(f"{t * 1e3:.3f} ({t / total[0]:.2f})" for t in total[1:])
    print(f"| total | {total[0] * 1e3:.3f} | {cells} |")
    print(f"threads {args.threads}, runs {args.runs}, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
