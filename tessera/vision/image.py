"""Images in and out of a detector: loading (Pillow), Darknet's letterbox resize, and drawing
boxes with labels.

    image = load_image("photo.jpg")                        # float32 [3, h, w] in [0, 1]
    data, box = letterbox(image, (416, 416))               # [3, 416, 416], where the image sits
    draw_detections("photo.jpg", detections, names).save("out.jpg")

`letterbox` is Darknet's letterbox_image: the image scaled to fit (aspect kept) with Darknet's
bilinear resize (corners aligned), centred on a grey (0.5) canvas. Pillow is an optional
dependency (`pip install tessera[vision]`), imported where an image file is read or drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def _pillow():
    try:
        from PIL import Image, ImageDraw, ImageFont
    except ImportError:  # an optional dependency
        raise ImportError(
            "reading and drawing images needs Pillow: pip install 'tessera[vision]'"
        ) from None
    return Image, ImageDraw, ImageFont


def load_image(path) -> np.ndarray:
    """An image file as float32 [3, height, width] RGB in [0, 1]."""
    Image, _, _ = _pillow()
    try:
        with Image.open(path) as im:
            rgb = np.asarray(im.convert("RGB"), np.float32) / 255.0
    except OSError as e:
        raise ValueError(f"cannot read image {str(path)!r}: {e}") from None
    return np.ascontiguousarray(rgb.transpose(2, 0, 1))


def _taps(size_in: int, size_out: int):
    """Darknet's sample positions: i * (in - 1) / (out - 1); the last output takes the last
    input (also when out == 1)."""
    scale = (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    pos = np.arange(size_out) * scale
    idx = np.minimum(np.floor(pos).astype(int), size_in - 1)
    frac = (pos - idx).astype(np.float32)
    idx[-1], frac[-1] = size_in - 1, 0.0
    return idx, np.minimum(idx + 1, size_in - 1), frac


def resize_bilinear(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Darknet's resize_image: bilinear with the corners aligned, [c, h, w] -> [c, height, width],
    along x first, then along y."""
    ix, nx, dx = _taps(image.shape[2], width)
    part = image[:, :, ix] * (1 - dx) + image[:, :, nx] * dx
    iy, ny, dy = _taps(image.shape[1], height)
    dy = dy[:, None]
    return (part[:, iy, :] * (1 - dy) + part[:, ny, :] * dy).astype(np.float32)


@dataclass(frozen=True)
class Placement:
    """Where a letterboxed image sits in the network input, in fractions of that input."""

    left: float
    top: float
    width: float
    height: float

    def to_image(self, boxes: np.ndarray) -> np.ndarray:
        """(x_center, y_center, w, h) boxes in the network input -> fractions of the image."""
        out = np.array(boxes, np.float32, copy=True)
        out[..., 0] = (out[..., 0] - self.left) / self.width
        out[..., 1] = (out[..., 1] - self.top) / self.height
        out[..., 2] /= self.width
        out[..., 3] /= self.height
        return out


def letterbox(image: np.ndarray, size) -> tuple[np.ndarray, Placement]:
    """Darknet's letterbox_image: (float32 [c, H, W] input, its Placement) for size (H, W)."""
    height, width = size
    c, h, w = image.shape
    if width / w < height / h:
        new_w, new_h = width, max(1, h * width // w)
    else:
        new_w, new_h = max(1, w * height // h), height
    resized = resize_bilinear(image, new_h, new_w)
    out = np.full((c, height, width), 0.5, np.float32)
    top, left = (height - new_h) // 2, (width - new_w) // 2
    out[:, top : top + new_h, left : left + new_w] = resized
    return out, Placement(left / width, top / height, new_w / width, new_h / height)


_COLORS = [
    (255, 56, 56),
    (255, 157, 151),
    (255, 112, 31),
    (255, 178, 29),
    (207, 210, 49),
    (72, 249, 10),
    (146, 204, 23),
    (61, 219, 134),
    (26, 147, 52),
    (0, 212, 187),
    (44, 153, 168),
    (0, 194, 255),
    (52, 69, 147),
    (100, 115, 255),
    (0, 24, 236),
    (132, 56, 255),
    (82, 0, 133),
    (203, 56, 255),
    (255, 149, 200),
    (255, 55, 199),
]


def draw_detections(image, detections, names=None):
    """A Pillow image with each detection's box and label ("name 0.87") drawn on it. `image`:
    a path, a PIL image or float [3, h, w] in [0, 1]; detections: `Detection`s with boxes in
    pixels of this image."""
    Image, ImageDraw, ImageFont = _pillow()
    if isinstance(image, np.ndarray):
        pixels = np.clip(image.transpose(1, 2, 0) * 255 + 0.5, 0, 255).astype(np.uint8)
        im = Image.fromarray(pixels)
    elif isinstance(image, Image.Image):
        im = image.convert("RGB")
    else:
        with Image.open(image) as f:
            im = f.convert("RGB")
    draw = ImageDraw.Draw(im)
    font = ImageFont.load_default()
    thick = max(1, round(min(im.size) / 200))
    for d in detections:
        color = _COLORS[d.class_id % len(_COLORS)]
        x1, y1, x2, y2 = (float(v) for v in d.box)
        draw.rectangle([x1, y1, x2, y2], outline=color, width=thick)
        label = f"{names[d.class_id] if names else d.class_id} {d.score:.2f}"
        left, top, right, bottom = draw.textbbox((x1, y1), label, font=font)
        ty = y1 - (bottom - top) - 2 if y1 - (bottom - top) - 2 >= 0 else y1
        draw.rectangle([x1, ty, x1 + (right - left) + 4, ty + (bottom - top) + 2], fill=color)
        draw.text((x1 + 2, ty - (top - y1)), label, fill=(0, 0, 0), font=font)
    return im
