"""Random ops inside control flow and over symbolic shapes: a Loop body draws fresh values each
iteration (run k, iteration i draws the stream fold_in(k, i): Note [random streams] in
topi/philox.py), an If branch draws the run's values, an unrolled Scan draws per step, and the
Like forms follow a dynamic batch. Statistics with bounds of 6 sigma or a chi-square far in its
tail (they cannot flake), values against the numpy reference, replay in a new module."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.topi import philox

N = 20_000
CHI2_19 = 78.0  # chi-square quantile with 19 degrees of freedom at p = 1e-9


def _module(model, target="llvm", shape_dict=None):
    mod, params = from_onnx(model, shape_dict=shape_dict)
    lib = tessera.build(mod, target=target, params=params)
    return tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))


def _seed(value: float) -> int:
    return int(np.float64(value).view(np.uint64))


def _uniform(stream: int, shape, seed: float, dtype=np.float32):
    return philox.random_numpy(stream, shape, dtype, "uniform", 0.0, 1.0, _seed(seed))


def _check_uniform(u):
    """Mean, variance and a 20-bin chi-square of uniform [0, 1) samples."""
    u = np.asarray(u, np.float64).reshape(-1)
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean() - 0.5) < 6 * np.sqrt(1 / 12 / u.size)
    assert abs(u.var() - 1 / 12) < 6 * np.sqrt((1 / 80 - 1 / 144) / u.size)
    expected = u.size / 20
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    assert np.sum((counts - expected) ** 2 / expected) < CHI2_19


def _value_info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def _drawing_loop(trips=None, op="RandomUniform", n=N):
    """Loop(M, cond, h0): each iteration draws r (n floats), h += r, r is a scan output (with
    a constant M) or not (M from the input `m`)."""
    body = helper.make_graph(
        [helper.make_node(op, [], ["r"], shape=[n], seed=1.0),
         helper.make_node("Add", ["h", "r"], ["h2"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [_value_info("i", TensorProto.INT64, []), _value_info("c", TensorProto.BOOL, []),
         _value_info("h", TensorProto.FLOAT, [n])],
        [_value_info("c_out", TensorProto.BOOL, []), _value_info("h2", TensorProto.FLOAT, [n])]
        + ([_value_info("r", TensorProto.FLOAT, [n])] if trips else []),
    )  # fmt: skip
    outs = ["h", "rs"] if trips else ["h"]
    loop = helper.make_node("Loop", ["m", "cond", "h0"], outs, body=body)
    inputs = {"cond": ((), "bool"), "h0": ((n,), "float32")}
    inits = {}
    if trips:
        inits["m"] = np.array(trips, np.int64)
    else:
        inputs["m"] = ((), "int64")
    return make_model([loop], inputs, outs, inits, opset=17)


def test_a_loop_body_draws_fresh_values_every_iteration():
    m = _module(_drawing_loop(trips=5))
    h0 = np.zeros(N, np.float32)
    runs = [m(np.array(True), h0) for _ in range(2)]
    for k, (h, rs) in enumerate(runs):
        assert rs.shape == (5, N)
        for i, r in enumerate(rs):
            _check_uniform(r)
            np.testing.assert_array_equal(r, _uniform(philox.fold_in_numpy(k, i), (N,), 1.0))
        # iterations are independent: no two rows equal, pairwise correlations near 0
        corr = np.corrcoef(rs.astype(np.float64))
        assert np.all(np.abs(corr[np.triu_indices(5, 1)]) < 6 / np.sqrt(N))
        np.testing.assert_allclose(h, rs.astype(np.float64).sum(0), rtol=1e-6)
    assert not np.array_equal(runs[0][1], runs[1][1])  # the next run draws fresh values
    again = _module(_drawing_loop(trips=5))  # another conversion and build: seeds are given
    np.testing.assert_array_equal(again(np.array(True), h0)[1], runs[0][1])


def test_a_loop_with_a_data_dependent_trip_count_replays_in_a_new_module(tmp_path):
    model = _drawing_loop(op="RandomNormal", n=4096)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    first = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    loaded = tessera.runtime.load_module(str(lib.export_library(tmp_path / "loop.so")))
    second = tessera.runtime.GraphModule(loaded["default"](tessera.cpu(0)))  # exported, loaded
    h0 = np.zeros(4096, np.float32)
    sums = [first(m=np.array(trips), cond=np.array(True), h0=h0)[0] for trips in (1, 3, 7)]
    for trips, h in zip((1, 3, 7), sums, strict=True):
        # the sum of `trips` standard normals: mean 0, variance trips
        z = h.astype(np.float64) / np.sqrt(trips)
        assert abs(z.mean()) < 6 / np.sqrt(z.size) and abs(z.var() - 1) < 6 * np.sqrt(2 / z.size)
        np.testing.assert_array_equal(second(m=np.array(trips), cond=np.array(True), h0=h0)[0], h)
    draws = [
        philox.random_numpy(philox.fold_in_numpy(2, i), (4096,), np.float32, "normal", 0.0, 1.0,
                            _seed(1.0))
        for i in range(7)
    ]  # fmt: skip
    want = np.sum(np.asarray(draws, np.float64), axis=0)
    np.testing.assert_allclose(sums[2], want, rtol=1e-5, atol=1e-5)


def test_the_graph_reference_draws_what_the_compiled_loop_draws():
    from tessera.graph.interpreter import run_function
    from tessera.runtime.run_counter import RUN_COUNTER_INPUT

    mod, params = from_onnx(_drawing_loop(trips=3, n=300))
    h0 = np.zeros(300, np.float32)
    m = _module(_drawing_loop(trips=3, n=300))
    for k in range(2):
        feeds = {"cond": np.array(True), "h0": h0, RUN_COUNTER_INPUT: np.array(k, np.int64)}
        want = run_function(mod["main"], feeds, params)
        for a, b in zip(m(np.array(True), h0), want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)


def _body(nodes, name: str, scans) -> object:
    """A Loop body of `nodes` taking (i, c), passing c through and returning the scan outputs
    `scans` [(name, shape)] (float)."""
    return helper.make_graph(
        [*nodes, helper.make_node("Identity", ["c"], ["c_out"])], name,
        [_value_info("i", TensorProto.INT64, []), _value_info("c", TensorProto.BOOL, [])],
        [_value_info("c_out", TensorProto.BOOL, []),
         *(_value_info(y, TensorProto.FLOAT, shape) for y, shape in scans)],
    )  # fmt: skip


def _scan_loop(body, trips: int, out: str):
    """The model Loop(m = trips, cond; body) returning the body's scan output stacked."""
    loop = helper.make_node("Loop", ["m", "cond"], [out], body=body)
    return make_model([loop], {"cond": ((), "bool")}, [out], {"m": np.array(trips, np.int64)})


