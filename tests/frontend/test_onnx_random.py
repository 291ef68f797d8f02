"""The random generators (RandomUniform/Normal and Like forms, Bernoulli, Multinomial,
training Dropout), compiled: statistics over many draws with fixed seeds (bounds of 6 sigma or
a chi-square far in its tail, so they cannot flake), reproducibility, fresh values per run,
and llvm and c drawing the same values (Note [run-time random numbers])."""

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.frontend import from_onnx
from tessera.frontend.testing import make_model
from tessera.runtime.run_counter import RUN_COUNTER_INPUT
from tessera.topi import philox

N = 100_000


def _module(model, target="llvm"):
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target=target, params=params)
    return tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))


def _generator(op, shape=(200, 500), **attrs):
    return make_model([helper.make_node(op, [], ["y"], shape=list(shape), **attrs)], {}, ["y"])


def _within_sigmas(values, mean, var, sigmas=6.0):
    """The sample mean and variance of `values` within `sigmas` standard errors."""
    v = np.asarray(values, np.float64).reshape(-1)
    n = v.size
    assert abs(v.mean() - mean) < sigmas * np.sqrt(var / n), (v.mean(), mean)
    # the sample variance's standard error, with the fourth moment estimated from the sample
    m4 = np.mean((v - v.mean()) ** 4)
    assert abs(v.var() - var) < sigmas * np.sqrt((m4 - var**2) / n), (v.var(), var)


def _chi_square(counts, probabilities) -> float:
    expected = np.asarray(probabilities) * np.sum(counts)
    return float(np.sum((counts - expected) ** 2 / expected))


# chi-square quantiles with p = 1e-9 (far in the tail: a pass is no luck, a bug is far past)
CHI2_TAIL = {3: 47.0, 9: 62.0, 19: 78.0}


@pytest.mark.parametrize(
    "dtype,np_dtype",
    [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
     (TensorProto.FLOAT16, np.float16)],
)  # fmt: skip
def test_uniform_statistics_and_reference(dtype, np_dtype):
    low, high = -2.0, 3.0
    m = _module(_generator("RandomUniform", dtype=dtype, low=low, high=high, seed=5.0))
    m.run()
    y = m.get_output(0).numpy()
    assert y.dtype == np_dtype and y.shape == (200, 500)
    assert y.min() >= low and y.max() <= high
    _within_sigmas(y, (low + high) / 2, (high - low) ** 2 / 12)
    counts = np.histogram(y.astype(np.float64), bins=20, range=(low, high))[0]
    assert _chi_square(counts, np.full(20, 1 / 20)) < CHI2_TAIL[19]
    # the numpy reference draws the same values (in float64 it rounds a + (b - a) u twice
    # where the kernel's fma rounds once: one ulp of the range apart at most)
    seed = int(np.float64(5.0).view(np.uint64))
    ref = philox.random_numpy(0, (200, 500), np_dtype, "uniform", low, high, seed)
    if np_dtype == np.float64:
        np.testing.assert_allclose(y, ref, rtol=0, atol=4 * np.finfo(np.float64).eps)
    else:
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_normal_statistics(dtype):
    mean, scale = 1.5, 0.5
    m = _module(_generator("RandomNormal", dtype=dtype, mean=mean, scale=scale, seed=11.0))
    m.run()
    y = m.get_output(0).numpy().astype(np.float64)
    _within_sigmas(y, mean, scale**2)
    # the shape: counts between the quartiles and deciles of the normal
    edges = mean + scale * np.array([-np.inf, -1.2816, -0.6745, 0.0, 0.6745, 1.2816, np.inf])
    counts = np.histogram(y, bins=edges)[0]
    assert _chi_square(counts, [0.1, 0.15, 0.25, 0.25, 0.15, 0.1]) < 62.0


def test_each_run_draws_fresh_values_and_a_new_module_repeats_them():
    model = _generator("RandomNormal", shape=(64,), seed=1.0)
    mod, params = from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    first = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    runs = [first()[0] for _ in range(3)]
    assert not np.array_equal(runs[0], runs[1]) and not np.array_equal(runs[1], runs[2])
    again = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    for k in range(3):
        np.testing.assert_array_equal(again()[0], runs[k])  # run k draws what run k drew


