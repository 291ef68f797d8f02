"""Sparse TFLite constants (the TACO-style format of `SparsityParameters`) made dense, as the
DENSIFY op does at run time; tessera does it once, at conversion.

    dense = densify(tensor)     # tensor: a tflite_reader.Tensor with .sparsity and .data

The stored values are visited in traversal order: a DENSE level enumerates its `dense_size`
positions, a SPARSE_CSR level the indices array_indices[array_segments[p] : array_segments[p+1]]
of its parent position p. Levels past the tensor's rank are blocks of the dims in `block_map`.
"""

from __future__ import annotations

import numpy as np

_VECTOR_CLASSES = {1: "Int32Vector", 2: "Uint16Vector", 3: "Uint8Vector"}


def _index_vector(kind: int, table) -> np.ndarray:
    import tflite

    if kind not in _VECTOR_CLASSES or table is None:
        raise ValueError(f"a sparse dimension has an unknown index vector type {kind}")
    vec = getattr(tflite, _VECTOR_CLASSES[kind])()
    vec.Init(table.Bytes, table.Pos)
    return np.asarray(vec.ValuesAsNumpy(), np.int64)


def densify(tensor) -> np.ndarray:
    sp = tensor.sparsity
    shape = tensor.shape
    rank = len(shape)
    order = [int(v) for v in sp.TraversalOrderAsNumpy()] if sp.TraversalOrderLength() else []
    block_map = [int(v) for v in sp.BlockMapAsNumpy()] if sp.BlockMapLength() else []
    levels = [sp.DimMetadata(k) for k in range(sp.DimMetadataLength())]
    if len(order) != len(levels) or len(order) != rank + len(block_map):
        raise ValueError(f"sparse tensor {tensor.name!r}: inconsistent sparsity parameters")
    prev = np.zeros(1, np.int64)
    idx: list[np.ndarray] = []
    for m in levels:
        if m.Format() == 0:  # DENSE
            size = m.DenseSize()
            prev = (prev[:, None] * size + np.arange(size)).reshape(-1)
            idx = [np.repeat(a, size) for a in idx] + [np.tile(np.arange(size), len(prev) // size)]
        else:  # SPARSE_CSR
            seg = _index_vector(m.ArraySegmentsType(), m.ArraySegments())
            ind = _index_vector(m.ArrayIndicesType(), m.ArrayIndices())
            counts = seg[prev + 1] - seg[prev]
            starts = np.repeat(seg[prev], counts)
            offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
            pos = starts + offsets
            idx = [np.repeat(a, counts) for a in idx] + [ind[pos]]
            prev = pos
    orig = [None] * rank
    for k in range(rank):
        orig[order[k]] = idx[k]
    for k in range(rank, len(order)):
        block = order[k] - rank
        dim = block_map[block]
        size = levels[k].DenseSize()
        orig[dim] = orig[dim] * size + idx[k]
    values = np.asarray(tensor.data).reshape(-1)
    if values.size != len(prev):
        raise ValueError(
            f"sparse tensor {tensor.name!r} stores {values.size} values, its indices {len(prev)}"
        )
    dense = np.zeros(shape, tensor.data.dtype)
    dense[tuple(orig)] = values
    return dense
