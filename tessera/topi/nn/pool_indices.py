"""The Indices output of ONNX MaxPool: where each window's maximum sits in the input.

    i = topi.nn.pool_indices.max_pool_indices(x, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, 0)

Output position o reduces over the window's kernel positions (an argmax reducer: the first
maximum wins, padding never does) and gives the flat int64 index of the maximum in x, row-major
(`storage_order` 0) or with the spatial axes column-major (1), as ONNX and PyTorch do.
"""

from __future__ import annotations

from tessera import te
from tessera.topi.reduce import _arg_reducer


def max_pool_indices(x, pool_size, strides, padding, dilation, out_spatial, storage_order=0):
    """int64 flat indices of the window maxima of x (N, C, *spatial); padding in ONNX order."""
    nd = len(pool_size)
    spatial = [int(d.value) for d in x.shape[2:]]
    axes = [te.reduce_axis((0, k), name=f"k{d}") for d, k in enumerate(pool_size)]
    reducer = _arg_reducer(True, False, x.dtype.is_float)
    lowest = te.min_value(x.dtype)

    def body(n, c, *o):
        pos, valid = [], te.const(True)
        for d in range(nd):
            p = o[d] * strides[d] - padding[d] + axes[d].var * dilation[d]
            valid = te.logical_and(valid, te.logical_and(p >= 0, p < spatial[d]))
            pos.append(p)
        safe = [te.max(te.min(p, n_ - 1), 0) for p, n_ in zip(pos, spatial, strict=True)]
        order = reversed(range(nd)) if storage_order else range(nd)
        flat = te.cast(n * x.shape[1] + c, "int64")
        for d in order:
            flat = flat * spatial[d] + te.cast(safe[d], "int64")
        value = te.if_then_else(valid, x(n, c, *safe), lowest)
        return reducer((flat, value), axis=axes, where=valid)

    shape = (*x.shape[:2], *(te.const(int(s), "int32") for s in out_spatial))
    index, _ = te.compute(shape, body, name="max_pool_indices", tag="pool_indices")
    return index
