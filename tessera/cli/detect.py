"""`tessera detect`: a Darknet YOLO network on one picture; prints the detections and draws them.

    tessera detect yolov3.cfg yolov3.weights photo.jpg -o out.jpg
    tessera detect yolov3-tiny.cfg yolov3-tiny.weights photo.jpg --size 320 --thresh 0.3

The network is compiled for the CPU (`--interpret` runs the graph interpreter instead).
Class names default to COCO's for 80 classes (`--names coco.names` to choose).
"""

from __future__ import annotations

import time

import click

from tessera.cli.common import ModelError, stdout_console
from tessera.cli.options import verbosity_options


@click.command("detect")
@click.argument("cfg", type=click.Path(exists=True, dir_okay=False))
@click.argument("weights", type=click.Path(exists=True, dir_okay=False))
@click.argument("image", type=click.Path(exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the picture here.")
@click.option("--names", type=click.Path(exists=True, dir_okay=False), help="Class names file.")
@click.option("--size", type=click.IntRange(min=32), default=None,
              help="Network input size (a multiple of 32). Default: the cfg's.")  # fmt: skip
@click.option("--thresh", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="Score threshold (objectness * class score).")  # fmt: skip
@click.option("--nms", type=click.FloatRange(0, 1), default=0.45, show_default=True,
              help="IoU above which the lower-scoring box of a class is suppressed.")  # fmt: skip
@click.option("--interpret", is_flag=True, help="Run the graph interpreter instead of compiling.")
@verbosity_options
def detect(cfg, weights, image, output, names, size, thresh, nms, interpret):
    """Detect objects in IMAGE with the Darknet network CFG + WEIGHTS."""
    from tessera.vision import YoloDetector, draw_detections, load_image

    start = time.perf_counter()
    try:
        detector = YoloDetector(cfg, weights, input_size=size, names=names,
                                target=None if interpret else "llvm")  # fmt: skip
        pixels = load_image(image)
    except ValueError as e:  # a problem with the user's files: one paragraph, exit code 1
        raise ModelError(str(e)) from None
    ready = time.perf_counter()
    found = detector.detect(pixels, score_threshold=thresh, iou_threshold=nms)
    done = time.perf_counter()
    console = stdout_console()
    _, _, h, w = detector.input_shape
    console.print(
        f"{image}: {len(found)} detection(s), network {w}x{h}, "
        f"prepared in {ready - start:.1f} s, detected in {(done - ready) * 1000:.0f} ms"
    )
    for d in found:
        x1, y1, x2, y2 = (round(v) for v in d.box)
        console.print(f"  {detector.names[d.class_id]}: {d.score:.0%}  ({x1}, {y1})-({x2}, {y2})")
    if output:
        draw_detections(pixels, found, detector.names).save(output)
        console.print(f"wrote {output}")
