import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tessera.frontend import from_onnx
from tessera.graph import parse
from tessera.graph.ir import source_nodes
from tessera.ir.structural_equal import assert_structural_equal
from tessera.transform import PassContext, fuse_ops, fused_groups


def _fuse(text, opt_level=2, **config):
    with PassContext(opt_level=opt_level, config=config):
        return fuse_ops(parse(text) if isinstance(text, str) else text)


def _group_ops(func):
    return [[c.op.name for c in g.body] for g in fused_groups(func)]


CONV_BIAS_RELU = """def main(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 3, 3], %b: f32[4, 1, 1]) {
  %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]);
  %2 = add(%1, %b); %3 = nn.relu(%2); return %3 }"""


def test_conv_bias_relu_become_one_group(same_outputs):
    expected = parse(
        """def main(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 3, 3], %b: f32[4, 1, 1]) {
          %3 = fused(%x, %w, %b, func=fn fused_nn_conv2d_add_nn_relu(
              %p0: f32[1, 3, 8, 8], %p1: f32[4, 3, 3, 3], %p2: f32[4, 1, 1]) {
            %1 = nn.conv2d(%p0, %p1, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]);
            %2 = add(%1, %p2); %3 = nn.relu(%2); return %3
          }) : f32[1, 4, 8, 8];
          return %3 }"""
    )
    after = _fuse(CONV_BIAS_RELU)
    assert_structural_equal(after, expected)
    same_outputs(parse(CONV_BIAS_RELU), after)


def test_text_round_trips():
    after = _fuse(CONV_BIAS_RELU)
    assert_structural_equal(parse(str(after)), after)


def test_diamond_fuses_into_one_group(same_outputs):
    before = parse(
        """def main(%x: f32[2, 8]) {
          %e = exp(%x); %a = nn.relu(%e); %b = sigmoid(%e); %c = add(%a, %b); return %c }"""
    )
    after = _fuse(before)
    assert _group_ops(after) == [["exp", "nn.relu", "sigmoid", "add"]]
    same_outputs(before, after)


def test_diamond_through_an_opaque_op_does_not_fuse_across_it(same_outputs):
    before = parse(
        """def main(%x: f32[2, 8]) {
          %e = exp(%x); %a = nn.softmax(%e); %b = nn.relu(%e); %c = add(%a, %b); return %c }"""
    )
    after = _fuse(before)
    assert _group_ops(after) == [["exp"], ["nn.softmax"], ["nn.relu", "add"]]
    assert [g.name for g in fused_groups(after)] == [
        "fused_exp",
        "fused_nn_softmax",
        "fused_nn_relu_add",
    ]
    same_outputs(before, after)


def test_reduction_takes_its_inputs_and_ends_its_group(same_outputs):
    before = parse(
        """def main(%x: f32[4, 8]) {
          %t = transpose(%x, axes=[1, 0]); %e = exp(%t); %s = sum(%e, axis=[0]);
          %r = sqrt(%s); %y = multiply(%r, %r); return %y }"""
    )
    after = _fuse(before)
    assert _group_ops(after) == [["transpose", "exp", "sum"], ["sqrt", "multiply"]]
    same_outputs(before, after)


def test_opaque_ops_stand_alone():
    before = parse(
        """def main(%x: f32[4, 8]) {
          %a = exp(%x); %b = nn.softmax(%a); %c = nn.relu(%b); return %c }"""
    )
    assert _group_ops(_fuse(before)) == [["exp"], ["nn.softmax"], ["nn.relu"]]


def test_elementwise_does_not_fuse_into_a_conv_input():
    before = parse(
        """def main(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 1, 1]) {
          %r = nn.relu(%x);
          %1 = nn.conv2d(%r, %w, strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]);
          return %1 }"""
    )
    assert _group_ops(_fuse(before)) == [["nn.relu"], ["nn.conv2d"]]


def test_injective_chain_fuses_into_its_consumer_but_not_into_a_conv(same_outputs):
    before = parse(
        """def main(%x: f32[2, 3, 4], %w: f32[5, 12]) {
          %t = transpose(%x, axes=[0, 2, 1]); %r = reshape(%t, newshape=[2, 12]);
          %d = nn.dense(%r, %w); %n = negative(%d); %f = reverse(%n, axis=[1]);
          %e = exp(%f); return %e }"""
    )
    after = _fuse(before)
    assert _group_ops(after) == [
        ["transpose", "reshape"],
        ["nn.dense", "negative"],
        ["reverse", "exp"],
    ]
    same_outputs(before, after)


def test_shared_value_with_an_outside_use_ends_the_group(same_outputs):
    before = parse(
        """def main(%x: f32[4]) {
          %a = exp(%x); %b = nn.relu(%a); %c = sigmoid(%b); return %b, %c }"""
    )
    after = _fuse(before)
    assert _group_ops(after) == [["exp", "nn.relu"], ["sigmoid"]]
    same_outputs(before, after)


