"""extract_tasks and build(configs=): random valid configs for every task build models that
match ONNX Runtime (the knobs are real and every value is correct, not only the defaults)."""

import random

import numpy as np
import pytest
from bench_modules import load_bench
from onnx import helper

import tessera
from tessera import autotune
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model, run_ort
from tessera.runtime import GraphModule, cpu
from tessera.topi.strategy import Config, Task
from tessera.transform import PassContext

HOST = tessera.Target("llvm")
R = np.random.default_rng(0)


def f32(*shape):
    return (R.standard_normal(shape) / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32)


def small_model():
    """Every conv kind (3x3 that Winograd may take, depthwise, grouped, 1x1, strided), a pool,
    a dense with a constant weight, a matmul of two inputs and a softmax."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1], group=32),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], group=2),
        helper.make_node("Conv", ["c3", "w4"], ["c4"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("MaxPool", ["c4"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w5"], ["y"], transB=1),
        helper.make_node("MatMul", ["a", "b"], ["m"]),
        helper.make_node("Softmax", ["m"], ["z"], axis=-1),
    ]
    inits = {
        "w1": f32(32, 16, 3, 3),
        "w2": f32(32, 1, 3, 3),
        "w3": f32(32, 16, 1, 1),
        "w4": f32(24, 32, 3, 3),
        "w5": f32(10, 24),
    }
    inputs = {"x": ((1, 16, 14, 14), "float32"), "a": ((2, 9, 16), "float32")}
    inputs["b"] = ((2, 16, 12), "float32")
    return make_model(nodes, inputs, ["y", "z"], inits)


def feeds_of(model, seed=0):
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == 1:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            feeds[vi.name] = rng.integers(0, 2, shape).astype(np.int64)
    return feeds


def run(lib, feeds):
    m = GraphModule(lib["default"](cpu(0)))
    for name, value in feeds.items():
        m.set_input(name, value)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def check_random_configs(model, seeds, rtol=1e-3, atol=1e-4, feeds=None, target=HOST):
    """Build `model` with a random valid config for every task, per seed; compare with ORT."""
    feeds = feeds or feeds_of(model)
    expected = run_ort(model, feeds)
    mod, params = from_onnx(model)
    with PassContext(opt_level=3):
        tasks = autotune.extract_tasks(mod, params, target)
        assert tasks
        for seed in seeds:
            rng = random.Random(seed)
            configs = {t: t.sample(target, rng) for t in tasks}
            lib = tessera.build(mod, target=target, params=params, configs=configs)
            for got, want in zip(run(lib, feeds), expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"seed {seed}")
    return tasks


def test_extract_tasks_lists_each_workload_once_with_a_space():
    mod, params = from_onnx(small_model())
    tasks = autotune.extract_tasks(mod, params, HOST)
    ops = [t.workload.op for t in tasks]
    assert ops.count("nn.conv2d") == 4 and "nn.dense" in ops and "matmul" in ops
    assert "nn.max_pool2d" in ops and "nn.softmax" in ops
    assert len(set(tasks)) == len(tasks)
    for task in tasks:
        default = task.default(HOST)
        assert task.valid(default, HOST), (task, default)
        assert default in set(task.configs(HOST))
    # the 3x3 conv and the dense have real choices: several implementations, many configs
    conv = next(t for t in tasks if t.workload.shape(1) == (32, 16, 3, 3))
    assert {"nchw", "direct_nchwc"} <= set(conv.implementations(HOST))
    assert sum(1 for _ in conv.configs(HOST)) > 20


def test_random_configs_match_onnxruntime_small_model():
    tasks = check_random_configs(small_model(), seeds=range(4))
    assert len(tasks) >= 6


def test_random_configs_match_onnxruntime_for_avx2():
    """Another target description (AVX2: 16 registers, 8 lanes, its own balance and tiles)
    gives other spaces and defaults; their random configs are correct too."""
    if "avx2" not in HOST.features or "fma" not in HOST.features:
        pytest.skip("the host cannot run AVX2 code")
    target = tessera.Target("llvm -mcpu=haswell")
    tasks = check_random_configs(small_model(), seeds=range(2), target=target)
    assert {t.workload.op for t in tasks} >= {"nn.conv2d", "nn.dense", "matmul"}


def test_configs_change_the_kernels():
    """A config other than the default gives other code (the knobs reach the schedules)."""
    model = small_model()
    mod, params = from_onnx(model)
    tasks = autotune.extract_tasks(mod, params, HOST)
    conv = next(t for t in tasks if t.workload.shape(1) == (24, 32, 3, 3))
    default = conv.default(HOST)
    other = next(c for c in conv.configs(HOST) if c.impl == "direct_nchwc" and c != default)
    libs = [
        tessera.build(mod, target=HOST, params=params, configs=configs)
        for configs in (None, {conv: other})
    ]
    assert libs[0].get_source() != libs[1].get_source()
    feeds = feeds_of(model)
    for a, b in zip(run(libs[0], feeds), run(libs[1], feeds), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_invalid_config_is_refused():
    mod, params = from_onnx(small_model())
    task = autotune.extract_tasks(mod, params, HOST)[0]
    bad = Config("direct_nchwc", ow_block=10**6, oc_vectors=1, out_block=8, prefetch=False)
    with pytest.raises(ValueError, match="not a valid config"):
        tessera.build(mod, target=HOST, params=params, configs={task: bad})
    with pytest.raises(TypeError, match="Task: Config"):
        tessera.build(mod, target=HOST, params=params, configs={"conv": bad})


def test_config_round_trips_and_is_a_graph_attribute():
    c = Config("blocked", mr=6, nv=2, kc=256)
    assert Config.from_json(c.to_json()) == c
    assert Config.from_attr(c.as_attr()) == c
    assert hash(Config.from_attr(c.as_attr())) == hash(c)
    assert isinstance(autotune.Task, type) and Task is autotune.Task


# -- the models of the issue ---------------------------------------------------------------------


def _zoo():
    return load_bench("model_zoo", "bench_model_zoo_tasks")


def _model(name):
    if name in ("resnet50", "shufflenet"):
        return tessera.models.light_model(name)
    zoo = _zoo()
    if name == "mobilenet_v2":
        return zoo.mobilenet_v2()
    return zoo.bert_encoder(layers=1, seq=32)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "shufflenet", "bert"])
def test_random_configs_match_onnxruntime_models(name):
    model = _model(name)
    feeds = _zoo().bert_inputs(model, seed=1) if name == "bert" else feeds_of(model)
    check_random_configs(model, seeds=range(3), rtol=2e-3, atol=2e-4, feeds=feeds)


def test_tasks_are_only_the_decisions_a_target_makes():
    """A C target takes no blocked layouts or packed weights: its convs and dense have no
    config that changes anything, so they are no tasks; the matmul's x86 schedule is one."""
    mod, params = from_onnx(small_model())
    target = tessera.Target("c")
    ops = {t.workload.op for t in autotune.extract_tasks(mod, params, target)}
    assert "nn.conv2d" not in ops and "matmul" in ops


