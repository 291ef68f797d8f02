"""Object detection with a YOLO model: run the network, decode, threshold, NMS, map to pixels.

    detector = YoloDetector("yolov3-tiny.cfg", "yolov3-tiny.weights")
    for d in detector.detect("photo.jpg"):
        print(detector.names[d.class_id], d.score, d.box)      # box: x1, y1, x2, y2 in pixels

Decoding and suppression are the graph ops `vision.yolo_decode` and
`vision.non_max_suppression`, evaluated here with their numpy references on the host (the
network itself is compiled): detection keeps Darknet's rules (a class of a box is reported when
objectness * class score > threshold; per class, greedy NMS on IoU > nms_threshold, in the
coordinates of the original image).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tessera.frontend.darknet import DetectionHead, detection_heads, from_darknet
from tessera.graph.op import get_op
from tessera.vision.image import Placement, letterbox, load_image

COCO_NAMES = Path(__file__).resolve().parents[1] / "frontend" / "darknet_cfgs" / "coco.names"


@dataclass(frozen=True)
class Detection:
    class_id: int
    score: float
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in pixels of the image


def read_names(path) -> list[str]:
    """Class names, one a line (Darknet's .names files)."""
    try:
        return [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()]
    except OSError as e:
        raise ValueError(f"cannot read class names {str(path)!r}: {e.strerror or e}") from None


def decode(outputs, heads: list[DetectionHead]) -> tuple[np.ndarray, np.ndarray]:
    """(boxes [B, N, 4] as (x_center, y_center, w, h) in fractions of the network input,
    scores [B, N, classes]) of all detection outputs together."""
    op = get_op("vision.yolo_decode")
    if len(outputs) != len(heads):
        raise ValueError(f"{len(outputs)} outputs for {len(heads)} detection layers")
    boxes, scores = [], []
    for out, head in zip(outputs, heads, strict=True):
        attrs = {"anchors": head.anchors, "classes": head.classes, "coords": head.coords}
        b, s = op.evaluate([np.asarray(out, np.float32)], attrs)
        boxes.append(b)
        scores.append(s)
    return np.concatenate(boxes, axis=1), np.concatenate(scores, axis=1)


def select(boxes, scores, score_threshold=0.5, iou_threshold=0.45, max_per_class=100):
    """Rows (batch, class, box) that survive the score threshold and class-wise NMS;
    boxes [B, N, 4] (x_center, y_center, w, h), scores [B, N, C]."""
    op = get_op("vision.non_max_suppression")
    attrs = {
        "max_output_per_class": max_per_class,
        "iou_threshold": float(iou_threshold),
        "score_threshold": float(score_threshold),
        "center_point_box": 1,
    }
    selected, count = op.evaluate([boxes, np.ascontiguousarray(scores.transpose(0, 2, 1))], attrs)
    return selected[: int(count)]


def to_pixels(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """(x_center, y_center, w, h) fractions -> (x1, y1, x2, y2) pixels, clipped to the image."""
    x, y, w, h = np.moveaxis(boxes, -1, 0)
    out = np.stack([(x - w / 2) * width, (y - h / 2) * height, (x + w / 2) * width,
                    (y + h / 2) * height], axis=-1)  # fmt: skip
    return np.clip(out, 0, [width - 1, height - 1, width - 1, height - 1])


def postprocess(outputs, heads, placement: Placement, image_size, score_threshold=0.5,
                iou_threshold=0.45, max_per_class=100) -> list[Detection]:  # fmt: skip
    """Detections of batch item 0, highest score first; image_size is (width, height)."""
    boxes, scores = decode(outputs, heads)
    boxes = placement.to_image(boxes)
    rows = select(boxes, scores, score_threshold, iou_threshold, max_per_class)
    width, height = image_size
    pixels = to_pixels(boxes[0], width, height)
    found = [
        Detection(int(c), float(scores[0, i, c]), tuple(float(v) for v in pixels[i]))
        for b, c, i in rows
        if b == 0
    ]
    return sorted(found, key=lambda d: -d.score)


class YoloDetector:
    """A Darknet YOLO network compiled for `target` (or run by the graph interpreter when
    `target` is None), with Darknet's pre- and post-processing."""

    def __init__(self, cfg, weights, input_size=None, names=None, target="llvm"):
        self.heads = detection_heads(cfg, input_size)
        if not self.heads:
            raise ValueError("the network has no [yolo] or [region] layer: it is not a detector")
        mod, params = from_darknet(cfg, weights, input_size)
        self.input_shape = mod["main"].params[0].type.shape  # (1, c, h, w)
        classes = self.heads[0].classes
        self.names = read_names(names) if names else self._default_names(classes)
        if target is None:
            from tessera.graph import run_function

            func = mod["main"]
            self._run = lambda data: run_function(func, {"data": data}, params)
        else:
            import tessera

            lib = tessera.build(mod, target=target, params=params)
            module = tessera.runtime.GraphModule(lib["default"](tessera.cpu(0)))
            self._run = lambda data: self._run_compiled(module, data)

    @staticmethod
    def _default_names(classes: int) -> list[str]:
        coco = read_names(COCO_NAMES)
        return coco if classes == len(coco) else [f"class{i}" for i in range(classes)]

    def _run_compiled(self, module, data):
        module.set_input("data", data)
        module.run()
        return [module.get_output(i).numpy() for i in range(len(self.heads))]

    def detect(self, image, score_threshold=0.5, iou_threshold=0.45) -> list[Detection]:
        """Detections in `image` (a path or float32 [3, h, w] in [0, 1])."""
        pixels = load_image(image) if not isinstance(image, np.ndarray) else image
        _, c, h, w = self.input_shape
        if pixels.shape[0] != c:
            raise ValueError(f"the network takes {c}-channel images, got {pixels.shape[0]}")
        data, placement = letterbox(pixels, (h, w))
        outputs = self._run(data[None])
        size = (pixels.shape[2], pixels.shape[1])
        return postprocess(outputs, self.heads, placement, size, score_threshold, iou_threshold)
