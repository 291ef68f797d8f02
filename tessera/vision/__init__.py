"""Computer-vision helpers around the compiler: detection pre- and post-processing.

    from tessera.vision import YoloDetector, draw_detections
    detector = YoloDetector("yolov3-tiny.cfg", "yolov3-tiny.weights", input_size=416)
    found = detector.detect("photo.jpg")
    draw_detections("photo.jpg", found, detector.names).save("out.jpg")

The decoding and NMS steps are graph ops (`vision.yolo_decode`, `vision.non_max_suppression`
in tessera/graph/ops/vision.py), so a model can also carry them in its graph.
"""

from tessera.vision.detect import (
    Detection,
    YoloDetector,
    decode,
    postprocess,
    read_names,
    select,
    to_pixels,
)
from tessera.vision.image import Placement, draw_detections, letterbox, load_image, resize_bilinear

__all__ = [
    "Detection",
    "Placement",
    "YoloDetector",
    "decode",
    "draw_detections",
    "letterbox",
    "load_image",
    "postprocess",
    "read_names",
    "resize_bilinear",
    "select",
    "to_pixels",
]
