"""Auto-scheduling of plain te.computes: the generated space's configs build and compute what
the unscheduled computation computes (on shapes that no tile size divides too), and
`tune_kernel` returns a correct schedule, resumes from its history, and survives bad configs."""

import json
import random

import numpy as np
import pytest

import tessera
from tessera import te
from tessera.autotune import AutoSpace, tune_kernel
from tessera.autotune.features import FEATURE_NAMES, program_features
from tessera.topi.strategy import Config

HOST = tessera.Target("llvm")


def matmul(m, n, k):
    r = te.reduce_axis((0, k), name="k")
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return [C], [A, B, C]


def matmul_relu(m, n, k):
    (C,), (A, B, _) = matmul(m, n, k)
    D = te.compute((m, n), lambda i, j: te.max(C[i, j], te.const(0.0, "float32")), name="D")
    return [D], [A, B, D]


def batched(b, m, n, k):
    r = te.reduce_axis((0, k), name="k")
    A = te.placeholder((b, m, k), name="A")
    B = te.placeholder((b, k, n), name="B")
    C = te.compute((b, m, n), lambda z, i, j: te.sum(A[z, i, r] * B[z, r, j], axis=r), name="C")
    return [C], [A, B, C]


def blur(h, w):
    inp = te.placeholder((h + 2, w + 2), name="inp")
    bx = te.compute(
        (h + 2, w), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3.0, name="blur_x"
    )
    by = te.compute(
        (h, w), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0, name="blur_y"
    )
    return [by], [inp, by]


def run(s, args, arrays):
    f = tessera.build(s, args, target=HOST, name="k")
    nd = [tessera.nd.array(a) for a in arrays]
    f(*nd)
    return nd[-1].numpy()


