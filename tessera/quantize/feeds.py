"""Calibration feeds from a .npz file (the CLI's `--calibrate data.npz`): one array per model
input, named like the input, samples stacked on the first axis.

    feeds = feeds_from_npz("data.npz", mod, params)   # [{input name: one sample}, ...]

A sample is arr[i] when the array's trailing dims are the input's whole shape, or a batch of
the input's batch size (arr[i*b:(i+1)*b]) when they are the input's shape without its batch.
"""

from __future__ import annotations

import numpy as np


def feeds_from_npz(path, mod, weights=None) -> list[dict]:
    """The samples of the .npz for the inputs of mod's main that are not in `weights`."""
    data = np.load(path)
    params = {p.name: p for p in mod["main"].params if p.name not in (weights or {})}
    missing = sorted(set(params) - set(data.files))
    if missing:
        raise ValueError(f"{path}: no array for the model input(s) {', '.join(missing)} "
                         f"(arrays: {', '.join(data.files) or 'none'})")  # fmt: skip
    samples = {}
    for name, p in params.items():
        arr, shape = data[name], tuple(p.type.shape)
        dtype = p.type.dtype.numpy_name
        if arr.shape[1:] == shape:
            samples[name] = [arr[i].astype(dtype) for i in range(arr.shape[0])]
        elif arr.shape[1:] == shape[1:] and shape and arr.shape[0] % shape[0] == 0:
            b = shape[0]
            samples[name] = [arr[i : i + b].astype(dtype) for i in range(0, arr.shape[0], b)]
        else:
            raise ValueError(f"{path}: array {name!r} of shape {arr.shape} does not stack "
                             f"samples of the input's shape {shape}")  # fmt: skip
    counts = {len(v) for v in samples.values()}
    if len(counts) != 1:
        raise ValueError(f"{path}: the inputs have different numbers of samples {counts}")
    n = counts.pop()
    return [{name: samples[name][i] for name in params} for i in range(n)]
