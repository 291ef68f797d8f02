"""The x86 strategies: their defaults are the hand rules the schedules apply without a config
(the knobs recorded by the schedule equal the strategy's default), spaces are valid and
enumerable, and the layout hooks give what the kernels take."""

import random

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.te.steps import steps_from_json
from tessera.topi.strategy import Config, ConfigRecord, Task, Workload
from tessera.topi.x86 import conv2d as x86_conv2d
from tessera.topi.x86 import dense as x86_dense
from tessera.topi.x86 import winograd as x86_winograd
from tessera.topi.x86.strategy import MIN_BLOCK_BITS, min_block

TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"]


def conv_task(x, w, strides=(1, 1), padding=(1, 1, 1, 1), groups=1):
    kh, kw = w[2:]
    oh = (x[2] + padding[0] + padding[2] - kh) // strides[0] + 1
    ow = (x[3] + padding[1] + padding[3] - kw) // strides[1] + 1
    attrs = (("dilation", (1, 1)), ("groups", groups), ("padding", padding), ("strides", strides))
    inputs = ((x, "float32"), (w, "float32"))
    return Task(Workload("nn.conv2d", inputs, attrs, (False, True), (x[0], w[0], oh, ow)), "cpu")


CONVS = [
    dict(x=(1, 64, 56, 56), w=(64, 64, 3, 3)),  # winograd F(4x4) on most CPUs
    dict(x=(1, 512, 7, 7), w=(512, 512, 3, 3)),  # stays direct, prefetch off
    dict(x=(1, 1024, 14, 14), w=(2048, 1024, 1, 1), strides=(2, 2), padding=(0, 0, 0, 0)),
    dict(x=(1, 512, 7, 7), w=(2048, 512, 1, 1), padding=(0, 0, 0, 0)),  # prefetch on
    dict(x=(1, 3, 224, 224), w=(64, 3, 7, 7), strides=(2, 2), padding=(3, 3, 3, 3)),
    dict(x=(1, 32, 28, 28), w=(32, 1, 3, 3), groups=32),  # depthwise, two tiles a row
    dict(x=(1, 96, 14, 14), w=(96, 1, 3, 3), groups=96),
    dict(x=(1, 64, 14, 14), w=(64, 16, 3, 3), groups=4),  # grouped
    dict(x=(1, 24, 14, 14), w=(1000, 24, 1, 1), padding=(0, 0, 0, 0)),  # padded channels
]


