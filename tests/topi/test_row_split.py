"""The knob `split` of the x86 "rows" strategy (softmax, log_softmax, layer_norm: Note [lane
split] in topi/nn/softmax.py): it reaches the computes' row split through the group's config,
every candidate builds correct kernels, and the default is the split builds used before."""

import random

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import autotune, te
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.runtime import GraphModule, cpu
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
            old = max(1, min(ROW_ACCUMULATORS, n // (lanes * LONG_ROW_STEPS)))
            assert row_accumulators(n, lanes) == old


def test_build_default_is_the_split_lowering_computed_before():
    """Lowering computes with no current target: the split it used is the rule over ROW_LANES,
    on every target and dtype; the strategy's default is that split."""
    import tessera.topi.x86.strategy  # noqa: F401  (registers the rows strategy)
    from tessera.topi.strategy import Task, Workload

    for target in (HOST, tessera.Target("llvm -mcpu=haswell")):
        for op in ("nn.softmax", "nn.layer_norm"):
            for n in (7, 100, 768, 1000, 4099, 1 << 15):
                assert row_split(n, "float32") == default_split(n, ROW_LANES)  # no target
                wl = Workload(op, (((2, n), "float32"),), (("axis", -1),), (False,), (2, n))
                assert Task(wl, "x86").default(target)["split"] == row_split(n, "float32")


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
