"""alter_layout: convs and the ops around them in NCHW[x]c (before/after text), numerics kept
(graph interpreter), the block rule, targets that keep NCHW, and whole builds vs the interpreter."""

import numpy as np
import pytest

import tessera
from tessera.graph import parse, run_function
from tessera.ir.module import IRModule
from tessera.ir.structural_equal import assert_structural_equal
from tessera.topi.x86.layout import transform_array
from tessera.topi.x86.strategy import channel_block
from tessera.transform import alter_layout

RNG = np.random.default_rng(0)
AVX512 = tessera.Target("llvm -mcpu=skylake-avx512")
AVX2 = tessera.Target("llvm -mcpu=haswell")
CONV = "strides=[1, 1], padding=[1, 1, 1, 1], dilation=[1, 1]"
CONV1 = "strides=[1, 1], padding=[0, 0, 0, 0], dilation=[1, 1]"


def _w(*shape):
    return RNG.standard_normal(shape).astype("f4")


def test_conv_bias_relu_chain_is_blocked_weights_repacked():
    w, b = _w(32, 16, 3, 3), _w(32, 1, 1)
    before = parse(
        f"""def main(%x: f32[1, 16, 8, 8]) {{
          %w = constant(...) : f32[32, 16, 3, 3]; %b = constant(...) : f32[32, 1, 1];
          %1 = nn.conv2d(%x, %w, {CONV}); %2 = add(%1, %b); %3 = nn.relu(%2); return %3 }}""",
        constants={"w": w, "b": b},
    )
    expected = parse(
        f"""def main(%x: f32[1, 16, 8, 8]) {{
          %w = constant(...) : f32[2, 1, 3, 3, 16, 16]; %b = constant(...) : f32[1, 2, 1, 1, 16];
          %x1 = layout_transform(%x, src_layout="NCHW", dst_layout="NCHW16c");
          %1 = nn.conv2d_nchwc(%x1, %w, {CONV}); %2 = add(%1, %b); %3 = nn.relu(%2);
          %4 = layout_transform(%3, src_layout="NCHW16c", dst_layout="NCHW"); return %4 }}""",
        constants={
            "w": transform_array(w, "OIHW", "OIHW16i16o"),
            "b": b.reshape(1, 2, 1, 1, 16),
        },
    )
    after = alter_layout(before, target=AVX512)
    assert_structural_equal(after, expected)
    _check_same(before, after)


def test_ops_between_convs_stay_blocked():
    """Residual add, max pool, concat along channels, batch-norm leftovers (multiply + add by
    per-channel constants), clip: no layout transform between the convs."""
    consts = {"w1": _w(32, 8, 3, 3), "w2": _w(32, 32, 1, 1), "w3": _w(16, 64, 3, 3)}
    consts |= {"s": _w(64, 1, 1), "t": _w(64, 1, 1)}
    before = parse(
        f"""def main(%x: f32[2, 8, 9, 9]) {{
          %w1 = constant(...) : f32[32, 8, 3, 3]; %w2 = constant(...) : f32[32, 32, 1, 1];
          %w3 = constant(...) : f32[16, 64, 3, 3];
          %s = constant(...) : f32[64, 1, 1]; %t = constant(...) : f32[64, 1, 1];
          %1 = nn.conv2d(%x, %w1, {CONV}); %2 = nn.relu(%1);
          %3 = nn.conv2d(%2, %w2, {CONV1}); %4 = add(%3, %2);
          %5 = nn.max_pool2d(%4, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
          %6 = nn.max_pool2d(%2, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1]);
          %7 = concatenate(%5, %6, axis=1); %8 = multiply(%7, %s); %9 = add(%8, %t);
          %10 = clip(%9, a_min=0.0, a_max=6.0); %11 = nn.conv2d(%10, %w3, {CONV});
          %12 = nn.global_avg_pool2d(%11); %13 = reshape(%12, newshape=[2, 16]);
          return %13 }}""",
        constants=consts,
    )
    after = alter_layout(before, target=AVX512)
    names = [c.op.name for c in after.body]
    assert names.count("layout_transform") == 2  # the input, and before the reshape
    assert names[-2:] == ["layout_transform", "reshape"]
    assert "nn.conv2d" not in names and "nn.max_pool2d" not in names
    _check_same(before, after)


def test_depthwise_and_pointwise_blocks_mobilenet_style():
    consts = {"e": _w(48, 16, 1, 1), "d": _w(48, 1, 3, 3), "p": _w(16, 48, 1, 1)}
    before = parse(
        f"""def main(%x: f32[1, 16, 10, 10]) {{
          %e = constant(...) : f32[48, 16, 1, 1]; %d = constant(...) : f32[48, 1, 3, 3];
          %p = constant(...) : f32[16, 48, 1, 1];
          %1 = nn.conv2d(%x, %e, {CONV1}); %2 = clip(%1, a_min=0.0, a_max=6.0);
          %3 = nn.conv2d(%2, %d, strides=[2, 2], padding=[1, 1, 1, 1], dilation=[1, 1],
                         groups=48);
          %4 = clip(%3, a_min=0.0, a_max=6.0); %5 = nn.conv2d(%4, %p, {CONV1});
          return %5 }}""",
        constants=consts,
    )
    after = alter_layout(before, target=AVX512)
    assert [c.op.name for c in after.body].count("nn.conv2d_nchwc") == 3
    _check_same(before, after)


def test_grouped_conv_blocked_when_groups_fit_the_blocks():
    before = parse(
        f"""def main(%x: f32[1, 48, 6, 6]) {{ %w = constant(...) : f32[96, 16, 3, 3];
          %1 = nn.conv2d(%x, %w, {CONV}, groups=3); return %1 }}""",
        constants={"w": _w(96, 16, 3, 3)},
    )
    after = alter_layout(before, target=AVX512)
    assert "nn.conv2d_nchwc" in [c.op.name for c in after.body]
    _check_same(before, after)


def test_block_rule():
    assert [channel_block(c, 16) for c in (3, 24, 64, 1000, 20)] == [1, 8, 16, 8, 4]
    assert [channel_block(c, 8) for c in (64, 12)] == [8, 4]