@pytest.mark.slow
def test_configs_through_the_pass_context_and_over_a_database(tmp_path):
    """PassContext config "strategy.configs" builds as `configs=` does; with a tuning database
    too, the named configs win over its records for their tasks."""
    from tessera.autotune import Database, Record
    from tessera.transform import PassContext

    mod, params = from_onnx(small_model())
    conv = next(
        t for t in autotune.extract_tasks(mod, params, HOST) if t.workload.op == "nn.conv2d"
    )
    default = conv.default(HOST)
    other = next(c for c in conv.configs(HOST) if c.impl == "direct_nchwc" and c != default)
    given = tessera.build(mod, target=HOST, params=params, configs={conv: other}).get_source()
    with PassContext(config={"strategy.configs": {conv: other}}):
        assert tessera.build(mod, target=HOST, params=params).get_source() == given
    db = Database(tmp_path / "tune.db")
    db.append(Record.of(conv, HOST, default, seconds=1e-6))  # the database says: the default
    config = {"strategy.configs": {conv: other}, "tuning.database": str(db.path)}
    with PassContext(config=config):
        assert tessera.build(mod, target=HOST, params=params).get_source() == given
    with PassContext(config={"strategy.configs": {conv: Config("direct_nchwc", ow_block=10**6)}}):
        with pytest.raises(ValueError, match="not a valid config"):
            tessera.build(mod, target=HOST, params=params)


def test_extract_tasks_gives_the_layout_context_of_the_model():
    """A conv after a conv sees its input in blocks (alter_layout's context), and a task's
    default depends on it: the pool after the convs wants its blocked kernel."""
    mod, params = from_onnx(small_model())
    contexts = {}
    tasks = autotune.extract_tasks(mod, params, HOST, contexts=contexts)
    assert set(contexts) == set(tasks)
    convs = [t for t in tasks if t.workload.op == "nn.conv2d"]
    assert contexts[convs[0]]["in_block"] is None  # the model's input: plain NCHW
    assert all(contexts[t]["in_block"] for t in convs[1:])
    pool = next(t for t in tasks if t.workload.op == "nn.max_pool2d")
    assert pool.default(HOST, contexts[pool]) != pool.default(HOST)


