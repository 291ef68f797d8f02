"""tessera.vision: Darknet's letterbox and resize, the mapping of boxes back to the image, the
detection pipeline on a YOLO network with random weights, drawing, and `tessera detect`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera.frontend import darknet_cfg
from tessera.vision import (
    Detection,
    Placement,
    YoloDetector,
    decode,
    draw_detections,
    letterbox,
    postprocess,
    resize_bilinear,
)

CFGS = Path(tessera.frontend.__file__).parent / "darknet_cfgs"


def test_resize_keeps_a_ramp_linear_and_the_corners():
    x = np.arange(5, dtype=np.float32)[None, None, :].repeat(3, axis=1)  # 1 x 3 x 5
    y = resize_bilinear(x, 2, 9)
    np.testing.assert_allclose(y[0, 0], np.linspace(0, 4, 9), atol=1e-6)
    assert y.shape == (1, 2, 9)
    assert resize_bilinear(x, 1, 1)[0, 0, 0] == 4  # Darknet takes the last pixel


def test_letterbox_centres_a_wide_image_on_grey():
    image = np.ones((3, 10, 20), np.float32)
    data, placement = letterbox(image, (16, 16))
    assert placement == Placement(0.0, 4 / 16, 1.0, 8 / 16)
    assert (data[:, 4:12] == 1).all() and (data[:, :4] == 0.5).all() and (data[:, 12:] == 0.5).all()
    # the centre of the input is the centre of the image; the full height maps to 2x
    box = placement.to_image(np.array([[0.5, 0.5, 1.0, 0.25]]))
    np.testing.assert_allclose(box, [[0.5, 0.5, 1.0, 0.5]])


def _detector_files(tmp_path, size=32):
    cfg = CFGS / "yolov3-tiny.cfg"
    net = darknet_cfg.read_cfg(cfg)
    plan = darknet_cfg.plan_layers(net, (3, size, size))
    weights = tmp_path / "tiny.weights"
    darknet_cfg.write_weights(weights, plan, darknet_cfg.random_weights(plan, 0))
    return cfg, weights


def test_postprocess_maps_a_planted_detection_to_pixels():
    # one head, one anchor, 2 classes, a 2x2 grid; plant a confident box in cell (row 1, col 0)
    from tessera.frontend.darknet import DetectionHead

    head = DetectionHead("yolo", 0, 2, ((0.5, 0.25),), (2, 2))
    out = np.zeros((1, 7, 2, 2), np.float32)
    out[0, :, 1, 0] = [0.5, 0.5, 0.0, 0.0, 0.9, 0.1, 1.0]
    found = postprocess([out], [head], Placement(0, 0, 1, 1), (200, 100), score_threshold=0.5)
    assert found == [Detection(1, pytest.approx(0.9), pytest.approx((0.0, 62.5, 100.0, 87.5)))]
    boxes, scores = decode([out], [head])
    assert boxes.shape == (1, 4, 4) and scores.shape == (1, 4, 2)


def test_detector_runs_compiled_and_interpreted_alike(tmp_path):
    cfg, weights = _detector_files(tmp_path)
    image = np.random.default_rng(0).uniform(0, 1, (3, 48, 80)).astype(np.float32)
    interpreted = YoloDetector(cfg, weights, input_size=32, target=None).detect(image, 0.28)
    compiled = YoloDetector(cfg, weights, input_size=32).detect(image, 0.28)
    assert interpreted, "random weights at threshold 0.28 detect a few (13)"
    assert [d.class_id for d in compiled] == [d.class_id for d in interpreted]
    for a, b in zip(compiled, interpreted, strict=True):
        assert a.score == pytest.approx(b.score, rel=1e-4)
        np.testing.assert_allclose(a.box, b.box, rtol=1e-3, atol=1e-2)
        assert 0 <= a.box[0] <= a.box[2] <= 79 and 0 <= a.box[1] <= a.box[3] <= 47


def test_draw_detections_colours_the_box_outline():
    image = np.zeros((3, 40, 60), np.float32)
    im = draw_detections(image, [Detection(0, 0.9, (10.0, 20.0, 50.0, 35.0))], ["thing"])
    pixels = np.asarray(im)
    assert im.size == (60, 40)
    assert pixels[35, 30].any() and pixels[28, 10].any()  # bottom and left edges are drawn
    assert not pixels[28, 30].any()  # the inside is not filled


def test_detect_command_prints_and_draws(tmp_path):
    from PIL import Image

    cfg, weights = _detector_files(tmp_path)
    photo, out, names = tmp_path / "photo.png", tmp_path / "out.png", tmp_path / "my.names"
    Image.fromarray(np.full((48, 64, 3), 128, np.uint8)).save(photo)
    names.write_text("".join(f"thing{i}\n" for i in range(80)))
    cmd = [sys.executable, "-m", "tessera.cli", "detect", cfg, weights, photo, "-o", out,
           "--size", "32", "--thresh", "0.2", "--interpret", "--names", names]  # fmt: skip
    result = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "detection(s), network 32x32" in result.stdout
    assert "  thing" in result.stdout  # one line per detection, with the given names
    assert Image.open(out).size == (64, 48)


def test_detect_command_reports_a_bad_weights_file(tmp_path):
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"not read")
    weights = tmp_path / "bad.weights"
    weights.write_bytes(np.array([0, 2, 0, 0, 0, 1, 2], "<i4").tobytes())
    cmd = [sys.executable, "-m", "tessera.cli", "detect", CFGS / "yolov3-tiny.cfg", weights, photo]
    result = subprocess.run(list(map(str, cmd)), capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert "error:" in result.stderr and "do not belong together" in result.stderr
    assert "Traceback" not in result.stderr