def test_one_output_channel_stays_nchw():
    """1 output channel: padded to a block it would do 8x the work (Note [few output
    channels]); the conv stays as it is."""
    before = parse(
        f"""def main(%x: f32[1, 16, 6, 6]) {{ %w = constant(...) : f32[1, 16, 3, 3];
          %1 = nn.conv2d(%x, %w, {CONV}); return %1 }}""",
        constants={"w": _w(1, 16, 3, 3)},
    )
    assert alter_layout(before, target=AVX512) is before


@pytest.mark.parametrize("channels, blocks", [(20, (8, 24)), (12, (16, 16)), (3, (8, 8))])
def test_few_output_channels_are_padded_to_a_block(channels, blocks):
    """Note [few output channels]: 20, 12 and 3 outputs are padded to a multiple of 8 (the
    generic NCHW schedule was 10-50x slower); the next conv reads the padded channels."""
    block, padded = blocks
    before = parse(
        f"""def main(%x: f32[1, 16, 6, 6]) {{ %w = constant(...) : f32[{channels}, 16, 3, 3];
          %w2 = constant(...) : f32[16, {channels}, 3, 3];
          %1 = nn.conv2d(%x, %w, {CONV}); %2 = nn.relu(%1); %3 = nn.conv2d(%2, %w2, {CONV});
          return %3, %2 }}""",
        constants={"w": _w(channels, 16, 3, 3), "w2": _w(16, channels, 3, 3)},
    )
    after = alter_layout(before, target=AVX512)
    convs = [c for c in after.body if c.op.name == "nn.conv2d_nchwc"]
    assert len(convs) == 2
    assert convs[0].outputs[0].type.shape[1] * convs[0].outputs[0].type.shape[4] == padded
    assert convs[0].outputs[0].type.shape[4] == block
    _check_same(before, after)


def test_first_conv_reads_nchw_input_without_a_transform():
    """3 input channels: block 1, NCHW1c is NCHW's memory, so the conv reads %x as it is."""
    w = _w(32, 3, 7, 7)
    before = parse(
        """def main(%x: f32[1, 3, 20, 20]) { %w = constant(...) : f32[32, 3, 7, 7];
          %1 = nn.conv2d(%x, %w, strides=[2, 2], padding=[3, 3, 3, 3], dilation=[1, 1]);
          return %1 }""",
        constants={"w": w},
    )
    after = alter_layout(before, target=AVX512)
    first = after.body[0]
    assert first.op.name == "nn.conv2d_nchwc" and first.inputs[0] is before.params[0]
    assert first.outputs[0].type.shape == (1, 2, 10, 10, 16)
    assert [c.op.name for c in after.body].count("layout_transform") == 1  # the output's
    _check_same(before, after)


def test_classes_head_pads_channels_to_full_vectors():
    """1000 output channels (blocks of 8) padded to 1008 (63 blocks of 16) through bias, relu and
    the global pool; the padding is sliced off where the value leaves the blocked chain."""
    consts = {"w": _w(1000, 16, 1, 1), "b": _w(1000, 1, 1)}
    before = parse(
        f"""def main(%x: f32[1, 16, 5, 5]) {{
          %w = constant(...) : f32[1000, 16, 1, 1]; %b = constant(...) : f32[1000, 1, 1];
          %1 = nn.conv2d(%x, %w, {CONV1}); %2 = add(%1, %b); %3 = nn.relu(%2);
          %4 = nn.global_avg_pool2d(%3); return %4 }}""",
        constants=consts,
    )
    after = alter_layout(before, target=AVX512)
    names = [c.op.name for c in after.body]
    assert names == [
        "layout_transform", "nn.conv2d_nchwc", "add", "nn.relu", "nn.global_avg_pool2d_nchwc",
        "layout_transform", "slice",
    ]  # fmt: skip
    assert after.body[1].outputs[0].type.shape == (1, 63, 5, 5, 16)
    _check_same(before, after)
    assert alter_layout(before, target=AVX2).body[1].outputs[0].type.shape == (1, 125, 5, 5, 8)


def test_padded_channels_stay_through_depthwise_residual_and_next_conv():
    """120 channels (blocks of 8) padded to 128: a depthwise conv, a residual add and the next
    conv take the padded value; an exp (not finite-safe on padding) gets it sliced, in NCHW."""
    consts = {"w1": _w(120, 16, 1, 1), "wd": _w(120, 1, 3, 3), "w2": _w(32, 120, 1, 1)}
    before = parse(
        f"""def main(%x: f32[1, 16, 6, 6]) {{
          %w1 = constant(...) : f32[120, 16, 1, 1]; %wd = constant(...) : f32[120, 1, 3, 3];
          %w2 = constant(...) : f32[32, 120, 1, 1];
          %1 = nn.conv2d(%x, %w1, {CONV1}); %2 = clip(%1, a_min=0.0, a_max=6.0);
          %3 = nn.conv2d(%2, %wd, {CONV}, groups=120); %4 = add(%3, %1);
          %5 = nn.conv2d(%4, %w2, {CONV1}); %6 = exp(%4); return %5, %6 }}""",
        constants=consts,
    )
    after = alter_layout(before, target=AVX512)
    convs = [c for c in after.body if c.op.name == "nn.conv2d_nchwc"]
    assert [c.outputs[0].type.shape[1:2] + c.outputs[0].type.shape[4:] for c in convs] == [
        (8, 16), (8, 16), (2, 16)
    ]  # fmt: skip
    assert convs[1].attrs["groups"] == 128
    names = [c.op.name for c in after.body]
    assert names.index("slice") > names.index("add") and "exp" in names
    _check_same(before, after)


def test_avx2_blocks_by_8():
    before = parse(
        f"""def main(%x: f32[1, 16, 6, 6]) {{ %w = constant(...) : f32[32, 16, 3, 3];
          %1 = nn.conv2d(%x, %w, {CONV}); return %1 }}""",
        constants={"w": _w(32, 16, 3, 3)},
    )
    after = alter_layout(before, target=AVX2)
    conv = next(c for c in after.body if c.op.name == "nn.conv2d_nchwc")
    assert conv.outputs[0].type.shape == (1, 4, 6, 6, 8)
    _check_same(before, after)


