import numpy as np
import pytest

from tessera.graph import parse
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import simplify_inference

RNG = np.random.default_rng(0)


def _bn_params(c, dtype="float32"):
    return {
        "g": RNG.uniform(0.5, 2, c).astype(dtype),
        "be": RNG.standard_normal(c).astype(dtype),
        "m": RNG.standard_normal(c).astype(dtype),
        "v": RNG.uniform(0.5, 2, c).astype(dtype),
    }


def _scale_shift(p, eps=1e-5):
    s = p["g"].astype(np.float64) / np.sqrt(p["v"].astype(np.float64) + eps)
    return s, p["be"] - p["m"] * s


BN_CONSTS = """%g = constant(...) : f32[4]; %be = constant(...) : f32[4];
  %m = constant(...) : f32[4]; %v = constant(...) : f32[4];"""


def test_batch_norm_folds_into_conv_weights(same_outputs):
    consts = {"w": RNG.standard_normal((4, 3, 3, 3)).astype("f4"), **_bn_params(4)}
    before = parse(
        f"""def main(%x: f32[1, 3, 6, 6]) {{
          %w = constant(...) : f32[4, 3, 3, 3]; {BN_CONSTS}
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]);
          %2 = nn.batch_norm(%1, %g, %be, %m, %v, epsilon=1e-5); %3 = nn.relu(%2);
          return %3 }}""",
        constants=consts,
    )
    s, t = _scale_shift(consts)
    expected = parse(
        """def main(%x: f32[1, 3, 6, 6]) {
          %w2 = constant(...) : f32[4, 3, 3, 3]; %b = constant(...) : f32[4, 1, 1];
          %1 = nn.conv2d(%x, %w2, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]);
          %2 = add(%1, %b); %3 = nn.relu(%2); return %3 }""",
        constants={
            "w2": (consts["w"] * s[:, None, None, None]).astype("f4"),
            "b": t.reshape(4, 1, 1).astype("f4"),
        },
    )
    after = simplify_inference(before)
    assert_structural_equal(after, expected)
    same_outputs(before, after, rtol=1e-4, atol=1e-5)


def test_batch_norm_merges_with_a_conv_bias(same_outputs):
    consts = {
        "w": RNG.standard_normal((4, 3, 1, 1)).astype("f4"),
        "bias": RNG.standard_normal((4, 1, 1)).astype("f4"),
        **_bn_params(4),
    }
    before = parse(
        f"""def main(%x: f32[2, 3, 5, 5]) {{
          %w = constant(...) : f32[4, 3, 1, 1]; %bias = constant(...) : f32[4, 1, 1]; {BN_CONSTS}
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]);
          %2 = add(%1, %bias); %3 = nn.batch_norm(%2, %g, %be, %m, %v); return %3 }}""",
        constants=consts,
    )
    after = simplify_inference(before)
    assert [c.op.name for c in after.body] == ["nn.conv2d", "add"]
    assert len(after.constants) == 2  # the folded weight and one bias
    same_outputs(before, after, rtol=1e-4, atol=1e-5)


def test_batch_norm_folds_into_dense(same_outputs):
    consts = {"w": RNG.standard_normal((4, 6)).astype("f4"), **_bn_params(4)}
    before = parse(
        f"""def main(%x: f32[3, 6]) {{
          %w = constant(...) : f32[4, 6]; {BN_CONSTS}
          %1 = nn.dense(%x, %w); %2 = nn.batch_norm(%1, %g, %be, %m, %v, axis=1); return %2 }}""",
        constants=consts,
    )
    after = simplify_inference(before)
    assert [c.op.name for c in after.body] == ["nn.dense", "add"]
    same_outputs(before, after, rtol=1e-4, atol=1e-5)


def test_batch_norm_with_another_use_becomes_multiply_add(same_outputs):
    consts = {"w": RNG.standard_normal((4, 3, 1, 1)).astype("f4"), **_bn_params(4)}
    before = parse(
        f"""def main(%x: f32[1, 3, 4, 4]) {{
          %w = constant(...) : f32[4, 3, 1, 1]; {BN_CONSTS}
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]);
          %2 = nn.batch_norm(%1, %g, %be, %m, %v); %3 = add(%1, %2); return %3 }}""",
        constants=consts,
    )
    s, t = _scale_shift(consts)
    expected = parse(
        """def main(%x: f32[1, 3, 4, 4]) {
          %w = constant(...) : f32[4, 3, 1, 1];
          %s = constant(...) : f32[4, 1, 1]; %t = constant(...) : f32[4, 1, 1];
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]);
          %a = multiply(%1, %s); %2 = add(%a, %t); %3 = add(%1, %2); return %3 }""",
        constants={
            "w": consts["w"],
            "s": s.reshape(4, 1, 1).astype("f4"),
            "t": t.reshape(4, 1, 1).astype("f4"),
        },
    )
    after = simplify_inference(before)
    assert_structural_equal(after, expected)
    same_outputs(before, after, rtol=1e-4, atol=1e-5)


def test_batch_norm_on_a_parameter_and_with_variable_statistics(same_outputs):
    before = parse(
        f"""def main(%x: f32[2, 4, 3], %gv: f32[4]) {{
          {BN_CONSTS}
          %1 = nn.batch_norm(%x, %g, %be, %m, %v); %2 = nn.batch_norm(%1, %gv, %be, %m, %v);
          return %2 }}""",
        constants=_bn_params(4),
    )
    after = simplify_inference(before)
    assert [c.op.name for c in after.body] == ["multiply", "add", "nn.batch_norm"]
    same_outputs(before, after, rtol=1e-4, atol=1e-5)