def test_nested_loops_fold_both_iterations():
    n = 1000
    draw = helper.make_node("RandomUniform", [], ["r"], shape=[n], seed=8.0)
    inner = _body([draw], "inner", [("r", [n])])
    three = helper.make_tensor("three", TensorProto.INT64, [], [3])
    outer = _body(
        [helper.make_node("Constant", [], ["k"], value=three),
         helper.make_node("Loop", ["k", ""], ["rs"], body=inner)],
        "outer", [("rs", [3, n])],
    )  # fmt: skip
    model = _scan_loop(outer, 2, "rss")
    m = _module(model)
    for k in range(2):
        rss = m(np.array(True))[0]
        assert rss.shape == (2, 3, n)
        for i in range(2):
            for j in range(3):  # run k, outer iteration i, inner iteration j
                stream = philox.fold_in_numpy(philox.fold_in_numpy(k, i), j)
                np.testing.assert_array_equal(rss[i, j], _uniform(stream, (n,), 8.0))
        assert len({r.tobytes() for r in rss.reshape(6, n)}) == 6


def test_llvm_and_c_draw_the_same_loop_values():
    model = _drawing_loop(trips=3, n=257)
    llvm, c = _module(model, "llvm"), _module(model, "c")
    h0 = np.zeros(257, np.float32)
    for _ in range(2):
        for a, b in zip(llvm(np.array(True), h0), c(np.array(True), h0), strict=True):
            np.testing.assert_array_equal(a, b)