def few_outputs_model():
    """A 3x3 conv of 3 outputs: blocked on its channels padded to a vector while that is at
    most "conv.max_pad_work" times the work (Note [few output channels]), else NCHW."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    return make_model(nodes, {"x": ((1, 16, 10, 10), "float32")}, ["y"], {"w": f32(3, 16, 3, 3)})


def test_rule_knobs_move_the_defaults_of_a_build():
    """Note [rule knobs]: PassContext config "strategy.rules" sets a default rule's own
    knobs for the build (and for extract_tasks); the defaults it moves build correct code."""
    from tessera.topi.rules import rules_in_effect, use_rules

    model = few_outputs_model()
    feeds = feeds_of(model)
    expected = run_ort(model, feeds)
    mod, params = from_onnx(model)
    (conv,) = autotune.extract_tasks(mod, params, HOST)
    assert conv.default(HOST).impl == "direct_nchwc"  # 8 / 3 padded work: at most 4
    rules = {"strategy.rules": {"conv.max_pad_work": 2}}
    with use_rules(rules["strategy.rules"]):
        assert conv.default(HOST).impl == "nchw"
        assert rules_in_effect() == (("conv.max_pad_work", 2),)  # in the kernels' cache keys
    assert rules_in_effect() == ()
    plain = tessera.build(mod, target=HOST, params=params)
    with PassContext(opt_level=3, config=rules):
        assert autotune.extract_tasks(mod, params, HOST) == [conv]
        moved = tessera.build(mod, target=HOST, params=params)
    assert "conv2d_nchwc" in plain.get_source() and "conv2d_nchwc" not in moved.get_source()
    for lib in (plain, moved):
        np.testing.assert_allclose(run(lib, feeds)[0], expected[0], rtol=1e-4, atol=1e-4)


def test_rule_knobs_refuse_unknown_names_and_values():
    from tessera.topi.rules import rule_knobs, use_rules

    with pytest.raises(ValueError, match="unknown rule knob 'winograd.margn'"):
        use_rules({"winograd.margn": 0.9})
    with pytest.raises(ValueError, match="expected a value like 4"):
        use_rules({"conv.max_pad_work": 2.5})
    with pytest.raises(ValueError, match="expected a value like 0.8"):
        use_rules({"winograd.margin": "high"})
    for knob in rule_knobs().values():  # today's value is a candidate a search tries
        assert knob.default in knob.candidates and knob.doc


def _layout_calls(func):
    """(op, input types) of every call in the fused groups of `func` that reads a constant or
    whose op is blocked (the kernels of convs and pools as the model runs them)."""
    found = set()
    for call in func.body:
        for inner in call.attrs["func"].body:
            if (
                inner.op.name.endswith(("_nchwc", "_winograd_nchwc"))
                or inner.op.name == "nn.conv2d"
            ):
                found.add((inner.op.name, tuple(str(v.type) for v in inner.inputs[:1])))
    return found


def test_a_task_is_measured_in_the_layout_it_runs_in_inside_the_model():
    """Note [in-model layout]: each conv and pool is measured with its input in the blocked
    layout the model feeds it, its weight packed for the config, its output left blocked: the
    kernel of its measurement graph is the model's, a lone transform-free call; a config with
    another output block still matches the reference once its output is back in NCHW."""
    from tessera.autotune.measure import _graph, run_config
    from tessera.driver import fused_function
    from tessera.ir.module import IRModule

    mod, params = from_onnx(small_model())
    contexts = {}
    tasks = autotune.extract_tasks(mod, params, HOST, contexts=contexts)
    model = _layout_calls(fused_function(IRModule({"main": mod["main"]}), HOST, params))
    lanes = HOST.vector_lanes("float32")
    for task in tasks:
        if task.workload.op not in ("nn.conv2d", "nn.max_pool2d"):
            continue
        context = contexts[task]
        func, _, inputs, layouts = _graph(task, task.default(HOST, context), "llvm", 0, context)
        anchor = next(c for c in func.body if c.op.name != "layout_transform")
        assert (anchor.op.name, (str(anchor.inputs[0].type),)) in model, task
        if context["in_block"]:  # fed blocked, as the op before it leaves its output
            block = context["in_block"]
            assert [c.op.name for c in func.body] == [anchor.op.name]
            assert inputs["in0"].ndim == 5 and inputs["in0"].shape[-1] == block
        assert all(layout is not None for layout in layouts)  # the output stays blocked
        # a pool's knob reaches its blocked kernel (a lone pool in NCHW would not be blocked)
        if task.workload.op == "nn.max_pool2d":
            assert anchor.op.name == "nn.max_pool2d_nchwc"
    # the first conv (32 outputs): its largest output block (16 where the lanes allow) gives
    # a kernel with that block, whose output compares with the default's in NCHW
    conv = next(t for t in tasks if t.workload.op == "nn.conv2d")
    ref = run_config(conv, conv.default(HOST, contexts[conv]), "llvm", number=1, repeat=1,
                     model_context=contexts[conv])  # fmt: skip
    assert ref.ok, ref.error
    others = [c for c in conv.configs(HOST) if c.impl == "direct_nchwc"]
    config = max(others, key=lambda c: (c["out_block"], c["ow_block"]))
    got = run_config(conv, config, "llvm", reference=ref.outputs, number=1, repeat=1,
                     model_context=contexts[conv])  # fmt: skip
    assert got.ok, got.error
    func, *_ = _graph(conv, config, "llvm", 0, contexts[conv])
    (out,) = func.outputs
    assert out.type.shape[-1] == config["out_block"] == min(lanes, 32)
    # an NCHW conv amid blocked ones pays the transform back to the block the op after it reads
    fed = next(t for t in tasks if t.workload.op == "nn.conv2d" and contexts[t]["in_block"])
    ref = run_config(fed, fed.default(HOST, contexts[fed]), "llvm", number=1, repeat=1,
                     model_context=contexts[fed])  # fmt: skip
    func, *_ = _graph(fed, Config("nchw"), "llvm", 0, contexts[fed])
    assert [c.op.name for c in func.body] == ["layout_transform", "nn.conv2d", "layout_transform"]
    assert func.outputs[0].type.ndim == 5
    got = run_config(fed, Config("nchw"), "llvm", reference=ref.outputs, number=1, repeat=1,
                     model_context=contexts[fed])  # fmt: skip
    assert got.ok, got.error


def test_the_conv_threading_split_is_a_knob_and_every_split_is_correct():
    """Note [conv threading split]: the direct and depthwise convs' `parallel` knob (default
    "rows", today's rule) reaches the schedule: "none" leaves the kernel without a parallel
    loop, and every split computes what ONNX Runtime does."""
    model = small_model()
    mod, params = from_onnx(model)
    tasks = autotune.extract_tasks(mod, params, HOST)
    feeds = feeds_of(model)
    expected = run_ort(model, feeds)
    convs = {
        "direct_nchwc": next(t for t in tasks if t.workload.shape(1) == (32, 16, 3, 3)),
        "depthwise_nchwc": next(t for t in tasks if t.workload.shape(1) == (32, 1, 3, 3)),
    }
    for impl, conv in convs.items():
        default = conv.default(HOST)
        if default.impl != impl:  # (Winograd, where its rule takes the 3x3 conv)
            default = next(c for c in conv.configs(HOST) if c.impl == impl)
        assert default["parallel"] == "rows"
        sources = {}
        for split in ("rows", "chunks", "none"):
            knobs = {k: v for k, v in default.items() if k != "impl"}
            config = Config(impl, {**knobs, "parallel": split})
            assert conv.valid(config, HOST), config
            lib = tessera.build(mod, target=HOST, params=params, configs={conv: config})
            for got, want in zip(run(lib, feeds), expected, strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4, err_msg=split)
            sources[split] = lib.get_source()
        assert sources["none"].count("parallel") < sources["rows"].count("parallel"), impl
        assert len({sources["rows"], sources["chunks"], sources["none"]}) >= 2


def test_a_record_written_before_a_knob_existed_takes_its_default():
    """Note [added knobs]: a config that lacks a knob added since (the conv's `parallel`) reads
    as the same config with the default's value; one with a value no longer a candidate, or a
    knob the space lacks, is dropped."""
    from tessera.autotune.records import current_config

    mod, params = from_onnx(small_model())
    tasks = autotune.extract_tasks(mod, params, HOST)
    conv = next(t for t in tasks if t.workload.shape(1) == (32, 1, 3, 3))
    default = conv.default(HOST)
    knobs = {k: v for k, v in default.items() if k not in ("impl", "parallel")}
    old = Config(default.impl, knobs)
    assert not conv.valid(old, HOST)
    assert current_config(conv, old, HOST) == default
    assert current_config(conv, default, HOST) == default
    for changed in ({**knobs, "parallel": "diagonal"}, {**knobs, "gone": 1}):
        assert current_config(conv, Config(default.impl, changed), HOST) is None
