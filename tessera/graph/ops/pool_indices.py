"""`nn.max_pool_indices`: the Indices output of ONNX MaxPool (1-D to 3-D).

    %i = nn.max_pool_indices(%x, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0))

Same attributes as `nn.max_poolNd` plus `storage_order`; the output is int64, shaped like the
pool's output, each element the flat index into x of its window's first maximum.
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, register_op
from tessera.graph.ops.common import type_error
from tessera.graph.ops.nn import pool_output_size
from tessera.topi.nn import pool_indices as topi_pool_indices

max_pool_indices = register_op("nn.max_pool_indices", kind=OpKind.OPAQUE)


def _out_spatial(shape, pool_size, strides, padding, dilation, ceil_mode):
    nd = len(pool_size)
    return tuple(
        pool_output_size(
            shape[2 + d],
            pool_size[d],
            strides[d],
            padding[d],
            padding[d + nd],
            dilation[d],
            ceil_mode,
        )  # fmt: skip
        for d in range(nd)
    )


@max_pool_indices.type_rule
def _(x: TensorType, pool_size, strides, padding, dilation=None, ceil_mode=0, storage_order=0):
    nd = len(pool_size)
    dilation = dilation or (1,) * nd
    if x.ndim != nd + 2 or len(strides) != nd or len(padding) != 2 * nd or len(dilation) != nd:
        raise type_error("nn.max_pool_indices", f"a {nd}-D window does not fit {x}")
    out = _out_spatial(x.shape, pool_size, strides, padding, dilation, ceil_mode)
    if min(out) < 1:
        raise type_error("nn.max_pool_indices", f"the window is larger than {x}")
    return TensorType((*x.shape[:2], *out), "int64")


@max_pool_indices.reference
def _(x, pool_size, strides, padding, dilation=None, ceil_mode=0, storage_order=0):
    nd = len(pool_size)
    dilation = dilation or (1,) * nd
    out = _out_spatial(x.shape, pool_size, strides, padding, dilation, ceil_mode)
    result = np.zeros((*x.shape[:2], *out), np.int64)
    spatial = x.shape[2:]
    for n, c, *o in np.ndindex(result.shape):
        best, best_value = None, None
        for k in np.ndindex(*pool_size):
            p = [o[d] * strides[d] - padding[d] + k[d] * dilation[d] for d in range(nd)]
            if any(not 0 <= p[d] < spatial[d] for d in range(nd)):
                continue
            v = x[(n, c, *p)]
            if best is None or v > best_value:
                best, best_value = p, v
        order = reversed(range(nd)) if storage_order else range(nd)
        flat = n * x.shape[1] + c
        for d in order:
            flat = flat * spatial[d] + best[d]
        result[(n, c, *o)] = flat
    return result


@max_pool_indices.compute
def _(x, pool_size, strides, padding, dilation=None, ceil_mode=0, storage_order=0):
    nd = len(pool_size)
    dilation = dilation or (1,) * nd
    shape = [int(d.value) for d in x.shape]
    out = _out_spatial(shape, pool_size, strides, padding, dilation, ceil_mode)
    return topi_pool_indices.max_pool_indices(
        x, pool_size, strides, padding, dilation, out, storage_order
    )