def test_other_targets_and_graphs_without_convs_are_unchanged():
    conv = parse(
        f"""def main(%x: f32[1, 16, 6, 6]) {{ %w = constant(...) : f32[32, 16, 3, 3];
          %1 = nn.conv2d(%x, %w, {CONV}); return %1 }}""",
        constants={"w": _w(32, 16, 3, 3)},
    )
    assert alter_layout(conv, target="c") is conv
    assert alter_layout(conv) is conv  # no target given, none entered
    plain = parse("def main(%x: f32[1, 16, 6, 6]) { %1 = nn.relu(%x); return %1 }")
    assert alter_layout(plain, target=AVX512) is plain


def test_build_uses_blocked_kernels_and_matches_interpreter():
    """The driver runs alter_layout at opt_level 2 under the build's target; a residual block
    with a squeeze-excitation style multiply by a (N, C, 1, 1) tensor."""
    consts = {"w1": _w(32, 3, 3, 3), "w2": _w(32, 32, 3, 3), "b": _w(32, 1, 1)}
    func = parse(
        f"""def main(%x: f32[2, 3, 12, 12]) {{
          %w1 = constant(...) : f32[32, 3, 3, 3]; %w2 = constant(...) : f32[32, 32, 3, 3];
          %b = constant(...) : f32[32, 1, 1];
          %1 = nn.conv2d(%x, %w1, {CONV}); %2 = add(%1, %b); %3 = nn.relu(%2);
          %4 = nn.conv2d(%3, %w2, {CONV}); %5 = nn.global_avg_pool2d(%4); %6 = sigmoid(%5);
          %7 = multiply(%4, %6); %8 = add(%7, %3); %9 = nn.relu(%8);
          %10 = nn.avg_pool2d(%9, pool_size=[2, 2], strides=[2, 2], padding=[0, 0, 0, 0]);
          return %10 }}""",
        constants=consts,
    )
    lib = tessera.build(IRModule({"main": func}), target="llvm")
    assert any("conv2d_nchwc" in name for name in lib.get_lib().function_names)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    x = RNG.standard_normal((2, 3, 12, 12)).astype("f4")
    m.set_input("x", x)
    m.run()
    (want,) = run_function(func, {"x": x})
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


C2F_WEIGHTS = {"w1": (32, 8, 3, 3), "w2": (16, 16, 3, 3), "w3": (16, 48, 1, 1)}


