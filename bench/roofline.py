"""Per-kernel roofline audit of the zoo (issue 10): for every kernel call of every model, its
achieved GFLOP/s and GB/s next to the machine's measured FMA peak and memory bandwidth, so that
a performance cliff shows as a kernel far below both bounds.

    .venv/bin/python bench/roofline.py [--models shufflenet,ppocr_rec] [--threads 2]
                                       [--top 40] [--markdown F] [--json F]

Per call (`GraphModule.profile`: each kernel call timed natively, mean of `--repeat` runs):

- FLOP: of the ONNX nodes the call computes (the plan's source nodes), from ONNX shape
  inference: 2 per multiply-add of Conv, ConvTranspose, Gemm, MatMul, LSTM/GRU/RNN; one per
  output element for everything else (element-wise, pooling, normalization: their bound is
  memory anyway);
- bytes: the call's buffer arguments as the kernel declares them (inputs, weights as packed,
  outputs; not its scratch workspaces): the traffic if each is touched once;
- bound: the roofline time max(FLOP / FMA peak, bytes / bandwidth) and which term is larger;
  "of roof": that time over the measured time. A kernel at 100% runs at the machine's limit;
  a cliff is a kernel with a large share of its model's time at a few percent of its roof.

The peak is `fma_peak.measure_fma_peak`, the bandwidth `stream.measure_bandwidth`'s triad, both
measured at the start on the same thread count. Kernel class: from the ONNX nodes (Conv by its
groups and kernel, MatMul/Gemm by M, N, K, ...), see `kernel_class`. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import zoo  # noqa: E402
from fma_peak import measure_fma_peak  # noqa: E402
from models import compile_model  # noqa: E402
from stream import measure_bandwidth  # noqa: E402

CLIFF_SHARE = 0.05  # a call with at least this share of its model's kernel time ...
CLIFF_ROOF = 0.15  # ... at under this fraction of its roof is listed as a cliff


@dataclass
class NodeInfo:
    op: str
    flops: float
    label: str  # the node's class (see kernel_class)


@dataclass
class Row:
    model: str
    index: int
    kernel: str
    kind: str
    nodes: str
    seconds: float
    share: float
    gflop: float
    mbytes: float
    bound: str
    of_roof: float

    @property
    def gflops(self) -> float:
        return self.gflop / self.seconds if self.seconds else 0.0

    @property
    def gbs(self) -> float:
        return self.mbytes / 1e3 / self.seconds if self.seconds else 0.0


# -- shapes and flops of the ONNX nodes ---------------------------------------------------------


def run_shapes(model: onnx.ModelProto, feeds: dict) -> dict[str, list[int]]:
    """The shape of every value of the graph, as ONNX Runtime computes it on `feeds` (shape
    inference alone leaves the values behind Shape -> Gather -> Reshape chains unknown): every
    node output becomes a graph output for one run. Weights' shapes from the initializers."""
    from models import ort_session

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    known = {o.name for o in copy.graph.output}
    names = [x for n in copy.graph.node for x in n.output if x and x not in known]
    copy.graph.output.extend(onnx.ValueInfoProto(name=x) for x in names)
    shapes = {i.name: list(i.dims) for i in copy.graph.initializer}
    shapes.update({k: list(np.shape(v)) for k, v in feeds.items()})
    outputs = [o.name for o in copy.graph.output]
    try:
        values = ort_session(copy, 1).run(outputs, feeds)
    except Exception:  # ORT refuses the model: the FLOP column stays 0 for it
        return shapes
    shapes.update({k: list(np.shape(v)) for k, v in zip(outputs, values, strict=True)})
    return shapes


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def node_info(node, shapes: dict, consts: set) -> NodeInfo:
    """FLOP and class of one ONNX node (0 FLOP where its shapes are unknown); `consts`: the
    names of the initializers (a MatMul with a constant B is a different class)."""
    out = shapes.get(node.output[0]) if node.output else None
    size = int(np.prod(out)) if out and all(out) else 0
    ins = [shapes.get(i, []) for i in node.input]
    op = node.op_type
    if op in ("Conv", "ConvInteger") and len(ins) > 1 and len(ins[1]) >= 3:
        w = ins[1]
        group = _attr(node, "group", 1)
        kernel = w[2:]
        flops = 2 * size * int(np.prod(w[1:]))
        cin = w[1] * group
        if group == 1:
            shape = "1x1" if all(k == 1 for k in kernel) else "x".join(map(str, kernel))
            label = f"conv {len(kernel)}-D {shape}" if len(kernel) != 2 else f"conv {shape}"
        elif group == cin and w[0] == group:
            label = f"depthwise conv {'x'.join(map(str, kernel))}"
        elif group == cin:
            label = f"depthwise conv x{w[0] // group} multiplier"
        else:
            label = f"grouped conv (group {group})"
        if len(kernel) == 1 and group == 1:
            label = f"conv 1-D k{kernel[0]}"
        return NodeInfo(op, flops, label)
    if op == "ConvTranspose" and len(ins) > 1 and len(ins[1]) >= 3:
        x, w = ins[0], ins[1]
        flops = 2 * int(np.prod(x)) * int(np.prod(w[1:])) if x and all(x) else 0
        return NodeInfo(op, flops, "transposed conv")
    if op in ("MatMul", "Gemm", "MatMulInteger") and len(ins) > 1 and ins[0] and ins[1]:
        a, b = ins[0], ins[1]
        trans_a, trans_b = _attr(node, "transA", 0), _attr(node, "transB", 0)
        k = a[-2] if trans_a else a[-1]
        n = b[-2] if trans_b and op == "Gemm" else b[-1]
        m = size // n if n else 0
        flops = 2 * size * k
        weights = "const B" if node.input[1] in consts else "B"
        label = "matmul small-M" if m <= 64 and n * k >= 1 << 16 else "matmul"
        return NodeInfo(op, flops, f"{label} ({weights})")
    if op in ("LSTM", "GRU", "RNN") and len(ins) > 2 and ins[0] and ins[2]:
        seq, batch = ins[0][0], ins[0][1]
        w, r = ins[1], ins[2]  # [dirs, gates*H, I], [dirs, gates*H, H]
        flops = 2 * seq * batch * w[0] * w[1] * (w[2] + r[2])
        return NodeInfo(op, flops, op.lower())
    groups = {
        "softmax": ("Softmax", "LogSoftmax"),
        "normalization": ("LayerNormalization", "BatchNormalization", "InstanceNormalization",
                          "ReduceMean", "Pow", "Sqrt"),
        "pooling": ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"),
        "resize": ("Resize", "Upsample"),
        "concat/split": ("Concat", "Split", "Slice"),
        "data movement": ("Transpose", "Reshape", "Gather", "Expand", "Pad", "Flatten",
                          "Squeeze", "Unsqueeze", "Tile"),
    }  # fmt: skip
    for label, ops in groups.items():
        if op in ops:
            return NodeInfo(op, size, label)
    return NodeInfo(op, size, "element-wise")


