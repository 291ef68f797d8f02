"""The knob `split` of the x86 "rows" strategy (softmax, log_softmax, layer_norm: Note [lane
split] in topi/nn/softmax.py): it reaches the computes' row split through the group's config,
every candidate builds correct kernels, and builds take the target's rule (lowering makes the
group's target current)."""

import random
import re

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import autotune, te
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.runtime import GraphModule, cpu
from tessera.target import Target
from tessera.topi import nn as topi_nn
from tessera.topi.nn.softmax import (
    LONG_ROW_STEPS,
    ROW_ACCUMULATORS,
    ROW_LANES,
    default_split,
    row_accumulators,
    row_split,
)
from tessera.topi.strategy import Config, computing_with

HOST = tessera.Target("llvm")


def _model(n: int):
    nodes = [
        helper.make_node("Softmax", ["x"], ["s"], axis=-1),
        helper.make_node("LogSoftmax", ["s"], ["l"], axis=-1),
        helper.make_node("LayerNormalization", ["l", "g", "b"], ["y"], axis=-1),
    ]
    rng = np.random.default_rng(n)
    g = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    return make_model(nodes, {"x": ((3, n), "float32")}, ["y"], {"g": g, "b": b}), g, b


def _reference(x, g, b):
    e = np.exp(x - x.max(-1, keepdims=True))
    s = e / e.sum(-1, keepdims=True)
    m = s.max(-1, keepdims=True)
    ls = s - m - np.log(np.exp(s - m).sum(-1, keepdims=True))
    mean = ls.mean(-1, keepdims=True)
    var = ls.var(-1, keepdims=True)
    return (ls - mean) / np.sqrt(var + 1e-5) * g + b


def _run(lib, x):
    m = GraphModule(lib["default"](cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_rule_is_the_old_literal_rule():
    for lanes in (4, 8, 16):
        for n in (1, 7, 64, 511, 4096, 1 << 15):
            steps = LONG_ROW_STEPS.value()
            old = max(1, min(ROW_ACCUMULATORS.value(), n // (lanes * steps)))
            assert row_accumulators(n, lanes) == old


def test_default_is_the_rule_over_the_targets_vectors():
    """The strategy's default is the rule over the target's vectors for the dtype the row is
    reduced in (layer_norm sums in float64), as the compute takes it with the target current;
    ROW_LANES only where no CPU target is."""
    import tessera.topi.x86.strategy  # noqa: F401  (registers the rows strategy)
    from tessera.topi.strategy import Task, Workload

    for target in (HOST, tessera.Target("llvm -mcpu=haswell")):
        for op, acc in (("nn.softmax", "float32"), ("nn.layer_norm", "float64")):
            for n in (7, 100, 768, 1000, 4099, 1 << 15):
                assert row_split(n, acc) == default_split(n, ROW_LANES)  # no target
                wl = Workload(op, (((2, n), "float32"),), (("axis", -1),), (False,), (2, n))
                with target:
                    assert Task(wl, "x86").default(target)["split"] == row_split(n, acc)


def _lowered_partials(target, n: int) -> dict[str, int]:
    """{partial buffer: its lanes} of the kernels a build of the softmax/layer_norm model
    lowers for `target` (lower_group, as compile_groups calls it: no target entered here)."""
    from tessera.driver import fused_function
    from tessera.graph_build.lower_group import distinct_groups, lower_group

    model, _, _ = _model(n)
    mod, params = from_onnx(model)
    func = fused_function(mod, target, params)
    found = {}
    for group in distinct_groups(func)[0]:
        text = str(lower_group(group, target))
        for name, lanes in re.findall(r"allocate (\w+_partial[\w.]*): \w+\[1, (\d+)\]", text):
            found[name] = int(lanes)
    return found


def test_build_lowers_with_the_targets_rule():
    """lower_group makes the group's target current: a build for AVX2 splits softmax rows
    into vectors of 8 float32 lanes and layer_norm's (float64 sums) into vectors of 4, by the
    rule; before, every build took ROW_LANES partials (64 for these rows)."""
    n = 4099
    assert Target.current() is None
    for target in (tessera.Target("llvm -mcpu=haswell"), HOST):
        partials = _lowered_partials(target, n)
        assert partials["softmax_max_partial"] == default_split(n, target.vector_lanes("float32"))
        moments = {v for k, v in partials.items() if k.startswith("layer_norm")}
        assert moments == {default_split(n, target.vector_lanes("float64"))}
    assert default_split(n, 8) != default_split(n, ROW_LANES)  # the test tells them apart


def test_config_reaches_the_row_split():
    x = te.placeholder((2, 1000), "float32", name="x")
    with HOST:
        default = topi_nn.softmax(x)
        with computing_with(Config("rows", split=48, stack_bytes=0)):
            three = topi_nn.softmax(x)

    def split(y):
        ops, seen = [y.op], set()
        while ops:
            op = ops.pop()
            if id(op) in seen:
                continue
            seen.add(id(op))
            if getattr(op, "tag", None) == "row_partial":
                return int(op.attrs["split"])
            ops.extend(t.op for t in getattr(op, "input_tensors", []))
        raise AssertionError("no row_partial stage")

    lanes = HOST.vector_lanes("float32")
    assert split(default) == default_split(1000, lanes)
    assert split(three) == 48


@pytest.mark.parametrize("n", [40, 1000, 4099])
def test_every_split_is_correct(n):
    model, g, b = _model(n)
    x = (np.random.default_rng(1).standard_normal((3, n)) * 3).astype(np.float32)
    want = _reference(x.astype(np.float64), g, b)  # layer_norm magnifies float32 rounding
    mod, params = from_onnx(model)
    tasks = [t for t in autotune.extract_tasks(mod, params, HOST) if t.key == "x86"]
    assert {t.workload.op for t in tasks} >= {"nn.softmax", "nn.layer_norm"}
    splits = {}
    for t in tasks:
        (knob,) = [k for k in t.implementations(HOST)["rows"].knobs if k.name == "split"]
        splits[t] = knob.candidates
    rng = random.Random(n)
    for k in range(max(len(c) for c in splits.values())):
        configs = {
            t: Config("rows", split=c[k % len(c)], stack_bytes=rng.choice((0, 65536)))
            for t, c in splits.items()
        }
        lib = tessera.build(mod, target=HOST, params=params, configs=configs)
        np.testing.assert_allclose(_run(lib, x), want, rtol=1e-3, atol=1e-3, err_msg=f"{k}")


def test_schedule_records_the_config():
    from tessera.topi.strategy import ConfigRecord
    from tessera.topi.x86.softmax import schedule_rows

    x = te.placeholder((2, 1000), "float32", name="x")
    config = Config("rows", split=32, stack_bytes=0)
    with HOST, computing_with(config):
        y = topi_nn.softmax(x)
    s = schedule_rows([y], HOST, config=config)
    assert ConfigRecord(config.as_attr()) in s.steps