def test_training_dropout_in_a_loop_body_masks_afresh_each_iteration():
    n, ratio = 10_000, 0.3
    body = helper.make_graph(
        [helper.make_node("Dropout", ["x", "ratio", "training"], ["y", "mask"], seed=3),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [_value_info("i", TensorProto.INT64, []), _value_info("c", TensorProto.BOOL, [])],
        [_value_info("c_out", TensorProto.BOOL, []), _value_info("y", TensorProto.FLOAT, [n]),
         _value_info("mask", TensorProto.BOOL, [n])],
    )  # fmt: skip
    loop = helper.make_node("Loop", ["m", "cond"], ["ys", "masks"], body=body)
    inits = {"m": np.array(4, np.int64), "ratio": np.array(ratio, np.float32),
             "training": np.array(True)}  # fmt: skip
    model = make_model([loop], {"cond": ((), "bool"), "x": ((n,), "float32")}, ["ys", "masks"],
                       inits, opset=17)  # fmt: skip
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    ys, masks = _module(model)(np.array(True), x)
    keep = 1 - ratio
    for y, mask in zip(ys, masks, strict=True):
        assert abs(mask.mean() - keep) <= 6 * np.sqrt(keep * ratio / n)
        np.testing.assert_allclose(y, np.where(mask, x / np.float32(keep), 0), rtol=1e-6)
    # different masks: two independent masks agree on keep^2 + ratio^2 of the elements
    agree = [np.mean(masks[i] == masks[j]) for i in range(4) for j in range(i + 1, 4)]
    p = keep**2 + ratio**2
    assert all(abs(a - p) <= 6 * np.sqrt(p * (1 - p) / n) for a in agree)


def _draw_or_zeros(op: str, n: int, seed: float) -> tuple:
    """(then, else) branches: then draws n samples of `op`, else gives n zeros."""
    then = helper.make_graph(
        [helper.make_node(op, [], ["r"], shape=[n], seed=seed)], "then", [],
        [_value_info("r", TensorProto.FLOAT, [n])],
    )  # fmt: skip
    zeros = helper.make_tensor("z", TensorProto.FLOAT, [n], np.zeros(n, np.float32))
    other = helper.make_graph(
        [helper.make_node("Constant", [], ["zero"], value=zeros)], "else", [],
        [_value_info("zero", TensorProto.FLOAT, [n])],
    )  # fmt: skip
    return then, other


def _if_drawing(then_op="RandomNormal"):
    """If(flag > 0): then draws r (N samples), else gives zeros."""
    then, other = _draw_or_zeros(then_op, N, 6.0)
    nodes = [
        helper.make_node("Greater", ["flag", "origin"], ["go"]),
        helper.make_node("If", ["go"], ["y"], then_branch=then, else_branch=other),
    ]
    return make_model(nodes, {"flag": ((), "float32")}, ["y"],
                      {"origin": np.array(0, np.float32)})  # fmt: skip


def test_an_if_branch_draws_the_runs_values():
    m = _module(_if_drawing("RandomUniform"))
    ys = [m(np.array(flag, np.float32))[0] for flag in (1.0, -1.0, 2.0)]
    np.testing.assert_array_equal(ys[1], np.zeros(N, np.float32))
    for k in (0, 2):  # run k's branch draws with the run index as its stream
        _check_uniform(ys[k])
        np.testing.assert_array_equal(ys[k], _uniform(k, (N,), 6.0))
    again = _module(_if_drawing("RandomUniform"))
    np.testing.assert_array_equal(again(np.array(3.0, np.float32))[0], ys[0])


def test_an_unrolled_scan_draws_per_step():
    body = helper.make_graph(
        [helper.make_node("RandomUniformLike", ["x"], ["r"], seed=2.0),
         helper.make_node("Add", ["s", "r"], ["s2"])],
        "body",
        [_value_info("s", TensorProto.FLOAT, [N]), _value_info("x", TensorProto.FLOAT, [N])],
        [_value_info("s2", TensorProto.FLOAT, [N]), _value_info("r", TensorProto.FLOAT, [N])],
    )  # fmt: skip
    scan = helper.make_node("Scan", ["s0", "xs"], ["s", "rs"], body=body, num_scan_inputs=1)
    model = make_model([scan], {"s0": ((N,), "float32"), "xs": ((3, N), "float32")},
                       ["s", "rs"])  # fmt: skip
    m = _module(model)
    for k in range(2):
        s, rs = m(np.zeros(N, np.float32), np.zeros((3, N), np.float32))
        for t, r in enumerate(rs):  # step t of run k: the stream fold_in(k, t)
            _check_uniform(r)
            np.testing.assert_array_equal(r, _uniform(philox.fold_in_numpy(k, t), (N,), 2.0))


def _like_model(op, rows, **attrs):
    node = helper.make_node(op, ["x"], ["y"], seed=4.0, **attrs)
    return make_model([node], {"x": ((rows, "n"), "float32")}, ["y"], opset=15)


@pytest.mark.parametrize(
    "op,dtype", [("RandomUniformLike", np.float32), ("RandomNormalLike", np.float64)]
)
def test_like_forms_follow_a_dynamic_dim(op, dtype):
    """One build over x: f32[3, n] draws y of x's shape at every n, the values a build for
    that static size draws in the same run."""
    attrs = {"dtype": TensorProto.DOUBLE} if dtype == np.float64 else {}
    m = _module(_like_model(op, 3, **attrs), shape_dict={"x": (3, ("n", 1, 50_000))})
    distribution = "uniform" if op == "RandomUniformLike" else "normal"
    for k, n in enumerate((1, 7, 64, 1000, 20_001)):
        y = m(np.zeros((3, n), np.float32))[0]
        assert y.shape == (3, n) and y.dtype == dtype
        want = philox.random_numpy(k, (3, n), dtype, distribution, 0.0, 1.0, _seed(4.0))
        np.testing.assert_allclose(y, want, rtol=0, atol=4 * np.finfo(dtype).eps)
    if distribution == "uniform":
        _check_uniform(y)
    else:
        assert abs(y.mean()) < 6 / np.sqrt(y.size) and abs(y.var() - 1) < 6 * np.sqrt(2 / y.size)
    static = _module(_like_model(op, 3, **attrs), shape_dict={"x": (3, 7)})
    dynamic = _module(_like_model(op, 3, **attrs), shape_dict={"x": (3, ("n", 1, 64))})
    x = np.zeros((3, 7), np.float32)
    for _ in range(2):  # run for run, the static and the dynamic build agree
        np.testing.assert_array_equal(dynamic(x)[0], static(x)[0])


def test_bernoulli_dropout_and_multinomial_over_a_dynamic_batch():
    nodes = [
        helper.make_node("Bernoulli", ["p"], ["b"], seed=2.0),
        helper.make_node("Dropout", ["p", "r", "t"], ["d", "mask"], seed=3),
        helper.make_node("Multinomial", ["x"], ["c"], seed=1.0, sample_size=N // 4),
    ]
    inputs = {"p": (("n", N // 4), "float32"), "x": (("n", 3), "float32")}
    inits = {"r": np.array(0.4, np.float32), "t": np.array(True)}
    model = make_model(nodes, inputs, ["b", "d", "mask", "c"], inits, opset=15)
    bounds = {"p": (("n", 1, 16), N // 4), "x": (("n", 1, 16), 3)}
    m = _module(model, shape_dict=bounds)
    probs = np.array([0.2, 0.3, 0.5])
    for n in (1, 3, 8):
        p = np.full((n, N // 4), 0.25, np.float32)
        x = np.tile(np.log(probs), (n, 1)).astype(np.float32)
        b, d, mask, c = m(p, x)
        assert b.shape == d.shape == mask.shape == (n, N // 4) and c.shape == (n, N // 4)
        assert abs(b.mean() - 0.25) <= 6 * np.sqrt(0.25 * 0.75 / b.size)
        assert abs(mask.mean() - 0.6) <= 6 * np.sqrt(0.6 * 0.4 / mask.size)
        np.testing.assert_allclose(d, np.where(mask, p / np.float32(0.6), 0), rtol=1e-6)
        for row in c:
            counts = np.bincount(row, minlength=3)
            expected = probs * row.size
            assert np.sum((counts - expected) ** 2 / expected) < 47.0  # chi-square, 2 dof: p < 1e-9
        assert not np.array_equal(b[0], m(p, x)[0][0])  # a fresh draw on the next run


def test_a_loop_unrolled_at_conversion_draws_what_a_native_loop_draws():
    """A body that slices at its step (so it is unrolled: one copy per step) folds each step
    into its stream as a native loop folds its iteration: the same values per run and step."""
    n = 500
    one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
    body = helper.make_graph(
        [helper.make_node("RandomUniform", [], ["r"], shape=[n], seed=5.0),
         helper.make_node("Constant", [], ["one"], value=one),
         helper.make_node("Unsqueeze", ["i", "zero"], ["start"]),
         helper.make_node("Add", ["start", "one"], ["end"]),
         helper.make_node("Slice", ["xs", "start", "end", "zero"], ["x"]),
         helper.make_node("Add", ["x", "r"], ["y"]),
         helper.make_node("Identity", ["c"], ["c_out"])],
        "body",
        [_value_info("i", TensorProto.INT64, []), _value_info("c", TensorProto.BOOL, [])],
        [_value_info("c_out", TensorProto.BOOL, []), _value_info("y", TensorProto.FLOAT, [1, n])],
    )  # fmt: skip
    loop = helper.make_node("Loop", ["m", ""], ["ys"], body=body)
    inits = {"m": np.array(3, np.int64), "zero": np.array([0], np.int64)}
    model = make_model([loop], {"xs": ((3, n), "float32")}, ["ys"], inits, opset=17)
    mod, _ = from_onnx(model)
    assert "control.loop" not in str(mod["main"])  # unrolled
    m = _module(model)
    xs = np.zeros((3, n), np.float32)
    for k in range(2):
        ys = m(xs)[0]
        for i in range(3):
            want = _uniform(philox.fold_in_numpy(k, i), (n,), 5.0)
            np.testing.assert_array_equal(ys[i, 0], want)


def test_an_if_inside_a_loop_body_draws_the_iterations_values():
    n = 400
    then, other = _draw_or_zeros("RandomUniform", n, 9.0)
    two = helper.make_tensor("two", TensorProto.INT64, [], [2])
    body = _body(
        [helper.make_node("Constant", [], ["two"], value=two),
         helper.make_node("Less", ["i", "two"], ["early"]),
         helper.make_node("If", ["early"], ["y"], then_branch=then, else_branch=other)],
        "body", [("y", [n])],
    )  # fmt: skip
    model = _scan_loop(body, 4, "ys")
    m = _module(model)
    for k in range(2):
        ys = m(np.array(True))[0]
        for i in range(2):  # the branch reads its loop iteration's stream
            np.testing.assert_array_equal(ys[i], _uniform(philox.fold_in_numpy(k, i), (n,), 9.0))
        np.testing.assert_array_equal(ys[2:], np.zeros((2, n), np.float32))