def _c2f(split: str, h: int = 10):
    """A YOLOv8 C2f-style block: a conv, its channels split, a conv on the last part, all
    concatenated, a 1x1 conv; `split` the sections of 32 channels."""
    rng = np.random.default_rng(11)  # draws of its own: the shared generator feeds later tests
    consts = {k: rng.standard_normal(v).astype("f4") for k, v in C2F_WEIGHTS.items()}
    parts = split.count(",") + 1
    names = ", ".join(f"%p{k}" for k in range(parts))
    last = f"%p{parts - 1}"
    func = parse(
        f"""def main(%x: f32[1, 8, {h}, {h}]) {{
          %w1 = constant(...) : f32[32, 8, 3, 3]; %w2 = constant(...) : f32[16, 16, 3, 3];
          %w3 = constant(...) : f32[16, 48, 1, 1];
          %1 = nn.conv2d(%x, %w1, {CONV}); %2 = sigmoid(%1); %3 = multiply(%1, %2);
          {names} = split(%3, axis=1, sections=[{split}]);
          %4 = nn.conv2d({last}, %w2, {CONV}); %5 = nn.relu(%4);
          %6 = concatenate(%3, %5, axis=1); %7 = nn.conv2d(%6, %w3, {CONV1}); %8 = nn.relu(%7);
          %9 = add(%p0, %p0); return %8, %9 }}""",
        constants=consts,
    )
    return func


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_split_into_whole_blocks_stays_blocked(target):
    """Note [blocked split]: a split of a blocked value into whole blocks is the same split of
    its blocks, its parts blocked; only outputs go back to NCHW."""
    before = _c2f("16, 16")
    after = alter_layout(before, target=target)
    (split,) = [c for c in after.body if c.op.name == "split"]
    block = split.inputs[0].type.shape[-1]
    assert split.inputs[0].type.ndim == 5 and list(split.attrs["sections"]) == [16 // block] * 2
    assert all(p.type.ndim == 5 for p in split.outputs)
    transforms = [c for c in after.body if c.op.name == "layout_transform"]
    assert len(transforms) == 3  # the input and the two outputs: none around the split
    _check_same(before, after)


def test_split_cutting_a_block_splits_in_nchw():
    """Parts that are not whole blocks (12 of 16 on AVX-512) split the plain value, as before."""
    before = _c2f("12, 4, 16")
    after = alter_layout(before, target=AVX512)
    (split,) = [c for c in after.body if c.op.name == "split"]
    assert split.inputs[0].type.ndim == 4
    _check_same(before, after)


def test_blocked_split_builds_and_matches_interpreter():
    func = _c2f("16, 16", h=9)
    lib = tessera.build(IRModule({"main": func}), target="llvm")
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    x = np.random.default_rng(13).standard_normal((1, 8, 9, 9)).astype("f4")
    m.set_input("x", x)
    m.run()
    for k, want in enumerate(run_function(func, {"x": x})):
        np.testing.assert_allclose(m.get_output(k).numpy(), want, rtol=1e-4, atol=1e-4)


def _neck(resize: str, h: int = 6, cout: int = 32):
    """A detector neck: a conv, its output resized, concatenated with a conv at that size."""
    rng = np.random.default_rng(12)
    shapes = {"w1": (cout, 8, 3, 3), "w2": (16, 8, 3, 3), "w3": (16, cout + 16, 1, 1)}
    consts = {k: rng.standard_normal(v).astype("f4") for k, v in shapes.items()}
    H = 2 * h
    func = parse(
        f"""def main(%x: f32[1, 8, {h}, {h}], %y: f32[1, 8, {H}, {H}]) {{
          %w1 = constant(...) : f32[{cout}, 8, 3, 3]; %w2 = constant(...) : f32[16, 8, 3, 3];
          %w3 = constant(...) : f32[16, {cout + 16}, 1, 1];
          %1 = nn.conv2d(%x, %w1, {CONV}); %2 = nn.relu(%1);
          %3 = image.resize(%2, size=[1, {cout}, {H}, {H}], {resize});
          %4 = nn.conv2d(%y, %w2, {CONV}); %5 = concatenate(%3, %4, axis=1);
          %6 = nn.conv2d(%5, %w3, {CONV1}); return %6 }}""",
        constants=consts,
    )
    return func


RESIZES = [
    'scales=[1.0, 1.0, 2.0, 2.0], mode="nearest", coordinate_transformation_mode="asymmetric", '
    'nearest_mode="floor"',
    'scales=[1.0, 1.0, 2.0, 2.0], mode="linear", coordinate_transformation_mode="half_pixel"',
    'scales=[1.0, 1.0, 2.0, 2.0], mode="cubic", coordinate_transformation_mode="align_corners"',
]


@pytest.mark.parametrize("resize", RESIZES, ids=["nearest", "linear", "cubic"])
@pytest.mark.parametrize("cout", [32, 20], ids=["whole", "padded"])
def test_resize_of_a_blocked_value_stays_blocked(resize, cout):
    """Note [blocked resize]: the neck's resize runs on the blocked value (its block an identity
    axis); no transform around it; the same values (20 channels: padded blocks on AVX-512,
    which the concatenate after it joins in NCHW, Note [channel padding])."""
    before = _neck(resize, cout=cout)
    after = alter_layout(before, target=AVX512)
    (call,) = [c for c in after.body if c.op.name == "image.resize"]
    assert call.inputs[0].type.ndim == 5 and call.outputs[0].type.ndim == 5
    transforms = [c for c in after.body if c.op.name == "layout_transform"]
    if cout % 16 == 0:
        assert len(transforms) == 3  # the two inputs and the output
    _check_same(before, after)


def test_resize_of_channels_or_crops_stays_plain():
    """A crop's region of interest is per NCHW axis: it resizes the plain value."""
    crop = (
        'scales=[1.0, 1.0, 2.0, 2.0], mode="linear", coordinate_transformation_mode='
        '"tf_crop_and_resize", roi=[0.0, 0.0, 0.1, 0.1, 1.0, 1.0, 0.9, 0.9]'
    )
    before = _neck(crop)
    after = alter_layout(before, target=AVX512)
    (call,) = [c for c in after.body if c.op.name == "image.resize"]
    assert call.inputs[0].type.ndim == 4
    _check_same(before, after)


def test_blocked_resize_builds_and_matches_interpreter():
    func = _neck(RESIZES[1], h=5)
    lib = tessera.build(IRModule({"main": func}), target="llvm")
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    rng = np.random.default_rng(14)
    feeds = {p.name: rng.standard_normal(p.type.shape).astype("f4") for p in func.params}
    m.set_input(**feeds)
    m.run()
    (want,) = run_function(func, feeds)
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def test_build_with_padded_channels_matches_interpreter():
    """Note [channel padding] end to end: 120 and 1000 channels padded on AVX-512 hosts (as they
    are elsewhere) through a depthwise conv, squeeze-excitation, a residual add and a head."""
    consts = {"w1": _w(120, 8, 1, 1), "wd": _w(120, 1, 3, 3), "w2": _w(1000, 120, 1, 1)}
    consts["b"] = _w(1000, 1, 1)
    func = parse(
        f"""def main(%x: f32[1, 8, 7, 7]) {{
          %w1 = constant(...) : f32[120, 8, 1, 1]; %wd = constant(...) : f32[120, 1, 3, 3];
          %w2 = constant(...) : f32[1000, 120, 1, 1]; %b = constant(...) : f32[1000, 1, 1];
          %1 = nn.conv2d(%x, %w1, {CONV1}); %2 = nn.relu(%1);
          %3 = nn.conv2d(%2, %wd, {CONV}, groups=120); %4 = nn.global_avg_pool2d(%3);
          %5 = sigmoid(%4); %6 = multiply(%3, %5); %7 = add(%6, %1);
          %8 = nn.conv2d(%7, %w2, {CONV1}); %9 = add(%8, %b); %10 = nn.relu(%9);
          %11 = nn.global_avg_pool2d(%10); return %11, %7 }}""",
        constants=consts,
    )
    lib = tessera.build(IRModule({"main": func}), target="llvm")
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    x = RNG.standard_normal((1, 8, 7, 7)).astype("f4")
    m.set_input("x", x)
    m.run()
    for k, want in enumerate(run_function(func, {"x": x})):
        np.testing.assert_allclose(m.get_output(k).numpy(), want, rtol=1e-4, atol=1e-4)


def _check_same(before, after, seeds=(0, 1)):
    for seed in seeds:
        rng = np.random.default_rng(seed)
        inputs = {p.name: rng.standard_normal(p.type.shape).astype("f4") for p in before.params}
        for w, g in zip(run_function(before, inputs), run_function(after, inputs), strict=True):
            assert w.shape == g.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm"])
def test_onnx_model_with_concat_and_pools_matches_ort(target):
    """A DenseNet/Inception-style ONNX model (conv, batch-norm, concat, pools) vs ONNX Runtime."""
    ort = pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def init(name, shape):
        return numpy_helper.from_array(RNG.standard_normal(shape).astype("f4") * 0.2, name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[0, 0, 0, 0]),
        helper.make_node("Concat", ["r1", "c2"], ["cat"], axis=1),
        helper.make_node("BatchNormalization", ["cat", "g", "be", "m", "v"], ["bn"], epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["r2"]),
        helper.make_node("AveragePool", ["r2"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxPool", ["ap"], ["mp"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["mp"], ["gp"]),
        helper.make_node("Flatten", ["gp"], ["y"]),
    ]
    inits = [init("w1", (32, 4, 3, 3)), init("w2", (16, 32, 1, 1))]
    inits += [init(n, (48,)) for n in ("g", "be", "m")]
    inits.append(numpy_helper.from_array(RNG.uniform(0.5, 2, 48).astype("f4"), "v"))
    graph = helper.make_graph(
        nodes,
        "densish",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 48])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    x = RNG.standard_normal((1, 4, 10, 10)).astype("f4")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    lib = tessera.build(mod, target=target, params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def _shuffle_unit_model(channels, groups, hw):
    """A ShuffleNet unit in ONNX: grouped 1x1, batch-norm, relu, channel shuffle
    (Reshape-Transpose-Reshape), depthwise 3x3, grouped 1x1, residual add, relu."""
    from onnx import TensorProto, helper, numpy_helper

    c, g = channels, groups

    def init(name, array):
        return numpy_helper.from_array(np.asarray(array, "f4"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], group=g),
        helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("Reshape", ["r1", "split"], ["s1"]),
        helper.make_node("Transpose", ["s1"], ["t1"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t1", "merge"], ["s2"]),
        helper.make_node("Conv", ["s2", "wd"], ["c2"], group=c, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c2", "w2"], ["c3"], group=g),
        helper.make_node("Add", ["c3", "x"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    inits = [
        init("w1", RNG.standard_normal((c, c // g, 1, 1)) * 0.3),
        init("wd", RNG.standard_normal((c, 1, 3, 3)) * 0.3),
        init("w2", RNG.standard_normal((c, c // g, 1, 1)) * 0.3),
        init("s", RNG.uniform(0.5, 1.5, c)), init("b", RNG.standard_normal(c)),
        init("m", RNG.standard_normal(c) * 0.1), init("v", RNG.uniform(0.5, 2, c)),
        numpy_helper.from_array(np.array([1, g, c // g, hw, hw], "i8"), "split"),
        numpy_helper.from_array(np.array([1, c, hw, hw], "i8"), "merge"),
    ]  # fmt: skip
    shape = [1, c, hw, hw]
    graph = helper.make_graph(
        nodes,
        "shuffle_unit",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("channels, groups", [(4 * 34, 4), (6 * 20, 6), (8 * 12, 8)])
def test_shuffle_unit_with_groups_the_blocks_do_not_divide_matches_ort(target, channels, groups):
    """Note [grouped blocks]: groups of 34, 20 and 12 channels run blocked (no NCHW grouped
    conv left), the channel shuffle between them too (one blocked channel_shuffle), and the
    unit matches ONNX Runtime on AVX-512 and AVX2 code."""
    ort = pytest.importorskip("onnxruntime")
    model = _shuffle_unit_model(channels, groups, 6)
    x = RNG.standard_normal((1, channels, 6, 6)).astype("f4")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    with tessera.transform.PassContext(disabled_pass=["fuse_ops"]):
        func = tessera.driver.fused_function(mod, tessera.Target(target), params)
    ops = [c.op.name for group in func.body for c in group.attrs["func"].body]
    convs = [name for name in ops if name.startswith("nn.conv2d")]
    assert convs == ["nn.conv2d_nchwc"] * 3, convs
    assert "channel_shuffle" in ops and "transpose" not in ops  # the shuffle stays blocked
    lib = tessera.build(mod, target=target, params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_1d_convs_run_blocked_and_match_ort(target):
    """Note [1-D convs]: a speech front end (a strided STFT-like conv of one channel, odd
    channel counts 129 and 24, kernels 3 and 1, batch-norm, relu, a residual add) runs as
    blocked 2-d convs of height 1 and matches ONNX Runtime."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    def init(name, shape, scale=0.2):
        return numpy_helper.from_array((RNG.standard_normal(shape) * scale).astype("f4"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], kernel_shape=[32], strides=[16]),
        helper.make_node("Conv", ["c0", "w1", "b1"], ["c1"], pads=[1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1], strides=[2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Conv", ["r2", "w3"], ["c3"], pads=[2, 2], dilations=[2]),
        helper.make_node("Add", ["c3", "r2"], ["a"]),
        helper.make_node("Conv", ["a", "w4"], ["y"]),
    ]
    inits = [
        init("w0", (129, 1, 32)), init("w1", (24, 129, 3)), init("b1", (24,)),
        init("s", (24,)), init("b", (24,)), init("m", (24,)),
        numpy_helper.from_array(RNG.uniform(0.5, 2, 24).astype("f4"), "v"),
        init("w2", (32, 24, 3)), init("w3", (32, 32, 3)), init("w4", (16, 32, 1)),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "speech",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 512])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = RNG.standard_normal((2, 1, 512)).astype("f4")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    with tessera.transform.PassContext(disabled_pass=["fuse_ops"]):
        func = tessera.driver.fused_function(mod, tessera.Target(target), params)
    ops = [c.op.name for group in func.body for c in group.attrs["func"].body]
    assert "nn.conv1d" not in ops and ops.count("nn.conv2d_nchwc") == 5, ops
    lib = tessera.build(mod, target=target, params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "dilation, pad, stride, kernel, kept",
    [
        (12, 12, 1, (3, 3), (1, 1)),  # only the centre tap reads the 6x6 map
        (4, 4, 1, (3, 3), (3, 3)),  # every tap reads some position
        (6, 6, 2, (3, 3), (1, 1)),
        (7, 7, 1, (1, 3), (1, 1)),
        (2, 0, 1, (3, 3), (3, 3)),  # no padding: no tap reads padding only
    ],
)
def test_dead_taps_are_dropped_and_the_conv_is_unchanged(dilation, pad, stride, kernel, kept):
    """Note [dead taps]: on a 6x6 map, dilation 12 leaves only the centre tap (a 1x1 conv),
    dilation 4 keeps every tap; the result is the conv's either way (graph interpreter)."""
    kh, kw = kernel
    w = _w(16, 16, kh, kw)
    pads = [pad * (kh > 1), pad, pad * (kh > 1), pad]
    before = parse(
        f"""def main(%x: f32[1, 16, 6, 6]) {{ %w = constant(...) : f32[16, 16, {kh}, {kw}];
          %1 = nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding={pads},
                         dilation=[{dilation}, {dilation}]); return %1 }}""",
        constants={"w": w},
    )
    with tessera.transform.PassContext(config={"alter_layout.live_tap_saving": 1.0}):
        after = alter_layout(before, target=AVX512)  # no regions (Note [live-tap regions])
    (conv,) = [c for c in after.body if c.op.name == "nn.conv2d_nchwc"]
    assert conv.inputs[1].type.shape[2:4] == kept
    _check_same(before, after)


@pytest.mark.parametrize(
    "size, dilation, stride, block_input, regions",
    [
        (28, 24, 1, False, 9),  # 18% of the MACs live: top tap only for the bottom 4 rows
        (28, 12, 1, True, 9),  # 51% live, the input blocked by a conv before
        (17, 6, 2, False, 9),
        (28, 4, 1, False, 0),  # 82% live: one conv
        (9, 5, 1, True, 9),
    ],
)
def test_live_tap_regions(size, dilation, stride, block_input, regions):
    """Note [live-tap regions]: a dilated conv whose taps read padding at many outputs becomes
    one unpadded conv per region of equal live taps, concatenated back; the same result."""
    w, w0 = _w(16, 16, 3, 3), _w(16, 8, 1, 1)
    first = f"%0 = nn.conv2d(%x, %w0, {CONV1});" if block_input else "%0 = nn.relu(%x);"
    before = parse(
        f"""def main(%x: f32[1, {16 if not block_input else 8}, {size}, {size}]) {{
          %w = constant(...) : f32[16, 16, 3, 3]; %w0 = constant(...) : f32[16, 8, 1, 1];
          {first} %1 = nn.conv2d(%0, %w, strides=[{stride}, {stride}],
                         padding={[dilation] * 4}, dilation=[{dilation}, {dilation}]);
          %2 = nn.relu(%1); return %2 }}""",
        constants={"w": w, "w0": w0},
    )
    after = alter_layout(before, target=AVX512)
    convs = [c for c in after.body if c.op.name == "nn.conv2d_nchwc"]
    assert len(convs) - block_input == max(regions, 1)
    if regions:
        assert not any(any(c.attrs["padding"]) for c in convs[block_input:])
        assert sum(c.op.name == "concatenate" for c in after.body) >= 2
    _check_same(before, after)
    with tessera.transform.PassContext(config={"alter_layout.live_tap_saving": 1.0}):
        kept = alter_layout(before, target=AVX512)
    assert sum(c.op.name == "nn.conv2d_nchwc" for c in kept.body) == 1 + block_input


@pytest.mark.parametrize(
    "dilation, size, channels, phases",
    [(2, 28, 64, True), (4, 56, 32, True), (3, 48, 64, True), (4, 16, 32, False)],
)
def test_dilated_conv_runs_undilated_on_its_phases(dilation, size, channels, phases):
    """Note [dilated phases]: the d x d phases stacked along the batch, one Winograd conv, the
    phases interleaved back; the same result (graph interpreter). Phases of 4x4 are too small
    for Winograd: the dilated conv stays as it is."""
    w, b = _w(channels, channels, 3, 3) * 0.2, _w(channels, 1, 1)
    before = parse(
        f"""def main(%x: f32[1, {channels}, {size}, {size}]) {{
          %w = constant(...) : f32[{channels}, {channels}, 3, 3];
          %b = constant(...) : f32[{channels}, 1, 1];
          %1 = nn.conv2d(%x, %w, strides=[1, 1], padding={[dilation] * 4},
                         dilation=[{dilation}, {dilation}]);
          %2 = add(%1, %b); %3 = nn.relu(%2); return %3 }}""",
        constants={"w": w, "b": b},
    )
    after = alter_layout(before, target=AVX512)
    (conv,) = [c for c in after.body if c.op.name.startswith("nn.conv2d")]
    assert ("winograd" in conv.op.name) == phases
    assert conv.inputs[0].type.shape[0] == (dilation**2 if phases else 1)
    _check_same(before, after)
    with tessera.transform.PassContext(config={"alter_layout.winograd": False}):
        kept = alter_layout(before, target=AVX512)  # no Winograd: the dilated conv as it is
    (conv,) = [c for c in kept.body if c.op.name.startswith("nn.conv2d")]
    assert list(conv.attrs["dilation"]) == [dilation] * 2


@pytest.mark.parametrize("dilation, cin, cout", [(24, 32, 16), (2, 64, 64)])
def test_dilated_convs_build_and_match_onnxruntime(dilation, cin, cout):
    """DeepLabV3's shape classes, built and run against ORT: its ASPP's dilation 24 on a map of
    28 (Note [live-tap regions]) and its backbone's dilation 2 (Note [dilated phases])."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    d = dilation
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], dilations=[d, d], pads=[d] * 4),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "aspp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(_w(cout, cin, 3, 3) * 0.2, "w"),
            numpy_helper.from_array(_w(cout), "b"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((1, cin, 28, 28)).astype("f4")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    mod, params = tessera.frontend.from_onnx(model)
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels, k, stride", [(16, 2, 1), (24, 3, 2)])
def test_depthwise_with_channel_multiplier_runs_blocked_and_matches_ort(channels, k, stride):
    """Note [depthwise multipliers]: k blocked depthwise convs, a concatenation, a shuffle."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    w0 = numpy_helper.from_array(_w(channels, 8, 1, 1) * 0.3, "w0")
    wd = numpy_helper.from_array(_w(k * channels, 1, 3, 3) * 0.3, "wd")
    bd = numpy_helper.from_array(_w(k * channels), "bd")
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node(
            "Conv", ["r0", "wd", "bd"], ["c1"], group=channels, pads=[1, 1, 1, 1],
            strides=[stride, stride],
        ),
        helper.make_node("Relu", ["c1"], ["y"]),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "dw_multiplier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w0, wd, bd],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = RNG.standard_normal((1, 8, 9, 9)).astype("f4")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    with tessera.transform.PassContext(disabled_pass=["fuse_ops"]):
        func = tessera.driver.fused_function(mod, AVX512, params)
    ops = [c.op.name for group in func.body for c in group.attrs["func"].body]
    assert ops.count("nn.conv2d_nchwc") == 1 + k and "nn.conv2d" not in ops, ops
    assert "channel_shuffle" in ops
    lib = tessera.build(mod, target="llvm", params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_column_conv_runs_as_a_row_and_matches_ort(target):
    """Note [column convs]: a 5x1 conv over data one column wide (Magika's) runs as the 1x5
    conv of the transposed data, between reshapes, strided and padded along H."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    w1 = numpy_helper.from_array(_w(32, 16, 5, 1) * 0.3, "w1")
    w2 = numpy_helper.from_array(_w(16, 32, 3, 1) * 0.3, "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[2, 0, 1, 0], strides=[2, 1]),
        helper.make_node("GlobalMaxPool", ["c2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "column",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 40, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = RNG.standard_normal((1, 16, 40, 1)).astype("f4")
    want = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    mod, params = tessera.frontend.from_onnx(model, {"x": x.shape})
    with tessera.transform.PassContext(disabled_pass=["fuse_ops"]):
        func = tessera.driver.fused_function(mod, tessera.Target(target), params)
    convs = [c for group in func.body for c in group.attrs["func"].body if "conv" in c.op.name]
    assert [c.op.name for c in convs] == ["nn.conv2d_nchwc"] * 2
    assert all(c.inputs[1].type.shape[2:4] in ((1, 5), (1, 3)) for c in convs)  # as rows
    lib = tessera.build(mod, target=target, params=params)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4)


def _qnn_chain():
    """uint8 data -> int8 conv 3x3 -> compensation, dequantize, ReLU, quantize -> uint8 max
    pool -> int8 conv 1x1 -> dequantize: a quantized region as tessera.quantize writes it."""
    from tessera.topi import qnn

    w1 = qnn.pack_conv_weight(RNG.integers(-127, 128, (32, 16, 3, 3)).astype("i1"))
    w2 = qnn.pack_conv_weight(RNG.integers(-127, 128, (32, 32, 1, 1)).astype("i1"))
    consts = {"w1": w1, "w2": w2, "c1": RNG.integers(-999, 999, (32, 1, 1)).astype("i4")}
    consts |= {"s1": np.full((32, 1, 1), 1e-4, "f4"), "s2": np.full((32, 1, 1), 2e-5, "f4")}
    return parse(
        f"""def main(%x: u8[1, 16, 8, 8]) {{
          %w1 = constant(...) : i32[32, 4, 3, 3]; %w2 = constant(...) : i32[32, 8, 1, 1];
          %c1 = constant(...) : i32[32, 1, 1];
          %s1 = constant(...) : f32[32, 1, 1]; %s2 = constant(...) : f32[32, 1, 1];
          %1 = qnn.conv2d(%x, %w1, {CONV}, groups=1, pad_value=3); %2 = subtract(%1, %c1);
          %3 = qnn.dequantize(%2, %s1); %4 = nn.relu(%3);
          %5 = qnn.quantize(%4, scale=0.05, zero_point=0, dtype="uint8");
          %6 = nn.max_pool2d(%5, pool_size=[3, 3], strides=[2, 2], padding=[1, 1, 1, 1],
                             dilation=[1, 1]);
          %7 = qnn.conv2d(%6, %w2, {CONV1}, groups=1, pad_value=0);
          %8 = qnn.dequantize(%7, %s2); return %8 }}""",
        constants=consts,
    )


@pytest.mark.parametrize("target,block", [(AVX512, 16), (AVX2, 8)])
def test_int8_region_stays_blocked_between_convs(target, block):
    """Note [blocked int8 activations]: both int8 convs write blocked products (the strategy's
    answer; the first reads the NCHW input, the second the blocked pool), the epilogue and the
    uint8 max pool stay blocked, a layout transform only at the region's end; the integers are
    those of the NCHW graph."""
    before = _qnn_chain()
    after = alter_layout(before, target=target)
    ops = [c.op.name for c in after.body]
    assert ops.count("qnn.conv2d_nchwc") == 2 and "qnn.conv2d" not in ops
    assert "nn.max_pool2d_nchwc" in ops
    assert ops.count("layout_transform") == 1  # the result out (the first conv packs NCHW)
    pool = next(c for c in after.body if c.op.name == "nn.max_pool2d_nchwc")
    assert str(pool.outputs[0].type.dtype) == "uint8" and pool.outputs[0].type.shape[4] == block
    for seed in (0, 1):
        x = np.random.default_rng(seed).integers(0, 256, (1, 16, 8, 8)).astype("u1")
        (want,), (got,) = run_function(before, {"x": x}), run_function(after, {"x": x})
        np.testing.assert_array_equal(got, want)


def test_int8_region_builds_bit_exact():
    """The blocked int8 region built (fused epilogues, blocked stores) gives the interpreter's
    integers; with alter_layout off, so does the NCHW build."""
    before = _qnn_chain()
    x = RNG.integers(0, 256, (1, 16, 8, 8)).astype("u1")
    (want,) = run_function(before, {"x": x})
    mod = IRModule({"main": before})
    for disabled in ([], ["alter_layout"]):
        with tessera.transform.PassContext(opt_level=3, disabled_pass=disabled):
            lib = tessera.build(mod, target="llvm", params={})
        assert ("fused_qnn_conv2d_nchwc" in lib.get_source()) == (not disabled)
        m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
        m.set_input("x", x)
        m.run()
        np.testing.assert_array_equal(m.get_output(0).numpy(), want)


def _mobilenet_int8_block(dtype="uint8", pad_value=0, compensation=None):
    """1x1 conv -> depthwise 3x3 (its data `dtype`, padded with `pad_value` as x_u) -> 1x1
    conv, int8, as tessera.quantize writes it; `compensation`: (its shape, the dequantize's
    zero point) of a constant subtracted from the depthwise conv's integers."""
    from tessera.topi import qnn

    words = {"w1": (32, 16, 1, 1), "wd": (32, 1, 3, 3), "w2": (32, 32, 1, 1)}
    consts = {k: qnn.pack_conv_weight(RNG.integers(-128, 128, v).astype("i1"))
              for k, v in words.items()}  # fmt: skip
    consts |= {"s": np.full((32, 1, 1), 1e-3, "f4"), "s2": np.full((32, 1, 1), 3e-5, "f4")}
    quant = 'scale=0.05, zero_point=0, dtype="uint8"'
    shape, zp = compensation or ((), 0)
    consts["c"] = RNG.integers(-9999, 9999, shape).astype("i4")
    dims = ", ".join(map(str, shape))
    tail = f"%5b = subtract(%5, %c); %6 = qnn.dequantize(%5b, %s, zero_point={zp})"
    tail = tail if compensation else "%6 = qnn.dequantize(%5, %s)"
    return parse(
        f"""def main(%x: u8[1, 16, 8, 8]) {{
          %w1 = constant(...) : i32[32, 4, 1, 1]; %wd = constant(...) : i32[32, 1, 3, 3];
          %w2 = constant(...) : i32[32, 8, 1, 1]; %c = constant(...) : i32[{dims}];
          %s = constant(...) : f32[32, 1, 1]; %s2 = constant(...) : f32[32, 1, 1];
          %1 = qnn.conv2d(%x, %w1, {CONV1}, groups=1, pad_value=0);
          %2 = qnn.dequantize(%1, %s); %3 = nn.relu(%2);
          %4 = qnn.quantize(%3, scale=0.05, zero_point=0, dtype="{dtype}");
          %5 = qnn.conv2d(%4, %wd, {CONV}, groups=32, pad_value={pad_value});
          {tail}; %7 = qnn.quantize(%6, {quant});
          %8 = qnn.conv2d(%7, %w2, {CONV1}, groups=1, pad_value=0);
          %9 = qnn.dequantize(%8, %s2); return %9 }}""",
        constants=consts,
    )


def _built_output(func, x, config=None):
    with tessera.transform.PassContext(opt_level=3, config=config):
        lib = tessera.build(IRModule({"main": func}), target="llvm", params={})
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def test_depthwise_int8_conv_reads_blocked_data_mobilenet_style():
    """With its integer kernel ("alter_layout.int8_float_depthwise" off), the depthwise conv
    (an NCHW kernel) reads the blocked uint8 data as it is and writes NCHW, which the next conv
    packs: no layout transform inside the block; bit-exact with the NCHW graph, interpreted
    and built."""
    before = _mobilenet_int8_block()
    with tessera.transform.PassContext(config={"alter_layout.int8_float_depthwise": False}):
        after = alter_layout(before, target=AVX512)
    ops = [c.op.name for c in after.body]
    assert ops.count("qnn.conv2d_nchwc") == 2 and ops.count("layout_transform") == 1
    (dw,) = [c for c in after.body if c.op.name == "qnn.conv2d"]
    assert dw.inputs[0].type.shape == (1, 2, 8, 8, 16)  # the blocked uint8, as it is
    x = RNG.integers(0, 256, (1, 16, 8, 8)).astype("u1")
    (want,) = run_function(before, {"x": x})
    np.testing.assert_array_equal(run_function(after, {"x": x})[0], want)
    config = {"alter_layout.int8_float_depthwise": False}
    np.testing.assert_array_equal(_built_output(before, x, config), want)


@pytest.mark.parametrize("target,block", [(AVX512, 16), (AVX2, 8)])
@pytest.mark.parametrize(
    "dtype,pad_value,compensation",
    [
        ("uint8", 0, None),
        ("uint8", 7, None),
        ("int8", 128, None),
        ("uint8", 7, ((32, 1, 1), 0)),  # per channel: out - c dequantized in float
        ("int8", 130, ((1, 32, 1, 1), 5)),  # 4-d per channel, a zero point
        ("uint8", 0, ((), -3)),  # one integer
        ("uint8", 7, ((1, 1, 8), 0)),  # per column: not per channel, the int32 path
    ],
)
def test_depthwise_int8_conv_runs_as_the_float_conv(target, block, dtype, pad_value,
                                                    compensation):  # fmt: skip
    """Note [float depthwise]: between blocked activations a depthwise int8 conv runs as the
    blocked float conv on its integers (x_u - pad_value, + pad_value * sum(w), cast to int32;
    or, where the integers only go on to dequantize(out - c), out - c in float), its output
    blocked for the next int8 conv (one layout transform, at the end); the integers are the
    integer kernel's bit for bit (uint8 and int8 data, zero and nonzero pad values,
    compensations per channel, scalar or not per channel), interpreted and built."""
    before = _mobilenet_int8_block(dtype, pad_value, compensation)
    after = alter_layout(before, target=target)
    ops = [c.op.name for c in after.body]
    assert "qnn.conv2d" not in ops and ops.count("qnn.conv2d_nchwc") == 2
    per_column = compensation is not None and compensation[0] == (1, 1, 8)
    in_float = compensation is not None and not per_column
    # a compensation per column is subtracted in NCHW: transforms around it
    assert ops.count("nn.conv2d_nchwc") == 1 and (ops.count("layout_transform") == 1) != per_column
    offset = (128 if dtype == "int8" else 0) - pad_value  # the shift to x_u - pad_value
    assert ops.count("add") == int(offset != 0) + int(pad_value != 0 and not in_float)
    assert ("cast" in ops[ops.index("nn.conv2d_nchwc") :]) == (not in_float)  # to int32
    assert ops.count("multiply") == int(in_float)  # the dequantize, in float
    (dw,) = [c for c in after.body if c.op.name == "nn.conv2d_nchwc"]
    assert dw.inputs[0].type.shape[4] == block and str(dw.inputs[0].type.dtype) == "float32"
    (second,) = [c for c in after.body if c.op.name == "qnn.conv2d_nchwc"][1:]
    assert second.inputs[0].type.ndim == 5 or per_column  # reads the depthwise conv's blocks
    for seed in (0, 1):
        x = np.random.default_rng(seed).integers(0, 256, (1, 16, 8, 8)).astype("u1")
        (want,) = run_function(before, {"x": x})
        np.testing.assert_array_equal(run_function(after, {"x": x})[0], want)
    if target == AVX2:
        np.testing.assert_array_equal(_built_output(before, x), want)