# The order in which a fused call's nodes name its class: the heaviest kind of node wins.
CLASS_ORDER = (
    "conv", "depthwise", "grouped", "transposed", "matmul", "lstm", "gru", "rnn", "softmax",
    "normalization", "pooling", "resize", "concat", "data", "element",
)  # fmt: skip


def kernel_class(infos: list[NodeInfo], kernel: str) -> str:
    if not infos:
        return "layout transform" if "layout" in kernel else f"({kernel.split('_')[0]})"
    for prefix in CLASS_ORDER:
        labels = [i.label for i in infos if i.label.startswith(prefix)]
        if labels:
            return labels[0]
    return infos[0].label


# -- one model ----------------------------------------------------------------------------------


def call_bytes(factory, call) -> int:
    """Bytes of the call's buffer arguments (not its workspaces), shapes bound by its vars."""
    from tessera.runtime.graph_executor import nbytes_of

    info = factory.get_lib()[call["kernel"]].info
    bound = {v.name: int(x) for v, x in zip(info.vars, call.get("vars", ()), strict=False)}
    total = 0
    for p in info.params:
        if p.kind != "buffer" or p.workspace:
            continue
        shape = [d if isinstance(d, int) else bound.get(d, 0) for d in p.shape]
        total += nbytes_of(p.dtype, shape)
    return total


def audit_model(name: str, peak: float, bandwidth: float, repeat: int) -> list[Row]:
    from tessera.runtime import GraphModule, cpu

    case = zoo.SUITE[name]
    model = case.build()
    feeds = case.feeds(model, 0)
    shapes = run_shapes(model, feeds)
    consts = {i.name for i in model.graph.initializer}
    infos = {n.name: node_info(n, shapes, consts) for n in model.graph.node if n.name}
    factory = compile_model(model)
    module = GraphModule(factory["default"](cpu(0)))
    module.set_input(**feeds)
    profile = module.profile(repeat=repeat)
    calls = factory.plan["calls"]
    rows = []
    for p in profile:
        nodes = [infos[n] for n in p.nodes if n in infos]
        flops = sum(i.flops for i in nodes)
        nbytes = call_bytes(factory, calls[p.index])
        t_flop, t_mem = flops / (peak * 1e9), nbytes / (bandwidth * 1e9)
        roof = max(t_flop, t_mem)
        rows.append(Row(
            name, p.index, p.kernel, kernel_class(nodes, p.kernel),
            ", ".join(p.nodes[:2]) + (f" +{len(p.nodes) - 2}" if len(p.nodes) > 2 else ""),
            p.seconds, p.share, flops / 1e9, nbytes / 1e6,
            "compute" if t_flop >= t_mem else "memory",
            roof / p.seconds if p.seconds else 0.0,
        ))  # fmt: skip
    return rows


