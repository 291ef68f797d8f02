"""Note [k unrolling] (topi/x86/dense.py): knob `unroll_k` of the x86 "blocked" and "packed"
products defaults to today's loop (1), is valid only where it divides the k block, reaches the
generated code, and every value computes what ONNX Runtime does with the other knobs random
(a constant weight: packed; two inputs: blocked; a batch of matrices; K odd, small, large)."""

import random

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import autotune
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort
from tessera.runtime import GraphModule, cpu
from tessera.topi.strategy import Config
from tessera.transform import PassContext

HOST = tessera.Target("llvm")
R = np.random.default_rng(5)


def gemm_model(k):
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["d"]),  # constant weight: packed
        helper.make_node("Relu", ["d"], ["r"]),
        helper.make_node("MatMul", ["r", "b"], ["y"]),  # two inputs, batched: blocked
    ]
    inits = {"w": (R.standard_normal((k, 40)) / np.sqrt(k)).astype(np.float32)}
    inputs = {"x": ((2, 13, k), "float32"), "b": ((2, 40, 19), "float32")}
    return make_model(nodes, inputs, ["y"], inits)


def products(k):
    model = gemm_model(k)
    mod, params = from_onnx(model)
    with PassContext(opt_level=3):
        tasks = autotune.extract_tasks(mod, params, HOST)
    feeds = {n: R.standard_normal(s).astype("float32") for n, s in
             [("x", (2, 13, k)), ("b", (2, 40, 19))]}  # fmt: skip
    return model, mod, params, tasks, feeds


def build_run(mod, params, configs, feeds):
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target=HOST, params=params, configs=configs)
    m = GraphModule(lib["default"](cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return m.get_output(0).numpy(), lib.get_source()


def with_unroll(task, unroll, rng):
    """The task's default implementation with random other knobs and `unroll_k` set (None
    when no valid config of it has that value)."""
    impl = task.default(HOST).impl
    space = task.implementations(HOST)[impl]
    for _ in range(200):
        values = dict(space.sample(rng), unroll_k=unroll)
        if space.valid(values):
            return Config(impl, values)
    return None


@pytest.mark.parametrize("k", [9, 64, 200])
def test_every_unrolling_computes_right_with_random_other_knobs(k):
    model, mod, params, tasks, feeds = products(k)
    expected = run_ort(model, feeds)[0]
    gemms = [t for t in tasks if "unroll_k" in t.default(HOST)]
    assert {t.default(HOST).impl for t in gemms} == {"packed", "blocked"}
    assert all(t.default(HOST)["unroll_k"] == 1 for t in gemms)
    rng = random.Random(k)
    for unroll in (1, 2, 4, 8):
        configs = {t: with_unroll(t, unroll, rng) for t in gemms}
        configs = {t: c for t, c in configs.items() if c is not None}
        assert configs or unroll > 1
        got, _ = build_run(mod, params, configs, feeds)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=f"{unroll}")


def test_unroll_k_must_divide_the_k_block_and_reaches_the_code():
    _, mod, params, tasks, feeds = products(64)
    packed = next(t for t in tasks if t.default(HOST).impl == "packed")
    default = packed.default(HOST)
    divides = Config("packed", {**default.knobs(), "kc": 8, "unroll_k": 4})
    assert packed.valid(divides, HOST)  # 8 % 4 == 0
    assert not packed.valid(Config("packed", {**default.knobs(), "kc": 64, "unroll_k": 3}), HOST)
    sources = set()
    for unroll in (1, 4):
        config = Config("packed", {**default.knobs(), "unroll_k": unroll})
        assert packed.valid(config, HOST)
        sources.add(build_run(mod, params, {packed: config}, feeds)[1])
    assert len(sources) == 2
