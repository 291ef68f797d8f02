"""Benchmark: one grouped conv alone (conv + bias + relu, as the graph compiler builds it), its
default config against configs with knobs changed (and, where the default shares windows,
the tile of the rule before, unshared: Note [shared windows]), the dense conv of the same
FLOPs (the group's channels in, all channels out) and ONNX Runtime's conv, in turns.

    .venv/bin/python bench/grouped_conv.py [--shapes 272:272:4:14,136:136:4:28]
        [--set in_block=4 --set shared_window=False,True] [--threads 1] [--rounds 7]
    .venv/bin/python bench/grouped_conv.py --model shufflenet [--seconds 60] [--threads 2]

A shape is in:out:groups:size[:kernel[:stride]]. `--set knob=v1,v2` adds the default config
with that knob set to each value (several --set: every combination; invalid ones skipped).
Per shape, a row per variant: the kernel's median microseconds (the conv's call alone, from the
executor's per-call timing; ORT: the whole session run), GFLOP/s of the grouped FLOPs, and its
ratio to the default. With `--model`, a zoo model built with the defaults against the same
model with its grouped convs' tiles as the rule chose them before windows could be shared
(unshared, Note [shared windows]), and the defaults again (A/A), in turns. Not a test:
nothing asserts a time; read ratios, and the load it prints.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conv2d import conv_model, flops  # noqa: E402

import tessera  # noqa: E402
from tessera import autotune  # noqa: E402
from tessera.topi.strategy import Config  # noqa: E402


def parse_shape(text: str) -> tuple:
    parts = [int(p) for p in text.split(":")]
    ic, oc, groups, size = parts[:4]
    k = parts[4] if len(parts) > 4 else 1
    stride = parts[5] if len(parts) > 5 else 1
    x = (1, ic, size, size)
    w = (oc, ic // groups, k, k)
    pad = [k // 2] * 4
    attrs = (("dilation", [1, 1]), ("groups", groups), ("padding", pad), ("strides", [stride] * 2))
    return x, w, attrs


def conv_task(mod, target):
    contexts: dict = {}
    with tessera.transform.PassContext(opt_level=3):
        tasks = autotune.extract_tasks(mod, None, target, contexts=contexts)
    task = next(t for t in tasks if t.workload.op == "nn.conv2d")
    return task, task.default(target, contexts.get(task))


def kernel_runner(mod, target, x, task=None, config=None):
    """A function timing the conv's call once (seconds)."""
    configs = {task: config} if config is not None else None
    with tessera.transform.PassContext(opt_level=3, config={"tuning.pretuned": False}):
        lib = tessera.build(mod, target=target, configs=configs)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    rows = m.profile(repeat=2)
    index = next(r.index for r in rows if "conv2d" in r.kernel)
    return lambda: m._ex.time_calls()[index], m


def ort_runner(x_shape, w_shape, attrs, consts, x):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    a = dict(attrs)
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["c"], group=a["groups"], pads=a["padding"],
        strides=a["strides"], dilations=a["dilation"],
    )  # fmt: skip
    relu = helper.make_node("Relu", ["c"], ["y"])
    graph = helper.make_graph(
        [node, relu], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(consts["w"], "w"),
         numpy_helper.from_array(consts["b"].reshape(-1), "b")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = tessera.runtime.get_num_threads()
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])

    def run():
        t0 = time.perf_counter()
        sess.run(None, {"x": x})
        return time.perf_counter() - t0

    return run


def variants(task, default, target, sets: list[str]) -> list[tuple[str, Config]]:
    names, values = [], []
    for s in sets:
        name, _, vals = s.partition("=")
        names.append(name)
        values.append([_value(v) for v in vals.split(",")])
    out = []
    for combo in itertools.product(*values):
        knobs = dict(zip(names, combo, strict=True))
        config = Config(default.impl, {**default.knobs(), **knobs})
        if config != default and task.valid(config, target):
            out.append((" ".join(f"{k}={v}" for k, v in knobs.items()), config))
    return out


def _value(text: str):
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        return text


