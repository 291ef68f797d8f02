"""Benchmark: every distinct convolution of a model (default: ResNet-50), compiled alone as the
graph compiler compiles it (alter_layout to NCHW[x]c, conv + bias + relu in one kernel), in
GFLOP/s and as a share of the machine's measured FMA peak.

    .venv/bin/python bench/conv2d.py [--model resnet50] [--threads 1] [--repeat 7] [--target llvm]
    .venv/bin/python bench/conv2d.py --model /tmp/zoo/mobilenet_v2.onnx   # a saved model
    .venv/bin/python bench/conv2d.py --only "[1, 512, 7, 7]" --cold   # some convs, weights cold

Shapes come from the model (the ONNX frontend's graph), not from a table. Prints a markdown
table: the conv's shape, the register tile the rules chose, ms (median of `repeat`), GFLOP/s,
% of peak, and the FMA loop of its assembly (FMAs, stack accesses). This is a benchmark, not a
test: the machine is shared and noisy, so nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fma_peak import measure_fma_peak  # noqa: E402

import tessera  # noqa: E402
from tessera import models  # noqa: E402
from tessera.graph import parse  # noqa: E402
from tessera.ir.module import IRModule  # noqa: E402
from tessera.topi.x86.asm import describe_fma_loops  # noqa: E402
from tessera.topi.x86.conv2d import choose_conv_tile  # noqa: E402
from tessera.topi.x86.cpu import fma_chains, vector_registers  # noqa: E402
from tessera.topi.x86.strategy import channel_block, output_block  # noqa: E402

FLUSH_BYTES = 128 << 20  # more than any L3 the cold runs meet


def model_convs(name: str) -> list[tuple]:
    """(x shape, w shape, attrs, count) of each distinct nn.conv2d of the model."""
    model = onnx.load(name) if name.endswith(".onnx") else models.light_model(name)
    shapes = {k: v.shape for k, v in models.random_inputs(model).items()}
    mod, _ = tessera.frontend.from_onnx(model, shapes)
    seen: dict[tuple, int] = {}
    for call in mod["main"].body:
        if call.op.name == "nn.conv2d":
            x, w = call.inputs
            key = (x.type.shape, w.type.shape, tuple(sorted(call.attrs.items())))
            seen[key] = seen.get(key, 0) + 1
    return [(*k, n) for k, n in seen.items()]


def conv_model(x_shape, w_shape, attrs) -> tuple[IRModule, dict]:
    a = dict(attrs)
    text = (
        f"def main(%x: f32[{', '.join(map(str, x_shape))}]) {{\n"
        f"  %w = constant(...) : f32[{', '.join(map(str, w_shape))}];\n"
        f"  %b = constant(...) : f32[{w_shape[0]}, 1, 1];\n"
        f"  %1 = nn.conv2d(%x, %w, strides={list(a['strides'])}, padding={list(a['padding'])}, "
        f"dilation={list(a['dilation'])}, groups={a.get('groups', 1)});\n"
        "  %2 = add(%1, %b); %3 = nn.relu(%2); return %3 }"
    )
    rng = np.random.default_rng(0)
    consts = {
        "w": rng.standard_normal(w_shape).astype("f4"),
        "b": rng.standard_normal((w_shape[0], 1, 1)).astype("f4"),
    }
    return IRModule({"main": parse(text, constants=consts)}), consts


def flops(x_shape, w_shape, attrs) -> float:
    a = dict(attrs)
    oh = (x_shape[2] + a["padding"][0] + a["padding"][2] - w_shape[2]) // a["strides"][0] + 1
    ow = (x_shape[3] + a["padding"][1] + a["padding"][3] - w_shape[3]) // a["strides"][1] + 1
    return 2.0 * x_shape[0] * w_shape[0] * oh * ow * w_shape[1] * w_shape[2] * w_shape[3]


def time_kernel(lib, x, repeat: int, cold: bool = False) -> float:
    """Median seconds of the conv kernel; `cold`: each run after the caches are flushed, as the
    weights of a model too large for the caches come from memory (its activations do not)."""
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    rows = m.profile(repeat=3)
    conv = next(r for r in rows if "conv2d" in r.kernel)  # not the layout transforms
    samples = []
    flush = np.zeros(FLUSH_BYTES // 8) if cold else None
    for _ in range(repeat):
        if cold:
            for _ in range(5):
                flush += 1.0
                samples.append(m._ex.time_calls()[conv.index])
        else:
            samples.append(m.profile(repeat=5)[conv.index].seconds)
    return float(np.median(samples))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="a light model's name or an .onnx file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--only", default="", help="only convs whose 'x w stride' row contains this")
    ap.add_argument("--cold", action="store_true", help="flush the caches before each run")
    ap.add_argument(
        "--no-winograd", action="store_true", help="direct convs only (alter_layout.winograd)"
    )
    args = ap.parse_args(argv)
    tessera.runtime.set_num_threads(args.threads)
    target = tessera.Target(args.target)
    lanes, regs = target.vector_lanes("float32"), vector_registers(target)
    peak = measure_fma_peak(args.threads, runs=7)
    print(
        f"{args.model} convs, target {target}, {args.threads} thread(s), FMA peak {peak:.0f} "
        "GFLOP/s\n"
    )
    print("| x | w | stride | count | tile (ow x oc vectors) | ms | GFLOP/s | of peak | FMA loop |")
    print("|---|---|---|---:|---|---:|---:|---:|---|")
    total_t = total_f = 0.0
    for x_shape, w_shape, attrs, count in model_convs(args.model):
        row = f"{list(x_shape)} {list(w_shape)} {dict(attrs)['strides'][0]}"
        if args.only not in row:
            continue
        mod, _ = conv_model(x_shape, w_shape, attrs)
        config = {"alter_layout.winograd": not args.no_winograd}
        with tessera.transform.PassContext(opt_level=3, config=config):
            lib = tessera.build(mod, target=target)
        x = np.random.default_rng(1).standard_normal(x_shape).astype("f4")
        seconds = time_kernel(lib, x, args.repeat, args.cold)
        f = flops(x_shape, w_shape, attrs)
        total_t, total_f = total_t + seconds * count, total_f + f * count
        a = dict(attrs)
        ob, padded = output_block(w_shape[0], lanes)  # alter_layout's rule (channel padding)
        ow = (x_shape[3] + a["padding"][1] + a["padding"][3] - w_shape[3]) // a["strides"][1] + 1
        depthwise = a.get("groups", 1) > 1 and a["groups"] == x_shape[1] == w_shape[0]
        if depthwise:  # (a depthwise conv of an unpadded input keeps its channels)
            ob, padded = channel_block(w_shape[0], lanes), w_shape[0]
        tile = choose_conv_tile(ow, padded // ob, regs, depthwise, fma_chains(target))
        asm = describe_fma_loops(lib.get_source("asm"))
        print(
            f"| {list(x_shape)} | {list(w_shape)} | {a['strides'][0]} | {count} | "
            f"{tile.ow_block} x {tile.oc_vectors} | {seconds * 1e3:.3f} | {f / seconds / 1e9:.0f} "
            f"| {f / seconds / 1e9 / peak:.0%} | {asm} |",
            flush=True,
        )
    if not total_t:
        print(f"\nno conv matches --only {args.only!r}")
        return 1
    print(
        f"\nall convs: {total_t * 1e3:.1f} ms, {total_f / total_t / 1e9:.0f} GFLOP/s "
        f"({total_f / total_t / 1e9 / peak:.0%} of peak)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