# -- report -------------------------------------------------------------------------------------

HEAD = ("| model | # | kernel class | ONNX nodes | µs | share | GFLOP/s | GB/s | bound "
        "| of roof |\n|---|---:|---|---|---:|---:|---:|---:|---|---:|")  # fmt: skip


def row_line(r: Row) -> str:
    return (
        f"| {r.model} | {r.index} | {r.kind} | {r.nodes} | {r.seconds * 1e6:.0f} "
        f"| {100 * r.share:.0f}% | {r.gflops:.1f} | {r.gbs:.1f} | {r.bound} "
        f"| {100 * r.of_roof:.1f}% |"
    )


def class_summary(rows: list[Row]) -> list[str]:
    """Per kernel class over all models: calls, time, and the time-weighted share of the roof
    (roof time / measured time, summed): which classes lose the most time to their roof."""
    by: dict[str, list[Row]] = {}
    for r in rows:
        by.setdefault(r.kind, []).append(r)
    lines = [
        "| kernel class | calls | models | ms in all models | ms lost to the roof "
        "| of roof (time-weighted) | worst call's share of roof |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    order = sorted(by, key=lambda k: -sum(r.seconds * (1 - min(1, r.of_roof)) for r in by[k]))
    for kind in order:
        group = by[kind]
        spent = sum(r.seconds for r in group)
        roof = sum(r.seconds * min(1.0, r.of_roof) for r in group)
        worst = min(group, key=lambda r: r.of_roof)
        lines.append(
            f"| {kind} | {len(group)} | {len({r.model for r in group})} | {spent * 1e3:.2f} "
            f"| {(spent - roof) * 1e3:.2f} | {100 * roof / spent:.0f}% "
            f"| {100 * worst.of_roof:.1f}% ({worst.model} #{worst.index}) |"
        )
    return lines


def report(rows, failures, peak, bandwidth, args, top: int) -> str:
    cliffs = [r for r in rows if r.share >= CLIFF_SHARE and r.of_roof < CLIFF_ROOF]
    lost = sorted(rows, key=lambda r: -(r.seconds * (1 - min(1.0, r.of_roof))))
    lines = [
        f"`.venv/bin/python bench/roofline.py {' '.join(args.argv)}`",
        "",
        f"- {time.strftime('%Y-%m-%d %H:%M %Z')}, {args.threads} thread(s); measured FMA peak "
        f"{peak:.0f} GFLOP/s, memory bandwidth (STREAM triad) {bandwidth:.1f} GB/s; "
        f"1-minute load average {args.load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at "
        "the end (a shared machine: other work competed for the cores)",
        "",
        "Per kernel class:",
        "",
        *class_summary(rows),
        "",
        f"Cliffs (at least {100 * CLIFF_SHARE:.0f}% of a model's kernel time, under "
        f"{100 * CLIFF_ROOF:.0f}% of the roof), most time lost first:",
        "",
        HEAD,
        *[row_line(r) for r in sorted(cliffs, key=lambda r: -r.seconds * (1 - r.of_roof))],
        "",
        f"The {top} calls that lose the most time to their roof:",
        "",
        HEAD,
        *[row_line(r) for r in lost[:top]],
    ]
    if failures:
        lines += ["", "Not audited (did not compile or run):", ""]
        lines += [f"- {k}: {v}" for k, v in failures.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(zoo.SUITE))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10, help="runs averaged per call")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--markdown", help="also write the report here")
    p.add_argument("--json", help="write every row as JSON here")
    args = p.parse_args(argv)
    args.argv, args.load = argv, os.getloadavg()
    from tessera.runtime import set_num_threads

    peak = measure_fma_peak(args.threads)
    bandwidth = measure_bandwidth(args.threads, kernels=("triad",))["triad"]
    set_num_threads(args.threads)
    rows, failures = [], {}
    for name in [m for m in args.models.split(",") if m]:
        print(f"{name} ...", file=sys.stderr, flush=True)
        try:
            rows += audit_model(name, peak, bandwidth, args.repeat)
        except Exception as e:  # a model tessera cannot compile yet: its error, then go on
            failures[name] = f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"
    text = report(rows, failures, peak, bandwidth, args, args.top)
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=0, default=float)
    return 0 if not math.isnan(peak) else 1


if __name__ == "__main__":
    sys.exit(main())
