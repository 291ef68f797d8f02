"""tessera.frontend.onnx_backend (the onnx.backend API) and the ONNX node test suite through
scripts/conformance.py: a representative subset by default, the whole suite (pass rate and the
coverage page up to date) under `-m slow`."""

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera.frontend import UnsupportedOpError, onnx_backend
from tessera.frontend.onnx_backend import TesseraBackend

REPO = Path(__file__).resolve().parents[2]
R = np.random.default_rng(3)
N = helper.make_node


def _conformance():
    spec = importlib.util.spec_from_file_location("conformance", REPO / "scripts/conformance.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["conformance"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def model(nodes, inputs, outputs, opset=17):
    """inputs/outputs: [(name, elem type, shape)]; a shape may hold dim names."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "g", [vi(*i) for i in inputs], [vi(*o) for o in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


F, I64 = TensorProto.FLOAT, TensorProto.INT64


# -- the Backend API ----------------------------------------------------------------------------


def test_prepare_run_by_list_dict_and_single_array():
    m = model([N("Relu", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F, [2, 3])])
    x = R.standard_normal((2, 3)).astype(np.float32)
    rep = onnx_backend.prepare(m, "CPU")
    for inputs in ([x], {"x": x}, x):
        (y,) = rep.run(inputs)
        np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert rep.run([x]).y.shape == (2, 3)  # outputs are a namedtuple by output name
    (y,) = TesseraBackend.run_model(m, [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_runs_reuse_the_module_and_return_their_own_outputs():
    """A prepared model makes its GraphModule once per compiled signature (a fresh one every
    run cost ~5 ms a call); each run's outputs are copies that the next run leaves alone."""
    m = model([N("Neg", ["x"], ["y"])], [("x", F, [3])], [("y", F, [3])])
    rep = onnx_backend.prepare(m)
    a, b = np.array([1, 2, 3], np.float32), np.array([4, 5, 6], np.float32)
    (ya,) = rep.run([a])
    (yb,) = rep.run([b])
    np.testing.assert_array_equal(ya, -a)
    np.testing.assert_array_equal(yb, -b)
    assert len(rep._modules) == 1


def test_supports_device():
    assert TesseraBackend.supports_device("CPU")
    assert not TesseraBackend.supports_device("CUDA")
    assert not TesseraBackend.supports_device("TPU:7")
    with pytest.raises(ValueError, match="runs on CPU"):
        TesseraBackend.prepare(model([], [], []), "CUDA")


def test_run_node():
    node = N("Gemm", ["a", "b", "c"], ["y"], alpha=0.5, transB=1)
    a, b, c = (R.standard_normal(s).astype(np.float32) for s in ((3, 4), (5, 4), (5,)))
    (y,) = TesseraBackend.run_node(node, [a, b, c])
    np.testing.assert_allclose(y, 0.5 * a @ b.T + c, rtol=1e-5, atol=1e-6)
    (y,) = TesseraBackend.run_node(N("Add", ["p", "q"], ["s"]), {"p": a, "q": a})
    np.testing.assert_array_equal(y, a + a)


def test_dynamic_dims_compile_once_per_input_shape():
    m = model([N("Softmax", ["x"], ["y"], axis=-1)], [("x", F, ["n", 4])], [("y", F, ["n", 4])])
    rep = onnx_backend.prepare(m)
    for rows in (1, 3, 3, 5):
        x = R.standard_normal((rows, 4)).astype(np.float32)
        (y,) = rep.run([x])
        e = np.exp(x - x.max(-1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    assert len(rep._compiled) == 3


def test_shape_inputs_are_bound_by_value_and_join_the_cache_key():
    m = model(
        [N("Reshape", ["x", "shape"], ["y"])], [("x", F, [2, 6]), ("shape", I64, [2])],
        [("y", F, None)],
    )  # fmt: skip
    rep = onnx_backend.prepare(m)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ((3, 4), (4, -1), (3, 4)):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert len(rep._compiled) == 2
    assert set(rep._bound.values()) == {("shape",)}


def test_a_model_without_calls_still_runs():
    m = model(
        [N("Identity", ["x"], ["y"]), N("Shape", ["x"], ["s"])], [("x", F, [2, 3])],
        [("y", F, [2, 3]), ("s", I64, [2])],
    )  # fmt: skip
    x = R.standard_normal((2, 3)).astype(np.float32)
    y, s = onnx_backend.prepare(m).run([x])
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(s, [2, 3])


def test_c_target_and_opt_level():
    m = model([N("Tanh", ["x"], ["y"])], [("x", F, [7])], [("y", F, [7])])
    x = R.standard_normal(7).astype(np.float32)
    for kwargs in ({"target": "c"}, {"opt_level": 0}):
        (y,) = onnx_backend.prepare(m, **kwargs).run([x])
        np.testing.assert_allclose(y, np.tanh(x), rtol=1e-5, atol=1e-6)


def test_errors():
    m = model([N("Relu", ["x"], ["y"])], [("x", F, [2, 3])], [("y", F, [2, 3])])
    rep = onnx_backend.prepare(m)
    with pytest.raises(ValueError, match=r"input 'x': the model declares shape \(2, 3\)"):
        rep.run([np.zeros((3, 2), np.float32)])
    with pytest.raises(ValueError, match="input 'x' is missing"):
        rep.run({})
    with pytest.raises(ValueError, match="has no input 'z'"):
        rep.run({"x": np.zeros((2, 3), np.float32), "z": 1})
    bad = model([N("NoSuchOp", ["x"], ["y"], name="mystery")], [("x", F, [2])], [("y", F, [2])])
    with pytest.raises(UnsupportedOpError, match="mystery: NoSuchOp"):
        onnx_backend.prepare(bad)
    with pytest.raises(TypeError, match="expects an onnx.ModelProto"):
        onnx_backend.prepare("model.onnx")


def test_the_official_backend_test_runner_accepts_the_backend():
    import unittest

    import onnx.backend.test

    suite = onnx.backend.test.BackendTest(TesseraBackend, __name__)
    suite.include(r"^test_(relu|abs)_cpu$")  # the others are skipped
    tests = unittest.defaultTestLoader.loadTestsFromTestCase(
        suite.test_cases["OnnxBackendNodeModelTest"]
    )
    with open("/dev/null", "w") as quiet:
        result = unittest.TextTestRunner(stream=quiet).run(tests)
    assert result.testsRun - len(result.skipped) == 2
    assert result.wasSuccessful()


# -- the node test suite ------------------------------------------------------------------------

# One or a few node tests of each op family (element-wise, broadcast, int/uint/bool/float16/
# float64 dtypes, rank-0 and zero-size tensors, reductions with axes inputs, shape ops whose
# shapes are inputs, conv/pool/norms, attention, losses, ...).
SUBSET = """
abs add_bcast add_uint8 and_bcast4v4d argmax_negative_axis_keepdims_example attention_3d
attention_4d_gqa_causal attention_4d_with_past_and_present averagepool_2d_pads batchnorm_epsilon
bitshift_right_int8_negative_input bitwise_not_3d cast_FLOAT_to_FLOAT16 ceil celu
clip_default_int8_min concat_3d_axis_negative_1 constantofshape_int_shape_zero
conv_with_strides_padding convtranspose_pads cos cumsum_1d_reverse_exclusive
depthtospace_crd_mode_example div_uint8 dropout_default einsum_batch_diagonal elu_default
equal_bcast erf expand_dim_changed flatten_negative_axis1 gather_2d_indices
gather_elements_negative_indices gathernd_example_int32 gemm_all_attributes globalaveragepool
greater_equal_bcast selu_example group_normalization_example hardmax_axis_1 hardsigmoid identity
instancenorm_epsilon isinf_negative layer_normalization_4d_axis1 leakyrelu lrn_default
lppool_2d_pads matmul_4d max_int64 maxpool_2d_pads mean_two_inputs min_one_input
mod_mixed_sign_float32 mul_bcast neg nllloss_NCd1d2d3_sum_weight_high_ii nonzero_example not_2d
onehot_negative_indices or_bcast4v3d pow_types_int64_float32 prelu_broadcast
range_int32_type_negative_delta reciprocal reduce_l2_keep_dims_example
reduce_log_sum_exp_empty_set reduce_max_bool_inputs reduce_mean_default_axes_keepdims_random
reduce_sum_empty_axes_input_noop relu reshape_allowzero_reordered reshape_negative_dim
resize_downsample_scales_linear resize_upsample_sizes_nearest_floor_align_corners
rms_normalization_3d_axis1_epsilon rotary_embedding_interleaved round
sce_mean_weight_ii_3d_log_prob shape_start_negative_1 sigmoid sign size slice_negative_axes
softmax_axis_1 softplus_example spacetodepth split_equal_parts_1d_opset18 sqrt
squeeze_negative_axes sub_uint8 sum_one_input tanh tile_precomputed top_k_smallest tril_neg
transpose_all_permutations_3 unsqueeze_negative_axes where_long_example xor_bcast3v2d
""".split()


@pytest.fixture(scope="module")
def conformance():
    return _conformance()


@pytest.fixture(scope="module")
def node_cases(conformance):
    return {c.name: c for c in conformance.load_cases()}


def test_a_representative_subset_of_the_node_tests_passes(conformance, node_cases):
    names = [f"test_{n}" for n in SUBSET]
    assert not [n for n in names if n not in node_cases]
    results = conformance.run_suite([node_cases[n] for n in names], jobs=2, timeout=60)
    failed = [f"{r.name}: [{r.reason}] {r.message}" for r in results if not r.passed]
    assert not failed, "\n".join(failed)


def test_failures_are_classified(conformance, node_cases):
    cases = [node_cases[n] for n in ("test_image_decoder_decode_png_rgb", "test_equal_string",
                                      "test_bernoulli_seed")]  # fmt: skip
    results = conformance.run_suite(cases, jobs=2)
    reasons = ["unsupported op", "dtype unsupported", "numerical mismatch"]
    assert [r.reason for r in results] == reasons
    assert "ImageDecoder" in results[0].message and "STRING" in results[1].message
    assert [r.op for r in results] == ["ImageDecoder", "Equal", "Bernoulli"]
    assert "Philox" in conformance.why("test_bernoulli_seed")


def test_op_of_an_expanded_test_is_the_expanded_op(conformance, node_cases):
    ops = conformance.default_ops()
    case = node_cases["test_layer_normalization_2d_axis0_expanded"]
    assert len(case.model.graph.node) > 1
    assert conformance.op_of(case, ops) == "LayerNormalization"


def _without_messages(text: str) -> str:
    """The page without the failure messages (they may name values that vary by machine)."""
    return re.sub(r"^(\| test_[^|]*\|[^|]*\|[^|]*\|).*$", r"\1", text, flags=re.M)


@pytest.mark.slow
def test_the_full_node_suite_passes_80_percent_and_the_page_is_up_to_date(conformance):
    results = conformance.run_suite(conformance.load_cases(), jobs=2)
    passed = sum(r.passed for r in results)
    assert passed / len(results) >= 0.97, f"{passed} of {len(results)}"
    page = conformance.DOC.read_text()
    assert _without_messages(page) == _without_messages(conformance.render(results)), (
        "docs/onnx-coverage.md is out of date: run scripts/conformance.py"
    )
    assert onnx.__version__ in page


def test_the_page_renders_again_from_a_verbose_log_and_says_why(conformance, node_cases):
    cases = [node_cases[n] for n in ("test_abs", "test_bernoulli", "test_string_concat")]
    log = "\n".join([
        "[1/3] test_abs (2.1s): ok",
        "[2/3] test_bernoulli (1.0s): FAIL [unsupported op] the model uses 1 node(s) ...",
        "[3/3] test_string_concat (0.9s): FAIL [dtype unsupported] 'x' has element type STRING",
        "3 of 3 ...",
    ])  # fmt: skip
    results = conformance.results_from_log(log, cases)
    assert [r.reason for r in results] == [None, "unsupported op", "dtype unsupported"]
    page = conformance.render(results)
    assert "## Why the remaining cases fail" in page
    assert "numpy's unseeded generator" in page and "holds no strings" in page
    with pytest.raises(SystemExit, match="no result for 1 case"):
        conformance.results_from_log("\n".join(log.splitlines()[:2]), cases)
