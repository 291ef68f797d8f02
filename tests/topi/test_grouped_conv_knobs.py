"""Grouped convs end to end (the graph compiler's build of nn.conv2d with groups) against numpy,
with the default config and with every value of the knobs that shape a grouped conv's kernel:
its input block, output block, oc vectors and shared windows (Note [shared windows] in
topi/x86/conv2d.py), on ShuffleNet's groups of 68 in miniature, ResNeXt's 32 groups of 4,
2 and 8 groups, and odd channel counts per group."""

import numpy as np
import pytest

import tessera
from tessera import autotune
from tessera.graph import parse
from tessera.graph.ops import nn_ref
from tessera.ir.module import IRModule
from tessera.topi.strategy import Config
from tessera.topi.x86.conv2d import GroupWindow, choose_conv_tile

RNG = np.random.default_rng(3)

# (in channels, out channels, groups, size, kernel, stride, pad)
SHAPES = [
    (272, 272, 4, (3, 7), 1, 1, 0),  # ShuffleNet: 4 groups of 68, blocks do not divide them
    (24, 112, 4, (6, 6), 1, 1, 0),  # ShuffleNet's first: 6 in, 28 out a group
    (128, 128, 32, (5, 5), 3, 1, 1),  # ResNeXt: 32 groups of 4, 3x3
    (64, 64, 8, (7, 6), 3, 2, 1),  # 8 groups of 8, strided
    (48, 96, 2, (4, 9), 1, 1, 0),  # 2 groups
    (28, 56, 4, (5, 5), 3, 1, 1),  # odd: 7 in and 14 out a group
    (27, 72, 3, (6, 5), 1, 1, 0),  # odd: 9 in a group
]
KNOBS = ("in_block", "out_block", "oc_vectors", "shared_window")


def _model(ic, oc, groups, size, k, stride, pad):
    x_shape, w_shape = (1, ic, *size), (oc, ic // groups, k, k)
    text = (
        f"def main(%x: f32[{', '.join(map(str, x_shape))}]) {{\n"
        f"  %w = constant(...) : f32[{', '.join(map(str, w_shape))}];\n"
        f"  %b = constant(...) : f32[{oc}, 1, 1];\n"
        f"  %1 = nn.conv2d(%x, %w, strides=[{stride}, {stride}], padding={[pad] * 4}, "
        f"dilation=[1, 1], groups={groups});\n"
        "  %2 = add(%1, %b); %3 = nn.relu(%2); return %3 }"
    )
    w = RNG.standard_normal(w_shape).astype("f4")
    b = RNG.standard_normal((oc, 1, 1)).astype("f4")
    mod = IRModule({"main": parse(text, constants={"w": w, "b": b})})
    x = RNG.standard_normal(x_shape).astype("f4")
    want = np.maximum(nn_ref.conv(x, w, (stride,) * 2, (pad,) * 4, (1, 1), groups) + b, 0)
    return mod, x, want


def _run(mod, x, target, configs=None):
    with tessera.transform.PassContext(opt_level=3, config={"tuning.pretuned": False}):
        lib = tessera.build(mod, target=target, configs=configs)
    m = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
    m.set_input("x", x)
    m.run()
    return m.get_output(0).numpy()


def _knob_configs(task, default, target):
    """The default with each grouped knob set to each of its other values (the tile's other
    knobs as the rules would have them where the value needs it), valid ones only."""
    space = task.implementations(target)[default.impl]
    out = []
    for knob in (k for k in space.knobs if k.name in KNOBS):
        for value in knob.candidates:
            if value == default[knob.name]:
                continue
            knobs = {**default.knobs(), knob.name: value}
            if knob.name == "shared_window" and value and knobs["oc_vectors"] == 1:
                knobs["oc_vectors"], knobs["ow_block"] = 2, 1
            if knob.name == "oc_vectors" and knobs["ow_block"] * value > 8:
                knobs["ow_block"] = 2
            config = Config(default.impl, knobs)
            if task.valid(config, target):
                out.append(config)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}-{s[1]}g{s[2]}k{s[4]}s{s[5]}")