def test_multi_output_group_and_scalar_constants_inside():
    before = parse(
        """def main(%x: f32[4], %y: f32[4]) {
          %k = constant(2.0) : f32[]; %v = constant([1.0, 2.0, 3.0, 4.0]) : f32[4];
          %a = multiply(%x, %k); %b = add(%a, %v); %s = nn.softmax(%a);
          %c = add(%b, %s); return %c }"""
    )
    after = _fuse(before)
    (first, *_) = fused_groups(after)
    assert [c.op.name for c in first.body] == ["multiply"]
    assert [c.name for c in first.constants] == ["k"]  # the scalar lives in the kernel
    assert [p.type.shape for p in first.params] == [(4,)]
    assert [c.name for c in after.constants] == ["v"]  # the vector is passed in


def test_opt_level_0_keeps_every_op_alone():
    after = _fuse(CONV_BIAS_RELU, opt_level=0)
    assert _group_ops(after) == [["nn.conv2d"], ["add"], ["nn.relu"]]


def test_max_depth_limits_a_group():
    text = (
        "def main(%x: f32[4]) { %a = exp(%x); %b = exp(%a); %c = exp(%b); %d = exp(%c); return %d }"
    )
    assert _group_ops(_fuse(text, **{"fuse_ops.max_depth": 2})) == [["exp", "exp"], ["exp", "exp"]]


def test_fusing_twice_changes_nothing():
    once = _fuse(CONV_BIAS_RELU)
    assert _fuse(once) is once


def test_fused_calls_among_new_calls_are_kept_as_they_are():
    once = _fuse(CONV_BIAS_RELU)
    head, tail = str(once).rsplit("return %3", 1)  # the outer function's return
    text = head + "%4 = exp(%3); return %4" + tail
    twice = _fuse(text)
    assert _group_ops(twice) == [["nn.conv2d", "add", "nn.relu"], ["exp"]]


def test_long_and_repeated_names_stay_unique():
    chain = "; ".join(f"%a{i} = tanh(%a{i - 1})" for i in range(1, 30))
    text = f"def main(%a0: f32[4]) {{ {chain}; %s = nn.softmax(%a29); %t = tanh(%s); return %t }}"
    names = [g.name for g in fused_groups(_fuse(text))]
    assert len(set(names)) == len(names) and max(map(len, names)) <= 80


@pytest.mark.parametrize("seed", range(12))
def test_random_dags_keep_their_numerics(seed, make_random_dag, same_outputs):
    before = parse(make_random_dag(seed))
    after = _fuse(before)
    after.verify()
    assert sum(len(g.body) for g in fused_groups(after)) == len(before.body)
    same_outputs(before, after)


def _onnx_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])
    rng = np.random.default_rng(0)
    inits = [
        onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype("f4"), "w"),
        onnx.numpy_helper.from_array(rng.standard_normal(4).astype("f4"), "b"),
        onnx.numpy_helper.from_array(rng.standard_normal((4, 5)).astype("f4"), "fc"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu1"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["m"], name="fc"),
        helper.make_node("Sigmoid", ["m"], ["y"], name="act"),
    ]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_onnx_model_keeps_its_numerics(same_outputs):
    mod, params = from_onnx(_onnx_model())
    before = mod["main"]
    after = _fuse(mod)["main"]
    ops = _group_ops(after)
    assert ops[0] == ["nn.conv2d", "add", "nn.relu"]
    assert ["matmul", "sigmoid"] in ops
    same_outputs(before, after, rtol=1e-4, atol=1e-5)


def test_fused_calls_answer_for_their_members_source_nodes():
    text = """def main(%x: f32[1, 3, 8, 8], %w: f32[4, 3, 3, 3], %b: f32[4, 1, 1]) {
      %1 = nn.conv2d(%x, %w, strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]) @"conv1";
      %2 = add(%1, %b) @"conv1"; %3 = nn.relu(%2) @"relu1";
      %4 = nn.global_avg_pool2d(%3) @"pool"; %5 = exp(%4); return %5 }"""
    after = _fuse(text)
    assert [c.span for c in after.body] == [("conv1", "relu1"), ("pool",)]
    (conv_group, pool_group) = fused_groups(after)
    assert [c.span for c in conv_group.body] == [("conv1",), ("conv1",), ("relu1",)]
    assert [c.span for c in pool_group.body] == [("pool",), ()]
    assert [source_nodes(c) for c in after.body] == [["conv1", "relu1"], ["pool"]]
    assert_structural_equal(parse(str(after)), after)
    assert [c.span for c in parse(str(after)).body] == [c.span for c in after.body]


def test_every_onnx_node_that_computes_maps_to_a_kernel():
    mod, _ = from_onnx(_onnx_model())
    after = _fuse(mod)["main"]
    assert [source_nodes(c) for c in after.body] == [
        ["conv1", "relu1"],
        ["pool"],
        ["flatten"],
        ["fc", "act"],
    ]
