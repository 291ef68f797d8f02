"""The GPU strategies (topi/gpu/strategy.py): the tiled matmuls and the implicit-GEMM conv are
tasks with knobs whose defaults are the rules (`tile_config`, `conv_config`), every config
keeps to the device limits, and random valid configs build models that match ONNX Runtime on
OpenCL (pocl in CI)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from onnx import helper

import tessera
from tessera import autotune
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort
from tessera.topi.gpu.conv2d import conv_config
from tessera.topi.gpu.dense import tile_config
from tessera.topi.gpu.schedule import MAX_SHARED_BYTES
from tessera.topi.strategy import Config, ConfigRecord, Task, Workload

OPENCL = tessera.Target("opencl")
CUDA = tessera.Target("cuda -arch=sm_80")
R = np.random.default_rng(3)
N = helper.make_node


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


CASES = {  # nodes, feeds, outputs, weights
    "conv2d_relu": lambda: (
        [N("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[2, 1]), N("Relu", ["y"], ["z"])],
        {"x": f32(2, 5, 13, 11)},
        ["z"],
        {"w": f32(20, 5, 3, 3)},
    ),
    "depthwise_conv2d": lambda: (
        [N("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])],
        {"x": f32(1, 8, 9, 9)},
        ["y"],
        {"w": f32(8, 1, 3, 3)},
    ),
    "dense": lambda: (
        [N("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        {"x": f32(3, 70)},
        ["y"],
        {"w": f32(33, 70), "b": f32(33)},
    ),
    "batch_matmul": lambda: (
        [N("MatMul", ["a", "b"], ["y"])],
        {"a": f32(2, 3, 20, 40), "b": f32(2, 3, 40, 65)},
        ["y"],
        None,
    ),
    "matmul_weight_tanh": lambda: (
        [N("MatMul", ["a", "w"], ["y"]), N("Tanh", ["y"], ["z"])],
        {"a": f32(1, 9, 64)},
        ["z"],
        {"w": f32(64, 96)},
    ),
}


def _tasks(name, target=OPENCL):
    nodes, feeds, outputs, inits = CASES[name]()
    model = make_model(nodes, feeds, outputs, inits)
    mod, params = from_onnx(model)
    return model, feeds, mod, params, autotune.extract_tasks(mod, params, target)


def test_gpu_ops_are_tasks_whose_defaults_are_the_rules():
    for target in (OPENCL, CUDA):
        *_, tasks = _tasks("dense", target)
        (task,) = tasks
        assert task.key == target.kind and task.workload.op == "nn.dense"
        assert set(task.implementations(target)) == {"flat", "tiled"}
        default = task.default(target)
        assert default == Config("tiled", tile_config(3, 33))
        *_, tasks = _tasks("conv2d_relu", target)
        (task,) = tasks
        # 20 output channels, 6 output columns, 5 input channels, 3x3, stride 1 along w
        assert task.default(target) == Config("implicit_gemm", conv_config(20, 11, 5, 3, 3, 1))


def test_grouped_convs_have_only_the_flat_schedule():
    *_, tasks = _tasks("depthwise_conv2d")
    (task,) = tasks
    assert set(task.implementations(OPENCL)) == {"flat"}


def test_every_config_keeps_to_the_device_limits():
    wl = Workload(
        "nn.conv2d",
        (((1, 64, 56, 56), "float32"), ((64, 64, 7, 7), "float32")),
        (("dilation", (2, 2)), ("groups", 1), ("padding", (6, 6, 6, 6)), ("strides", (1, 1))),
        (False, True),
        (1, 64, 56, 56),
    )
    target = tessera.Target("opencl -max-num-threads=256")
    task = Task(wl, "opencl")
    space = task.implementations(target)["implicit_gemm"]
    configs = list(space.enumerate())
    assert configs and all(c["ty"] * c["tx"] <= 256 for c in configs)
    assert any(c["ty"] * c["tx"] == 256 for c in configs)
    for values in configs:  # the input patch of a dilated 7x7 window, weights and halo
        cols = (values["tx"] * values["rx"] - 1) + 13
        patch = values["ct"] * 13 * cols + values["ct"] * values["ty"] * values["rf"] * 49
        assert 4 * patch <= MAX_SHARED_BYTES
    assert space.valid(task.default(target).knobs())


def test_the_schedule_takes_and_records_the_config(cl_dev):
    model, feeds, mod, params, (task,) = _tasks("dense")
    config = Config("tiled", ty=2, tx=8, rm=2, rn=1, tk=16)
    assert task.valid(config, OPENCL)
    lib = tessera.build(mod, target="opencl", params=params, configs={task: config})
    m = lib["default"](cl_dev)
    m.run(**feeds)
    np.testing.assert_allclose(m.get_output(0).numpy(), run_ort(model, feeds)[0], 1e-4, 1e-4)
    from tessera import te
    from tessera.topi.gpu.dense import schedule_matmul

    a = te.placeholder((3, 70), name="a")
    w = te.placeholder((33, 70), name="w")
    k = te.reduce_axis((0, 70), name="k")
    y = te.compute((3, 33), lambda i, j: te.sum(a[i, k] * w[j, k], axis=k), name="y")
    s = schedule_matmul([y], OPENCL, config=config)
    assert ConfigRecord(config.as_attr()) in s.steps


@pytest.mark.parametrize("name", ["conv2d_relu", "dense", "batch_matmul", "matmul_weight_tanh"])
def test_random_configs_match_onnxruntime_on_opencl(cl_dev, name):
    model, feeds, mod, params, tasks = _tasks(name)
    expected = run_ort(model, feeds)
    for seed in range(3):
        rng = random.Random(seed)
        configs = {t: t.sample(OPENCL, rng) for t in tasks}
        lib = tessera.build(mod, target="opencl", params=params, configs=configs)
        m = lib["default"](cl_dev)
        m.run(**feeds)
        for k, want in enumerate(expected):
            got = m.get_output(k).numpy()
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{seed}")
