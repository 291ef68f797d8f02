"""Note [conv reduction order] (topi/x86/conv2d.py): the direct conv's knobs `reduce_order`
and `unroll_window` (in the space where the kernel has several taps) and `unroll_block` (every
direct conv) default to today's schedule, reach the generated code, and every value computes
what ONNX Runtime does, with the other knobs random (padded, strided, dilated, grouped, a
3-channel stem, a 1xN kernel, a 1x1)."""

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
R = np.random.default_rng(3)


def f32(*shape):
    return (R.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)


def conv_model():
    """Direct convs of several taps: a 3-channel strided stem, a padded 3x3, a dilated 3x3, a
    grouped 3x3, a 1x3 kernel, and a 1x1 (one tap: no knob)."""
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[2, 2, 2, 2], dilations=[2, 2]),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Conv", ["c3", "w4"], ["c4"], pads=[0, 1, 0, 1]),
        helper.make_node("Conv", ["c4", "w5"], ["y"]),
    ]
    inits = {
        "w0": f32(16, 3, 3, 3),
        "w1": f32(16, 16, 3, 3),
        "w2": f32(24, 16, 3, 3),
        "w3": f32(32, 12, 3, 3),
        "w4": f32(16, 32, 1, 3),
        "w5": f32(8, 16, 1, 1),
    }
    return make_model(nodes, {"x": ((1, 3, 19, 17), "float32")}, ["y"], inits)


def run(lib, feeds):
    m = GraphModule(lib["default"](cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return m.get_output(0).numpy()


@pytest.fixture(scope="module")
def convs():
    model = conv_model()
    mod, params = from_onnx(model)
    contexts: dict = {}
    with PassContext(opt_level=3):
        tasks = autotune.extract_tasks(mod, params, HOST, contexts=contexts)
    feeds = {"x": np.random.default_rng(0).standard_normal((1, 3, 19, 17)).astype("float32")}
    return model, mod, params, tasks, contexts, feeds, run_ort(model, feeds)[0]


def direct_config(task, contexts):
    """The task's default, or its first direct config where another implementation is the
    default (Winograd may take the 3x3 conv)."""
    default = task.default(HOST, contexts.get(task))
    if default.impl == "direct_nchwc":
        return default
    return next(c for c in task.configs(HOST) if c.impl == "direct_nchwc")


def test_the_knobs_are_in_the_space_of_kernels_with_taps_and_default_to_todays_schedule(convs):
    _, _, _, tasks, contexts, _, _ = convs
    with_taps = [t for t in tasks if t.workload.shape(1)[2:] != (1, 1)]
    one_tap = [t for t in tasks if t.workload.shape(1)[2:] == (1, 1)]
    assert len(with_taps) == 5 and len(one_tap) == 1
    for task in with_taps:
        config = direct_config(task, contexts)
        assert config["reduce_order"] == "channels" and config["unroll_window"] is False
        assert config["unroll_block"] is False
    knobs = {k.name for k in one_tap[0].implementations(HOST)["direct_nchwc"].knobs}
    assert not {"reduce_order", "unroll_window"} & knobs
    assert "unroll_block" in knobs and direct_config(one_tap[0], contexts)["unroll_block"] is False


@pytest.mark.parametrize("order", ["channels", "taps"])
@pytest.mark.parametrize("unroll", [False, True])
def test_every_order_and_unrolling_computes_right_with_random_other_knobs(convs, order, unroll):
    model, mod, params, tasks, contexts, feeds, expected = convs
    rng = random.Random(f"{order}{unroll}")
    configs = {}
    for task in tasks:
        taps = task.workload.shape(1)[2:] != (1, 1)
        space = task.implementations(HOST)["direct_nchwc"]
        for _ in range(100):  # the other knobs random, these set
            values = dict(space.sample(rng), unroll_block=unroll)
            if taps:
                values.update(reduce_order=order, unroll_window=not unroll)
            if space.valid(values):
                break
        configs[task] = Config("direct_nchwc", values)
    with PassContext(opt_level=3):
        lib = tessera.build(mod, target=HOST, params=params, configs=configs)
    np.testing.assert_allclose(run(lib, feeds), expected, rtol=1e-3, atol=1e-4)


def test_the_knobs_reach_the_code(convs):
    """Each knob changes the kernel of a 16 -> 16 3x3 conv (not a knob the schedule ignores)."""
    _, mod, params, tasks, contexts, _, _ = convs
    conv = next(t for t in tasks if t.workload.shape(1) == (16, 16, 3, 3))
    default = direct_config(conv, contexts)
    sources = set()
    variants = [
        {"reduce_order": "taps"}, {"unroll_window": True}, {"unroll_block": True}, {},
    ]  # fmt: skip
    for knobs in variants:
        config = Config("direct_nchwc", {**default.knobs(), **knobs})
        with PassContext(opt_level=3):
            lib = tessera.build(mod, target=HOST, params=params, configs={conv: config})
        sources.add(lib.get_source())
    assert len(sources) == len(variants)