def test_grouped_conv_every_knob_value_matches_numpy(shape):
    target = tessera.Target("llvm")
    mod, x, want = _model(*shape)
    np.testing.assert_allclose(_run(mod, x, target), want, rtol=1e-4, atol=1e-4)
    contexts: dict = {}
    with tessera.transform.PassContext(opt_level=3):
        tasks = autotune.extract_tasks(mod, None, target, contexts=contexts)
    (task,) = [t for t in tasks if t.workload.op == "nn.conv2d"]
    default = task.default(target, contexts.get(task))
    if default.impl != "direct_nchwc":
        pytest.skip(f"{default.impl}: no grouped knobs")  # (the generic NCHW schedule)
    configs = _knob_configs(task, default, target)
    assert configs, "no knob value to try"
    for config in configs:
        got = _run(mod, x, target, {task: config})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_shared_window_packs_and_counts_work():
    """Note [shared windows]: a window read by two output blocks is the union of their spans:
    pack/unpack round-trip, every weight once, the work of 16-channel windows over groups of 68
    (more than 8-channel ones, whose broadcasts the tile cannot share)."""
    one = GroupWindow.of(272, 272, 4, 8, 8)
    two = GroupWindow.of(272, 272, 4, 8, 8, share=2)
    w = RNG.standard_normal((272, 68, 1, 1), dtype=np.float32)
    packed = two.pack(w)
    assert packed.shape == (34, two.blocks, 1, 1, 8, 8)
    np.testing.assert_array_equal(two.unpack(packed), w)
    assert np.count_nonzero(packed) == w.size
    assert all(two.start(2 * k) == two.start(2 * k + 1) for k in range(17))
    assert one.work() == pytest.approx(1.114, abs=1e-3)
    assert two.work() == pytest.approx(1.232, abs=1e-3)
    with pytest.raises(ValueError, match="do not divide"):
        GroupWindow.of(136, 136, 4, 8, 8, share=2)  # 17 output blocks


def test_tile_rule_shares_windows_where_the_loads_pay_for_the_work():
    """The rule's grouped tile (16 registers, 8 FMA chains: AVX2): a tile of one window per
    oc vector loads a broadcast per FMA; sharing the window of 2 blocks halves that, worth its
    1.23x work over groups of 68, and is taken where sharing adds no work."""

    def work(table):
        return lambda share: table[share]

    shared = choose_conv_tile(14, 34, 16, False, 8, True, work({1: 1.114, 2: 1.232}))
    assert (shared.oc_vectors, shared.shared) == (2, True)
    aligned = choose_conv_tile(14, 34, 16, False, 8, True, work({1: 1.0, 2: 1.0}))
    assert aligned.shared and aligned.oc_vectors >= 2
    costly = choose_conv_tile(14, 34, 16, False, 8, True, work({1: 1.0, 2: 3.0}))
    assert not costly.shared
    assert choose_conv_tile(14, 34, 16, False, 8, True) == choose_conv_tile(
        14, 34, 16, False, 8, grouped=True, window_work=None
    )  # no window work: the tile of old, no sharing


def test_a_grouped_record_written_before_shared_windows_keeps_its_kernel():
    """Note [added knobs] in autotune/records.py: a record of a grouped conv that lacks
    `in_block` and `shared_window` takes the input block of the default (the rule it was
    measured with) and shared_window False (Knob.before, the kernel it measured), not the
    default's True."""
    from tessera.autotune.records import current_config

    # an AVX2 target: its default for this conv (2 vectors of 8 channels, shared windows) is
    # what the record predates; nothing here runs
    target = tessera.Target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell")
    mod, _, _ = _model(272, 272, 4, (14, 14), 1, 1, 0)
    contexts: dict = {}
    with tessera.transform.PassContext(opt_level=3):
        (task,) = [
            t for t in autotune.extract_tasks(mod, None, target, contexts=contexts)
            if t.workload.op == "nn.conv2d"
        ]  # fmt: skip
    default = task.default(target)
    assert default["shared_window"] and default["oc_vectors"] == 2
    old = Config(
        default.impl,
        {k: v for k, v in default.knobs().items() if k not in ("in_block", "shared_window")},
    )
    assert not task.valid(old, target)
    upgraded = current_config(task, old, target)
    assert upgraded == Config(default.impl, {**default.knobs(), "shared_window": False})
