"""Reading Darknet files: the cfg parser, the layer plan, the weights format, and the errors a
user sees for unsupported layers and malformed files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.frontend import darknet_cfg, from_darknet
from tessera.frontend.darknet_cfg import UnsupportedLayerError, parse_cfg, plan_layers

CFGS = Path(tessera.frontend.__file__).parent / "darknet_cfgs"

TINY = """
[net]
width=8
height=8
channels=3   # comments after values are dropped
; a comment line

[convolutional]
batch_normalize=1
filters=4
size=3
stride=1
pad=1
activation=leaky
"""


@pytest.mark.parametrize("name", ["yolov3", "yolov3-tiny", "yolov4-tiny"])
def test_shipped_cfgs_have_the_published_weight_counts(name):
    # the sizes of the published .weights files: 20 header bytes + 4 per float
    published = {"yolov3": 248007048, "yolov3-tiny": 35434956, "yolov4-tiny": 24251276}
    plan = plan_layers(darknet_cfg.read_cfg(CFGS / f"{name}.cfg"))
    assert 20 + 4 * sum(n for p in plan for n in p.weight_counts.values()) == published[name]


def test_parse_options_and_comments():
    net = parse_cfg(TINY)
    assert net.input_shape == (3, 8, 8)
    assert net.layers[0].kind == "convolutional" and net.layers[0].int("filters") == 4


def test_weights_round_trip_and_the_old_header(tmp_path):
    plan = plan_layers(parse_cfg(TINY))
    arrays = darknet_cfg.random_weights(plan, seed=3)
    path = tmp_path / "w.weights"
    darknet_cfg.write_weights(path, plan, arrays)
    back = darknet_cfg.read_weights(path, plan)
    for name in ("biases", "scales", "rolling_mean", "rolling_variance", "weights"):
        np.testing.assert_array_equal(back[0][name], arrays[0][name])
    # version 0.1 files store `seen` in 4 bytes, not 8
    old = np.array([0, 1, 0, 0], "<i4").tobytes() + path.read_bytes()[20:]
    np.testing.assert_array_equal(darknet_cfg.read_weights(old, plan)[0]["weights"],
                                  arrays[0]["weights"])  # fmt: skip


def test_unsupported_layers_are_reported_all_at_once():
    text = TINY + "\n[lstm]\noutput=4\n\n[convolutional]\nfilters=4\nactivation=gelu\n"
    text += "\n[convolutional]\nfilters=4\ndilation=2\nactivation=leaky\n"
    text += "\n[yolo]\nnew_coords=1\nmask=0\nanchors=1,1\nclasses=1\n"
    with pytest.raises(UnsupportedLayerError) as e:
        from_darknet(text, b"")
    assert [(i, kind) for i, kind, _ in e.value.layers] == [
        (1, "lstm"), (2, "convolutional"), (3, "convolutional"), (4, "yolo")]  # fmt: skip
    message = str(e.value)
    assert "4 unsupported" in message and "'gelu'" in message and "new_coords" in message
    assert "option dilation=2" in message
    assert "line 16" in message  # where [lstm] starts


@pytest.mark.parametrize(
    "text, match",
    [
        ("[convolutional]\nfilters=4\n", "starts with a \\[net\\] section"),
        ("[net]\nwidth=8\n[convolutional\n", "malformed section header"),
        ("[net]\nwidth 8\n", "expected key=value"),
        ("[net]\n[convolutional]\nfilters=four\n", "filters='four' is not a valid int"),
        ("[net]\n[route]\nlayers=3\n", "refers to layer 3, which is not an earlier layer"),
        ("[net]\nwidth=8\nheight=8\n[convolutional]\nfilters=6\n[yolo]\nmask=0\nanchors=1,1\n"
         "classes=2\n", "need 7"),
        ("[net]\nwidth=2\nheight=2\n[convolutional]\nsize=5\nfilters=1\n", "too small"),
    ],
)  # fmt: skip
def test_malformed_cfgs_are_clear_errors(text, match):
    with pytest.raises(ValueError, match=match):
        plan_layers(parse_cfg(text))


def test_malformed_weights_are_clear_errors(tmp_path):
    plan = plan_layers(parse_cfg(TINY))
    with pytest.raises(ValueError, match="too short for a Darknet weights header"):
        darknet_cfg.read_weights(b"\0\0", plan)
    with pytest.raises(ValueError, match="not a Darknet weights file"):
        darknet_cfg.read_weights(np.array([12345, 7, 0, 0, 0], "<i4").tobytes(), plan)
    short = np.array([0, 2, 0, 0, 0], "<i4").tobytes() + np.zeros(10, "<f4").tobytes()
    with pytest.raises(ValueError, match="holds 10 weights .* needs 124"):
        darknet_cfg.read_weights(short, plan)
    with pytest.raises(ValueError, match="cannot read Darknet weights"):
        darknet_cfg.read_weights(tmp_path / "missing.weights", plan)
    with pytest.raises(ValueError, match="cannot read Darknet cfg"):
        from_darknet(tmp_path / "missing.cfg", b"")


def test_input_size_and_batch(tmp_path):
    plan = plan_layers(parse_cfg(TINY), (3, 16, 12))
    path = tmp_path / "w.weights"
    darknet_cfg.write_weights(path, plan, darknet_cfg.random_weights(plan))
    mod, params = from_darknet(TINY, path, input_size=(16, 12), batch=2)
    assert mod["main"].params[0].type.shape == (2, 3, 16, 12)
    assert sorted(params) == ["layer0_bias", "layer0_weight"]
    assert "layer0:convolutional" in mod["main"].body[0].span