def test_llvm_and_c_draw_the_same_values():
    nodes = [
        helper.make_node("RandomNormal", [], ["n"], shape=[33, 17], seed=2.0),
        helper.make_node("RandomUniform", [], ["u"], shape=[33, 17], seed=2.0,
                         dtype=TensorProto.DOUBLE),
        helper.make_node("RandomNormal", [], ["h"], shape=[33, 17], seed=3.0,
                         dtype=TensorProto.FLOAT16),
    ]  # fmt: skip
    model = make_model(nodes, {}, ["n", "u", "h"])
    llvm, c = _module(model, "llvm"), _module(model, "c")
    for _ in range(2):
        for a, b in zip(llvm(), c(), strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_run_counter_is_hidden_from_the_user():
    model = make_model(
        [helper.make_node("RandomUniformLike", ["x"], ["y"], seed=0.0)],
        {"x": ((3, 4), "float32")},
        ["y"],
    )
    m = _module(model)
    assert m.get_num_inputs() == 1 and m.get_input_info() == ({"x": (3, 4)}, {"x": "float32"})
    with pytest.raises(ValueError, match="no input"):
        m.set_input(RUN_COUNTER_INPUT, np.array(0, np.int64))
    m.set_input("x", np.zeros((3, 4), np.float32))
    m.run()  # the counter needs no set_input


def test_like_forms_take_shape_and_dtype_from_the_input():
    nodes = [
        helper.make_node("RandomUniformLike", ["x"], ["u"], seed=1.0),
        helper.make_node("RandomNormalLike", ["x"], ["n"], seed=1.0, dtype=TensorProto.DOUBLE),
    ]
    model = make_model(nodes, {"x": ((4, 5, 6), "float16")}, ["u", "n"])
    u, n = _module(model)(np.zeros((4, 5, 6), np.float16))
    assert (u.dtype, u.shape) == (np.float16, (4, 5, 6))
    assert (n.dtype, n.shape) == (np.float64, (4, 5, 6))


def test_without_a_seed_each_conversion_draws_its_own():
    model = _generator("RandomUniform", shape=(16,))
    a, b = _module(model)()[0], _module(model)()[0]
    assert not np.array_equal(a, b)


def test_threads_draw_distinct_runs():
    m = _module(_generator("RandomUniform", shape=(32,), seed=4.0))
    results = []
    threads = [threading.Thread(target=lambda: results.append(m()[0])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.tobytes() for r in results}) == 4


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bernoulli_rates(dtype):
    p = np.repeat(np.array([[0.0], [0.1], [0.5], [0.97], [1.0]], dtype), N // 5, axis=1)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=9.0)
    y = _module(make_model([node], {"p": p}, ["y"], opset=15))(p)[0]
    assert y.dtype == np.dtype(dtype) and set(np.unique(y)) <= {0, 1}
    for row, q in zip(y, p[:, 0], strict=True):
        sigma = np.sqrt(max(q * (1 - q), 1e-12) / row.size)
        assert abs(row.mean() - q) <= 6 * sigma


def test_bernoulli_output_dtype():
    p = np.full((10,), 0.5, np.float32)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=1.0, dtype=TensorProto.INT64)
    y = _module(make_model([node], {"p": p}, ["y"], opset=15))(p)[0]
    assert y.dtype == np.int64


@pytest.mark.parametrize("dtype,np_dtype", [(TensorProto.INT32, np.int32),
                                            (TensorProto.INT64, np.int64)])  # fmt: skip
def test_multinomial_frequencies(dtype, np_dtype):
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 1.0]])
    logits = np.log(probs + 1e-30).astype(np.float32) + 3.0  # unnormalized
    node = helper.make_node("Multinomial", ["x"], ["y"], sample_size=N // 2, seed=4.0,
                            dtype=dtype)  # fmt: skip
    y = _module(make_model([node], {"x": logits}, ["y"]))(logits)[0]
    assert y.dtype == np_dtype and y.shape == (3, N // 2)
    for row, q in zip(y, probs, strict=True):
        counts = np.bincount(row, minlength=4)
        assert np.all(counts[q == 0] == 0)  # a class of probability 0 is never drawn
        live = q > 0
        if live.sum() > 1:
            assert _chi_square(counts[live], q[live]) < CHI2_TAIL[3]


def _dropout_model(ratio, training, n_outputs=2, dtype="float32"):
    outs = ["y", "mask"][:n_outputs]
    node = helper.make_node("Dropout", ["x", "r", "t"], outs, seed=3)
    inits = {"r": np.array(ratio, dtype), "t": np.array(training)}
    return make_model([node], {"x": ((100, 1000), dtype)}, outs, inits, opset=13)


@pytest.mark.parametrize("ratio", [0.1, 0.5, 0.8])
def test_training_dropout_masks_and_scales(ratio):
    x = np.random.default_rng(0).standard_normal((100, 1000)).astype(np.float32)
    m = _module(_dropout_model(ratio, True))
    y, mask = m(x)
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    keep = 1 - ratio
    assert abs(mask.mean() - keep) <= 6 * np.sqrt(keep * ratio / mask.size)
    np.testing.assert_allclose(y, np.where(mask, x / np.float32(keep), 0), rtol=1e-6)
    assert not np.array_equal(m(x)[1], mask)  # a fresh mask on the next run


def test_dropout_ratio_zero_and_inference_are_the_identity():
    x = np.random.default_rng(1).standard_normal((100, 1000)).astype(np.float32)
    for ratio, training in ((0.0, True), (0.5, False)):
        y, mask = _module(_dropout_model(ratio, training))(x)
        np.testing.assert_array_equal(y, x)
        assert mask.all()


def test_symbolic_dims_and_an_exported_library_keep_the_runs(tmp_path):
    """A model with a dynamic batch: the counter input rides along the dynamic plan, and a
    loaded library's module draws, run for run, what the built one drew."""
    nodes = [helper.make_node("RandomNormal", [], ["r"], shape=[1, 4], seed=2.0),
             helper.make_node("Add", ["x", "r"], ["y"])]  # fmt: skip
    model = make_model(nodes, {"x": (("n", 4), "float32")}, ["y"])
    mod, params = from_onnx(model, shape_dict={"x": (("n", 1, 64), 4)})
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    assert m.get_input_info() == ({"x": ("n", 4)}, {"x": "float32"})
    a, b = m(np.zeros((3, 4), np.float32))[0], m(np.zeros((5, 4), np.float32))[0]
    assert a.shape == (3, 4) and b.shape == (5, 4) and not np.array_equal(a[0], b[0])
    lib.export_library(tmp_path / "random.so")
    loaded = tessera.runtime.load_module(str(tmp_path / "random.so"))
    again = tessera.runtime.GraphModule(loaded["default"](tessera.cpu(0)))
    np.testing.assert_array_equal(again(np.zeros((3, 4), np.float32))[0], a)
    np.testing.assert_array_equal(again(np.zeros((5, 4), np.float32))[0], b)