def schedule_of(task, config, target, give_config=False):
    """Build the te compute the layout hook asks for and schedule it, without a config (the
    knobs the schedule's rules choose) or with it."""
    impl = task.strategy.get(config.impl)
    wl = task.workload
    w = np.zeros(wl.shape(1), "float32")
    plan = impl.layout(wl, config, {}, target, w)
    attrs = dict(plan["attrs"])
    attrs.pop("config")
    ib = plan["in_block"]
    n, c, h, wd = wl.shape(0)
    x = te.placeholder((n, -(-c // ib), h, wd, ib), name="x")
    u = te.placeholder(plan["weight"].shape, name="w")
    if config.impl == "winograd":
        y = x86_winograd.conv2d_winograd_nchwc(
            x, u, attrs["padding"], attrs["tile"], attrs["channels"], attrs["out_block"],
            attrs["rows"],
        )  # fmt: skip
        s = x86_winograd.schedule_conv2d_winograd_nchwc([y], target, config)
    else:
        y = x86_conv2d.conv2d_nchwc(
            x, u, attrs["strides"], attrs["padding"], attrs["dilation"], attrs["groups"],
            attrs.get("share", 1),
        )  # fmt: skip
        s = x86_conv2d.schedule_conv2d_nchwc([y], target, config if give_config else None)
    return s


def recorded(s) -> Config:
    (rec,) = [st for st in s.steps if isinstance(st, ConfigRecord)]
    return Config.from_attr(rec.values)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("conv", CONVS, ids=lambda c: f"{c['x']}x{c['w']}")
def test_conv_default_is_the_schedules_rule(conv, target):
    target = tessera.Target(target)
    task = conv_task(**conv)
    default = task.default(target)
    assert task.valid(default, target)
    if default.impl == "nchw":
        return  # the generic NCHW schedule has no knobs
    assert recorded(schedule_of(task, default, target)) == default


@pytest.mark.parametrize("target", TARGETS)
def test_random_conv_configs_are_valid_and_scheduled_with_their_knobs(target):
    target = tessera.Target(target)
    rng = random.Random(0)
    for conv in CONVS:
        task = conv_task(**conv)
        for _ in range(3):
            config = task.sample(target, rng)
            assert task.valid(config, target)
            if config.impl == "nchw":
                continue
            impl = task.strategy.get(config.impl)
            plan = impl.layout(task.workload, config, {}, target, np.zeros(conv["w"], "f4"))
            assert plan["attrs"]["config"] == config.as_attr()
            assert plan["out_block"] == config.get("out_block", plan["in_block"])
            assert recorded(schedule_of(task, config, target, give_config=True)) == config


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(1, 768, 3072), (128, 768, 768), (1, 544, 1000), (7, 9, 13)])
def test_packed_dense_default_is_the_schedules_rule(shape, target):
    target = tessera.Target(target)
    m, k, n = shape
    wl = Workload("nn.dense", (((m, k), "float32"), ((n, k), "float32")), (), (False, True), (m, n))
    task = Task(wl, "cpu")
    default = task.default(target)
    assert default.impl == "packed"
    assert default["nv"] * target.vector_lanes("float32") == x86_dense.panel_width(target, n)
    plan = task.strategy.get("packed").layout(wl, default, {}, target, np.zeros((n, k), "f4"))
    x = te.placeholder((m, k), name="x")
    wp = te.placeholder(plan["weight"].shape, name="wp")
    s = x86_dense.schedule_dense_packed([x86_dense.dense_packed(x, wp, n)], target)
    assert recorded(s) == default


def test_defaults_cover_both_prefetch_choices():
    target = tessera.Target("llvm -mcpu=skylake-avx512")
    defaults = [conv_task(**c).default(target) for c in CONVS]
    assert {d.get("prefetch") for d in defaults} >= {True, False}
    assert {d.get("unroll_tiles") for d in defaults} >= {True, False}
    assert {d.impl for d in defaults} >= {"winograd", "direct_nchwc", "depthwise_nchwc"}


def test_space_enumerates_samples_and_hashes_without_building():
    task = conv_task(x=(1, 64, 56, 56), w=(64, 64, 3, 3))
    target = tessera.Target("llvm -mcpu=skylake-avx512")
    configs = list(task.configs(target))
    assert len(configs) == len(set(configs)) > 50
    assert {c.impl for c in configs} == {"nchw", "direct_nchwc", "winograd"}
    rng = random.Random(1)
    assert all(task.valid(task.sample(target, rng), target) for _ in range(20))
    assert task.digest() == conv_task(x=(1, 64, 56, 56), w=(64, 64, 3, 3)).digest()


def test_min_block_is_a_256_bit_vector_or_the_whole_narrower_one():
    assert MIN_BLOCK_BITS == 256
    assert min_block(tessera.Target("llvm -mcpu=skylake-avx512")) == 8
    assert min_block(tessera.Target("llvm -mcpu=haswell")) == 8
    assert min_block(tessera.Target("llvm -mcpu=x86-64")) == 4


def test_config_record_is_a_schedule_step_that_replays():
    x = te.placeholder((4, 64), name="x")
    wp = te.placeholder((4, 64, 16), name="wp")
    s = x86_dense.schedule_dense_packed([x86_dense.dense_packed(x, wp, 64)], tessera.Target("llvm"))
    steps = steps_from_json(s.steps_json())
    assert any(isinstance(st, ConfigRecord) for st in steps)
    assert "config(impl=packed" in "\n".join(str(st) for st in s.steps)


POOLS = [
    ("nn.avg_pool2d", (1, 64, 56, 56), (3, 3), (1, 1), (1, 1, 1, 1)),
    ("nn.max_pool2d", (1, 64, 112, 112), (3, 3), (2, 2), (1, 1, 1, 1)),
    ("nn.avg_pool2d", (1, 256, 27, 27), (3, 3), (1, 1), (1, 1, 1, 1)),
    ("nn.max_pool2d", (1, 32, 13, 13), (2, 2), (2, 2), (0, 0, 0, 0)),
]


@pytest.mark.parametrize("op, x, size, strides, padding", POOLS)
def test_pool_default_is_the_schedules_rule(op, x, size, strides, padding):
    from tessera.topi.x86 import pooling

    target = tessera.Target("llvm -mcpu=skylake-avx512")
    oh = (x[2] + padding[0] + padding[2] - size[0]) // strides[0] + 1
    ow = (x[3] + padding[1] + padding[3] - size[1]) // strides[1] + 1
    attrs = (("padding", padding), ("pool_size", size), ("strides", strides))
    wl = Workload(op, ((x, "float32"),), attrs, (False,), (x[0], x[1], oh, ow))
    task = Task(wl, "cpu")
    context = {"in_block": 16}
    default = task.default(target, context)
    assert default.impl == "nchwc" and task.default(target).impl == "nchw"
    xb = te.placeholder((x[0], x[1] // 16, x[2], x[3], 16), name="x")
    kind = "max" if "max" in op else "avg"
    for config in (None, default):
        y = pooling.pool_nchwc(xb, kind, size, strides, padding)
        s = pooling.schedule_pool_nchwc([y], target, config)
        text = str(tessera.lower(s, [xb, y]))
        if config is None:
            by_rule = text
    assert text == by_rule  # the default config schedules exactly as the rules do