def test_identity_ops_are_removed(same_outputs):
    before = parse(
        """def main(%x: f32[2, 3]) {
          %one = constant([[1.0, 1.0, 1.0]]) : f32[1, 3]; %zero = constant(0.0) : f32[];
          %a = copy(%x); %b = reshape(%a, newshape=[2, 3]); %c = transpose(%b, axes=[0, 1]);
          %d = cast(%c, dtype=f32); %e = multiply(%d, %one); %f = add(%zero, %e);
          %g = subtract(%f, %zero); %h = divide(%g, %one); %i = expand(%h, shape=[2, 3]);
          %y = exp(%i); return %y }"""
    )
    expected = parse("def main(%x: f32[2, 3]) { %y = exp(%x); return %y }")
    after = simplify_inference(before)
    assert_structural_equal(after, expected)
    same_outputs(before, after)


def test_non_identities_stay():
    before = parse(
        """def main(%x: f32[2, 3], %s: f32[1]) {
          %one = constant([[1.0], [1.0]]) : f32[2, 1]; %two = constant(2.0) : f32[];
          %big = constant([[[1.0, 1.0, 1.0]]]) : f32[1, 1, 3];
          %a = reshape(%x, newshape=[3, 2]); %b = transpose(%x, axes=[1, 0]);
          %c = cast(%x, dtype=f16); %d = multiply(%x, %two); %e = multiply(%x, %big);
          %f = subtract(%one, %x); %g = divide(%one, %x); %h = add(%x, %s);
          return %a, %b, %c, %d, %e, %f, %g, %h }"""
    )
    assert simplify_inference(before) is before


def test_identity_output_of_the_function():
    before = parse("def main(%x: f32[2]) { %a = copy(%x); %b = exp(%a); return %a, %b }")
    expected = parse("def main(%x: f32[2]) { %b = exp(%x); return %x, %b }")
    assert_structural_equal(simplify_inference(before), expected)


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_folded_weights_keep_the_dtype(dtype, same_outputs):
    t = {"float16": "f16", "float64": "f64"}[dtype]
    consts = {"w": RNG.standard_normal((4, 6)).astype(dtype), **_bn_params(4, dtype)}
    before = parse(
        f"""def main(%x: {t}[3, 6]) {{
          %w = constant(...) : {t}[4, 6]; %g = constant(...) : {t}[4];
          %be = constant(...) : {t}[4]; %m = constant(...) : {t}[4]; %v = constant(...) : {t}[4];
          %1 = nn.dense(%x, %w); %2 = nn.batch_norm(%1, %g, %be, %m, %v); return %2 }}""",
        constants=consts,
    )
    after = simplify_inference(before)
    after.verify()
    tol = 2e-2 if dtype == "float16" else 1e-9
    same_outputs(before, after, rtol=tol, atol=tol)


def _spans(func):
    return [(c.op.name, c.span) for c in func.body]


def test_folded_batch_norm_keeps_its_source_nodes(same_outputs):
    consts = {"w": RNG.standard_normal((4, 3, 3, 3)).astype("f4"), **_bn_params(4)}
    before = parse(
        f"""def main(%x: f32[1, 3, 6, 6]) {{
          %w = constant(...) : f32[4, 3, 3, 3]; {BN_CONSTS}
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]) @"conv";
          %2 = nn.batch_norm(%1, %g, %be, %m, %v) @"bn"; %3 = nn.relu(%2) @"relu";
          return %3 }}""",
        constants=consts,
    )
    after = simplify_inference(before)
    # The scaled conv does the batch-norm's scaling, the add its shift.
    assert _spans(after) == [
        ("nn.conv2d", ("conv", "bn")),
        ("add", ("bn",)),
        ("nn.relu", ("relu",)),
    ]
    same_outputs(before, after, rtol=1e-4, atol=1e-5)


def test_batch_norm_merged_with_a_bias_add_keeps_both_names():
    consts = {
        "w": RNG.standard_normal((4, 3, 1, 1)).astype("f4"),
        "bias": RNG.standard_normal((4, 1, 1)).astype("f4"),
        **_bn_params(4),
    }
    before = parse(
        f"""def main(%x: f32[2, 3, 5, 5]) {{
          %w = constant(...) : f32[4, 3, 1, 1]; %bias = constant(...) : f32[4, 1, 1]; {BN_CONSTS}
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]) @"conv";
          %2 = add(%1, %bias) @"conv", "bias"; %3 = nn.batch_norm(%2, %g, %be, %m, %v) @"bn";
          return %3 }}""",
        constants=consts,
    )
    assert _spans(simplify_inference(before)) == [
        ("nn.conv2d", ("conv", "bn")),
        ("add", ("conv", "bias", "bn")),
    ]


def test_standalone_batch_norm_and_identities_keep_source_nodes():
    before = parse(
        f"""def main(%x: f32[2, 4, 3]) {{
          {BN_CONSTS}
          %1 = nn.batch_norm(%x, %g, %be, %m, %v) @"bn"; %2 = copy(%1) @"copy";
          %3 = exp(%2) @"exp"; return %3 }}""",
        constants=_bn_params(4),
    )
    after = simplify_inference(before)
    # The copy computes nothing, so no kernel answers for it.
    assert _spans(after) == [("multiply", ("bn",)), ("add", ("bn",)), ("exp", ("exp",))]