def unshared_config(task, default, target) -> Config | None:
    """The config of a grouped conv whose default shares windows with the tile the rule
    chooses without sharing (the rule before Note [shared windows]); None when it shares none."""
    from tessera.topi.x86.conv2d import choose_conv_tile
    from tessera.topi.x86.cpu import fma_chains, vector_registers

    if not default.get("shared_window"):
        return None
    ow, ocb = task.workload.output[3], task.workload.output[1] // default["out_block"]
    regs, chains = vector_registers(target), fma_chains(target)
    tile = choose_conv_tile(ow, ocb, regs, False, chains, grouped=True)
    knobs = {"ow_block": tile.ow_block, "oc_vectors": tile.oc_vectors, "shared_window": False}
    return Config(default.impl, {**default.knobs(), **knobs})


def unshared_configs(target, tasks, contexts) -> dict:
    """{task: unshared_config} of a model's grouped convs that share windows by default."""
    configs = {t: unshared_config(t, t.default(target, contexts.get(t)), target) for t in tasks}
    return {t: c for t, c in configs.items() if c is not None}


def model_in_turns(name: str, target, seconds: float) -> None:
    from headroom import in_model, model_tasks
    from zoo import SUITE

    model, mod, params, tasks, contexts, _ = model_tasks(name, target)
    old = unshared_configs(target, tasks, contexts)
    print(f"{name}: {len(old)} grouped tasks share windows by default")
    in_model(SUITE[name], model, mod, params, target, old, seconds, label="unshared")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="272:272:4:14,136:136:4:28,544:544:4:7")
    p.add_argument("--set", action="append", default=[], help="knob=v1,v2 (repeatable)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--no-ort", action="store_true")
    p.add_argument("--target", default="llvm")
    p.add_argument("--model", help="a zoo model: defaults vs unshared windows, in turns")
    p.add_argument("--seconds", type=float, default=60.0)
    args = p.parse_args(argv)
    tessera.runtime.set_num_threads(args.threads)
    target = tessera.Target(args.target)
    print(f"{args.threads} thread(s), target {target}, load {os.getloadavg()[0]:.1f}")
    if args.model:
        model_in_turns(args.model, target, args.seconds)
        return 0
    for text in args.shapes.split(","):
        x_shape, w_shape, attrs = parse_shape(text)
        mod, consts = conv_model(x_shape, w_shape, attrs)
        x = np.random.default_rng(1).standard_normal(x_shape).astype("f4")
        task, default = conv_task(mod, target)
        runners = {f"default {dict(default.knobs())}": kernel_runner(mod, target, x)[0]}
        configs = variants(task, default, target, args.set)
        if unshared_config(task, default, target) is not None:
            configs.append(("unshared (the rule before)", unshared_config(task, default, target)))
        for label, config in configs:
            runners[label] = kernel_runner(mod, target, x, task, config)[0]
        groups = dict(attrs)["groups"]
        if groups > 1:  # the dense conv of the same FLOPs: a group's channels in, all out
            dx = (1, w_shape[1], *x_shape[2:])
            dattrs = tuple((k, 1 if k == "groups" else v) for k, v in attrs)
            dmod, _ = conv_model(dx, w_shape, dattrs)
            dxv = np.random.default_rng(1).standard_normal(dx).astype("f4")
            runners[f"dense {w_shape[1]}->{w_shape[0]}"] = kernel_runner(dmod, target, dxv)[0]
        if not args.no_ort:
            runners["onnxruntime"] = ort_runner(x_shape, w_shape, attrs, consts, x)
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(args.rounds):
            for name, fn in runners.items():
                fn()
                times[name].append(float(np.median([fn() for _ in range(5)])))
        f = flops(x_shape, w_shape, attrs)
        med = {k: float(np.median(v)) for k, v in times.items()}
        base = next(iter(med.values()))
        print(f"\n{list(x_shape)} {list(w_shape)} groups={groups}, load {os.getloadavg()[0]:.1f}")
        for name, t in med.items():
            print(f"  {t * 1e6:9.1f} us {f / t / 1e9:6.1f} GFLOP/s {t / base:6.3f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
