"""bench/gemm_blocks.py sets its knobs over the GEMM tasks' defaults only where valid and its
builds compute numpy's product; bench/tune_gemm.py's "without" space holds the GEMMs to the
tile scope and gives the space back. No timings."""

import sys
from pathlib import Path

import numpy as np

import tessera

BENCH = Path(__file__).resolve().parent.parent / "bench"
HOST = tessera.Target("llvm")


sys.path.insert(0, str(BENCH))  # the scripts import their neighbours
try:
    import gemm_blocks as blocks
    import tune_gemm
finally:
    sys.path.remove(str(BENCH))


def _tasks(model):
    from tessera import autotune
    from tessera.frontend import from_onnx
    from tessera.transform import PassContext

    mod, params = from_onnx(model)
    with PassContext(opt_level=3):
        return autotune.extract_tasks(mod, params, HOST)


def test_knobs_over_the_defaults_where_valid_and_the_build_computes_right():
    from onnx import numpy_helper

    from tessera.runtime import GraphModule, cpu

    model = blocks._matmul_const(13, 40, 37)
    (task,) = [t for t in _tasks(model) if "kc" in t.default(HOST)]
    knobs = {"kc_scope": "block", "kc": 8, "mc": 1, "nc": 1}
    (config,) = blocks.with_knobs([task], HOST, knobs).values()
    assert config.knobs() == {**task.default(HOST).knobs(), **knobs}
    assert blocks.with_knobs([task], HOST, {"kc_scope": "tile", "mc": 1}) == {}  # invalid
    x = np.random.default_rng(0).standard_normal((13, 40)).astype("float32")
    m = GraphModule(blocks.build(model, HOST, knobs)["default"](cpu(0)))
    m.set_input(x=x)
    m.run()
    w = numpy_helper.to_array(model.graph.initializer[0])
    np.testing.assert_allclose(m.get_output(0).numpy(), x @ w, rtol=1e-4, atol=1e-4)


def test_the_space_without_block_knobs_is_the_tile_scope_and_is_given_back():
    from tessera.topi.x86 import strategy

    (task,) = [t for t in _tasks(blocks._matmul_const(13, 40, 37)) if "kc" in t.default(HOST)]
    block = {**task.default(HOST).knobs(), "kc_scope": "block"}
    space = task.implementations(HOST)["packed"]
    assert space.valid(block)
    original = tune_gemm.without_block_knobs()
    try:
        held = task.implementations(HOST)["packed"]
        assert not held.valid(block) and held.valid(task.default(HOST).knobs())
    finally:
        strategy._gemm_space = original
    assert task.implementations(HOST)["packed"].valid(block)


def test_single_call_turns_take_one_call_per_runner_per_round_in_flipping_order():
    calls = []
    runners = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    samples = blocks.single_call_turns(runners, 3)
    assert {k: len(v) for k, v in samples.items()} == {"a": 3, "b": 3}
    assert all(t >= 0 for v in samples.values() for t in v)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-up, then flipping turns
    assert "ocr" in blocks.CASES and "ocr_whole" in blocks.CASES