def inputs(args, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [tuple(int(d.value) for d in a.shape) for a in args]
    return [rng.standard_normal(s).astype(np.float32) for s in shapes[:-1]] + [
        np.zeros(shapes[-1], np.float32)
    ]


CASES = {
    "matmul": (matmul, (64, 48, 40)),
    "matmul odd": (matmul, (37, 29, 23)),
    "matmul relu": (matmul_relu, (33, 50, 17)),
    "batched": (batched, (3, 9, 20, 11)),
    "blur": (blur, (20, 45)),
}


@pytest.mark.parametrize("name", CASES)
def test_configs_compute_what_the_naive_schedule_computes(name):
    make, shape = CASES[name]
    outputs, args = make(*shape)
    space = AutoSpace(outputs, args, HOST)
    assert space.kind == ("tile_spatial" if name == "blur" else "tile_reduce")
    assert space.space.valid(space.default().knobs())
    arrays = inputs(args)
    want = run(te.create_schedule([t.op for t in outputs]), args, arrays)
    rng = random.Random(0)
    configs = [space.default()] + [
        Config(space.default().impl, space.space.sample(rng)) for _ in range(2)
    ]
    for config in configs:
        s, sargs = space.apply(config)
        got = run(s, sargs, [a.copy() for a in arrays])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_packing_is_offered_only_for_an_input_read_along_the_vector_axis():
    (C,), args = matmul(16, 32, 8)
    assert AutoSpace([C], args, HOST).space.knobs[4].candidates == (False, True)
    # A[i, k] is read along k, not along the output's last axis: nothing to pack for C = A @ A^T
    r = te.reduce_axis((0, 8), name="k")
    A = te.placeholder((16, 8), name="A")
    D = te.compute((16, 16), lambda i, j: te.sum(A[i, r] * A[j, r], axis=r), name="D")
    assert AutoSpace([D], [A, D], HOST).space.knobs[4].candidates == (False,)


def test_a_reduction_that_is_not_the_anchor_is_refused_with_a_clear_error():
    A = te.placeholder((8, 8), name="A")
    r = te.reduce_axis((0, 8), name="r")
    s1 = te.compute((8,), lambda i: te.sum(A[i, r], axis=r), name="rowsum")
    out = te.compute((8, 8), lambda i, j: A[i, j] / s1[i], name="norm")
    with pytest.raises(ValueError, match="rowsum"):
        AutoSpace([out], [A, out], HOST)


def test_program_features_see_the_schedule():
    (C,), args = matmul(64, 64, 64)
    space = AutoSpace([C], args, HOST)
    naive = [f for _, f in tessera.lower(te.create_schedule(C.op), args)]
    s, sargs = space.apply(space.default())
    tiled = [f for _, f in tessera.lower(s, sargs)]
    x0, x1 = program_features(naive), program_features(tiled)
    assert x0.shape == x1.shape == (len(FEATURE_NAMES),)
    names = {n: i for i, n in enumerate(FEATURE_NAMES)}
    assert x0[names["lanes"]] == 1.0 and x1[names["lanes"]] > 1.0  # log2(1 + lanes)
    assert x0[names["parallel"]] == 1.0 and x1[names["parallel"]] > 1.0
    assert x1[names["local_alloc_bytes"]] > 0 == x0[names["local_alloc_bytes"]]


@pytest.mark.slow
def test_tune_kernel_finds_a_correct_schedule_and_resumes(tmp_path):
    outputs, args = matmul(48, 64, 32)
    history = tmp_path / "kernels.jsonl"
    r = tune_kernel(outputs, args, HOST, budget=60, max_trials=4, history=history, workers=2)
    assert r.naive_seconds and r.default_seconds and r.best_seconds
    assert r.best_seconds <= r.default_seconds
    assert r.trials >= 2  # the default and at least one candidate
    arrays = inputs(args)
    got = run(r.schedule, r.args, arrays)
    np.testing.assert_allclose(got, arrays[0] @ arrays[1], rtol=1e-4, atol=1e-4)
    lines = [json.loads(x) for x in history.read_text().splitlines()]
    assert len(lines) == r.trials and all(x["features"] for x in lines if x["seconds"])
    # a rerun measures no config twice beyond the default and the earlier best (re-timed)
    r2 = tune_kernel(outputs, args, HOST, budget=60, max_trials=2, history=history, workers=2)
    configs = [json.loads(x)["config"] for x in history.read_text().splitlines()]
    again = configs[len(lines) :]
    assert len(again) == r2.trials
    assert len(set(again[2:]) & set(configs[: len(lines)])) == 0


@pytest.mark.slow
def test_a_naive_run_past_its_cap_is_reported_and_the_search_goes_on():
    """No naive time (its run is cut off at once): the default's outputs are the reference."""
    outputs, args = matmul(16, 32, 8)
    r = tune_kernel(outputs, args, HOST, budget=60, max_trials=2, workers=2, naive_timeout=1e-6)
    assert r.naive_seconds is None and "did not finish in 1e-06 s" in r.naive_note
    assert r.default_seconds and r.best_seconds and r.trials >= 2 and r.failed == 0
    arrays = inputs(args)
    got = run(r.schedule, r.args, arrays)
    np.testing.assert_allclose(got, arrays[0] @ arrays[1], rtol=1e-4, atol=1e-4)


def test_tune_kernel_refuses_symbolic_shapes_with_a_clear_error():
    n = te.var("n")
    A = te.placeholder((n, 8), name="A")
    B = te.compute((n, 8), lambda i, j: A[i, j] * 2.0, name="B")
    with pytest.raises(ValueError, match="symbolic shape"):
        tune_kernel([B], [A, B], HOST, budget=10)


@pytest.mark.slow
def test_a_config_that_fails_to_build_is_recorded_and_tuning_goes_on(tmp_path, monkeypatch):
    """The build processes are forked: a fault patched in here reaches them."""
    original = AutoSpace.apply

    def faulty(self, config):
        if config != self.default():
            raise RuntimeError("injected build failure")
        return original(self, config)

    monkeypatch.setattr(AutoSpace, "apply", faulty)
    outputs, args = matmul(16, 32, 8)
    history = tmp_path / "h.jsonl"
    r = tune_kernel(outputs, args, HOST, budget=60, max_trials=3, history=history, workers=2)
    assert r.config == AutoSpace(outputs, args, HOST).default() and r.failed >= 3
    errors = [json.loads(x)["error"] for x in history.read_text().splitlines()]
    assert sum("injected build failure" in (e or "") for e in errors) == r.failed


def dot(n):
    r = te.reduce_axis((0, n), name="k")
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((), lambda: te.sum(A[r] * B[r], axis=r), name="C")
    return [C], [A, B, C]


def row_max(m, n):
    r = te.reduce_axis((0, n), name="k")
    A = te.placeholder((m, n), name="A")
    C = te.compute((m,), lambda i: te.max(A[i, r], axis=r), name="C")
    return [C], [A, C]


@pytest.mark.parametrize("make, shape", [(dot, (1000,)), (dot, (4099,)), (row_max, (3, 777))])
def test_a_reduction_with_little_data_parallelism_is_factored(make, shape):
    """Note [rfactor sketch]: a dot product (a scalar output, which tile_reduce cannot tile)
    and a max over three long rows take the rfactor sketch; each config of its space (parts of
    k in parallel, kv vector accumulators; lengths no vector divides) builds a schedule with
    the factored stages and computes what the naive schedule computes."""
    outputs, args = make(*shape)
    space = AutoSpace(outputs, args, HOST)
    assert space.kind == "rfactor" and space.space.valid(space.default().knobs())
    assert [k.name for k in space.space.knobs] == ["kv", "parts"]
    arrays = inputs(args)
    want = run(te.create_schedule([t.op for t in outputs]), args, arrays)
    configs = [Config("rfactor", v) for v in space.space.enumerate()]
    assert len(configs) > 4 and space.default() in configs
    for config in configs[:: max(1, len(configs) // 8)] + [space.default()]:
        s, sargs = space.apply(config)
        names = [st.op.name for st in s.stages]
        assert any(n.endswith(".rf") for n in names), names
        assert sum(n.endswith(".rf") for n in names) == (2 if config["parts"] > 1 else 1)
        got = run(s, sargs, [a.copy() for a in arrays])
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=str(config))


def test_a_reduction_with_many_outputs_keeps_the_tiles():
    (C,), args = row_max(256, 64)
    assert AutoSpace([C], args, HOST).kind == "tile_reduce"


@pytest.mark.slow
def test_tune_kernel_searches_the_rfactor_sketch(tmp_path):
    outputs, args = dot(1 << 14)
    r = tune_kernel(outputs, args, HOST, budget=60, max_trials=3, workers=2)
    assert r.config.impl == "rfactor" and r.best_seconds <= r.default_seconds
    arrays = inputs(args)
    got = run(r.schedule, r.args, arrays)
    np.testing.assert_allclose(got, arrays[0] @ arrays[1], rtol=1e-3, atol=1e-2)
