"""The knob `accumulators` of the x86 "rows" strategy (softmax, log_softmax, layer_norm: Note
[lane split] in topi/nn/softmax.py): it reaches the computes' row split through the group's
config, every candidate builds correct kernels, and the default is the rule it replaced."""

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
from tessera.topi.nn.softmax import LONG_ROW_STEPS, ROW_ACCUMULATORS, row_accumulators
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


def test_config_reaches_the_row_split():
    x = te.placeholder((2, 1000), "float32", name="x")
    with HOST:
        default = topi_nn.softmax(x)
        with computing_with(Config("rows", accumulators=3, stack_bytes=0)):
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
    assert split(default) == lanes * row_accumulators(1000, lanes)
    assert split(three) == lanes * 3


@pytest.mark.parametrize("n", [40, 1000, 4099])
def test_every_accumulator_count_is_correct(n):
    model, g, b = _model(n)
    x = (np.random.default_rng(1).standard_normal((3, n)) * 3).astype(np.float32)
    want = _reference(x.astype(np.float64), g, b)  # layer_norm magnifies float32 rounding
    mod, params = from_onnx(model)
    tasks = [t for t in autotune.extract_tasks(mod, params, HOST) if t.key == "x86"]
    assert {t.workload.op for t in tasks} >= {"nn.softmax", "nn.layer_norm"}
    counts = set()
    for t in tasks:
        space = t.implementations(HOST)["rows"]
        (knob,) = [k for k in space.knobs if k.name == "accumulators"]
        assert t.default(HOST)["accumulators"] == row_accumulators(n, _lanes(t))
        counts |= set(knob.candidates)
    rng = random.Random(n)
    for a in sorted(counts):
        configs = {}
        for t in tasks:
            space = t.implementations(HOST)["rows"]
            (knob,) = [k for k in space.knobs if k.name == "accumulators"]
            pick = a if a in knob.candidates else rng.choice(knob.candidates)
            configs[t] = Config("rows", accumulators=pick, stack_bytes=rng.choice((0, 65536)))
        lib = tessera.build(mod, target=HOST, params=params, configs=configs)
        np.testing.assert_allclose(_run(lib, x), want, rtol=1e-3, atol=1e-3, err_msg=f"{a}")


def _lanes(task) -> int:
    dtype = "float64" if task.workload.op == "nn.layer_norm" else "float32"
    return HOST.vector_lanes(dtype)


def test_schedule_records_the_config():
    from tessera.topi.strategy import ConfigRecord
    from tessera.topi.x86.softmax import schedule_rows

    x = te.placeholder((2, 1000), "float32", name="x")
    config = Config("rows", accumulators=2, stack_bytes=0)
    with HOST, computing_with(config):
        y = topi_nn.softmax(x)
    s = schedule_rows([y], HOST, config=config)
    assert ConfigRecord(config.as_attr()) in s.steps
