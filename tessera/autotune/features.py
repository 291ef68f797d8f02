"""Features of a lowered loop program, for the learned cost model (Ansor's, in small).

    x = program_features([prim_func, ...])      # one fixed-length float vector
    FEATURE_NAMES[i]                            # what x[i] measures

The program is the TIR after the tir passes (buffers flat, vector loops turned into Ramp
stores). Every store statement is one "computation": for it we take the loops around it (how
many iterations, how many of them parallel, vectorized (its lanes), unrolled, serial), its
arithmetic (float and integer operations per iteration), and for every buffer it reads or
writes the stride of the innermost loop in that access (contiguous, strided or invariant), the
bytes it touches (the loops whose variables index it) and its reuse (iterations per touched
element). The features of a program are those of its heaviest store (the one with the most
operations), the sums over all stores, and a few totals: allocations, parallel grain,
arithmetic intensity. Numbers are on a log2(1 + x) scale, so that programs of any size share
one scale and a tree model can split them.

The features do not depend on the op or the schedule template, only on the loops: a model
trained on one matmul's measurements ranks another matmul's (or a convolution's) candidates
better than chance, which is what transfer across tasks needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tessera.arith.canonical import linearize
from tessera.ir.node import Visitor
from tessera.tir import expr as E
from tessera.tir.stmt import Allocate, BufferStore, For, ForKind

FEATURE_NAMES = (
    # the heaviest store
    "ops",  # float + int operations over all iterations
    "float_ops",
    "iterations",
    "lanes",  # vector lanes of its store
    "parallel",  # iterations of parallel loops around it
    "unrolled",  # iterations of unrolled loops around it
    "serial_depth",  # serial loops around it
    "innermost_extent",  # the innermost loop around it (1 when a vector store is innermost)
    "loads",  # loads per iteration
    "contiguous_loads",  # loads whose innermost-loop stride is 0 or 1 (or a Ramp of stride 1)
    "strided_loads",  # loads with another stride: a new cache line per iteration
    "vector_loads",
    "local_accesses",  # loads and stores of local (register/stack) buffers
    "bytes_touched",  # sum over its buffers of the bytes the loops index
    "max_buffer_bytes",
    "reuse",  # iterations * accesses / elements touched
    "intensity",  # ops / bytes touched
    "stride_of_store",  # innermost-loop stride of the store (0 invariant, 1 contiguous)
    # sums over all stores
    "total_ops",
    "total_bytes",
    "total_iterations",
    "stores",
    "vector_fraction",  # iterations of vector stores / all iterations (lanes counted)
    # the program
    "alloc_bytes",
    "local_alloc_bytes",
    "allocs",
    "outer_parallel",  # extent of the outermost parallel loop (the grain of the threads)
    "max_depth",
)


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


@dataclass
class _Loop:
    var: E.Var
    extent: int
    kind: ForKind


@dataclass
class _Store:
    iterations: float
    lanes: int
    ops: float
    float_ops: float
    parallel: float
    unrolled: float
    serial_depth: int
    innermost: int
    loads: int = 0
    contiguous: int = 0
    strided: int = 0
    vector_loads: int = 0
    local: int = 0
    bytes_touched: float = 0.0
    max_buffer: float = 0.0
    elements: float = 0.0
    store_stride: float = 0.0
    buffers: dict = field(default_factory=dict)


_ARITH = (E.Add, E.Sub, E.Mul, E.Div, E.FloorDiv, E.FloorMod, E.Min, E.Max)


class _Ops(Visitor):
    """Arithmetic of one expression (vector operations count their lanes) and its loads."""

    def __init__(self):
        self.float_ops = 0.0
        self.int_ops = 0.0
        self.loads: list[E.BufferLoad] = []

    def generic_visit(self, node):
        if isinstance(node, _ARITH) or isinstance(node, E.Call):
            dt = node.dtype
            lanes = getattr(dt, "lanes", 1) or 1
            if dt.is_float:
                self.float_ops += lanes
            else:
                self.int_ops += lanes
        return super().generic_visit(node)

    def visit_BufferLoad(self, node):
        self.loads.append(node)
        # index arithmetic is address computation, counted apart from the value's
        return None


def _const(e) -> int | None:
    return e.value if isinstance(e, E.IntImm) else None


class _Walk(Visitor):
    def __init__(self):
        self.loops: list[_Loop] = []
        self.stores: list[_Store] = []
        self.alloc_bytes = 0.0
        self.local_alloc_bytes = 0.0
        self.allocs = 0
        self.outer_parallel = 0
        self.max_depth = 0

    def visit_For(self, node: For):
        extent = _const(node.extent)
        extent = extent if extent is not None else 16  # a symbolic extent: a guess
        if node.kind == ForKind.PARALLEL and not any(
            lp.kind == ForKind.PARALLEL for lp in self.loops
        ):
            self.outer_parallel = max(self.outer_parallel, extent)
        self.loops.append(_Loop(node.loop_var, max(1, extent), node.kind))
        self.max_depth = max(self.max_depth, len(self.loops))
        self.visit(node.body)
        self.loops.pop()

    def visit_Allocate(self, node: Allocate):
        buf = node.buffer
        size = _bytes(buf, _numel(buf))
        self.allocs += 1
        self.alloc_bytes += size
        if getattr(buf, "scope", "global") == "local":
            self.local_alloc_bytes += size
        self.visit(node.body)

    def visit_BufferStore(self, node: BufferStore):
        iterations = math.prod(lp.extent for lp in self.loops)
        lanes = _lanes(node.indices)
        ops = _Ops()
        ops.visit(node.value)
        st = _Store(
            iterations=iterations,
            lanes=lanes,
            ops=(ops.float_ops + ops.int_ops) * iterations,
            float_ops=ops.float_ops * iterations,
            parallel=math.prod(lp.extent for lp in self.loops if lp.kind == ForKind.PARALLEL),
            unrolled=math.prod(lp.extent for lp in self.loops if lp.kind == ForKind.UNROLLED),
            serial_depth=sum(lp.kind == ForKind.SERIAL for lp in self.loops),
            innermost=self.loops[-1].extent if self.loops else 1,
        )
        st.store_stride = self._access(st, node.buffer, node.indices, lanes)
        for load in ops.loads:
            st.loads += 1
            load_lanes = _lanes(load.indices)
            stride = self._access(st, load.buffer, load.indices, load_lanes)
            st.vector_loads += load_lanes > 1
            if stride in (0, 1):
                st.contiguous += 1
            else:
                st.strided += 1
        self.stores.append(st)

    def _access(self, st: _Store, buf, indices, lanes: int) -> float:
        """Record one access of `buf` in `st`; return its innermost-loop stride."""
        if getattr(buf, "scope", "global") == "local":
            st.local += 1
        index = indices[0] if len(indices) == 1 else None
        if isinstance(index, E.Ramp):
            stride = _const(index.stride)
            base = index.base
        else:
            stride, base = None, index
        coeffs = {}
        if base is not None and base.dtype.is_integer and base.dtype.lanes == 1:
            lin = linearize(base)
            for term, c in lin.terms.items():
                if isinstance(term, E.Var):
                    coeffs[id(term)] = c
        # elements touched: the loops whose variable indexes the buffer (all of them when the
        # index is not linear in the loop variables)
        touched = lanes
        for lp in self.loops:
            if base is None or id(lp.var) in coeffs:
                touched *= lp.extent
        size = _numel(buf)
        touched = min(touched, size) if size else touched
        nbytes = _bytes(buf, touched)
        key = id(buf)
        if key not in st.buffers:
            st.buffers[key] = nbytes
            st.bytes_touched += nbytes
            st.elements += touched
            st.max_buffer = max(st.max_buffer, nbytes)
        if lanes > 1:
            return float(stride if stride is not None else 2)
        inner = next((lp for lp in reversed(self.loops) if lp.extent > 1), None)
        if inner is None:
            return 0.0
        return float(abs(coeffs.get(id(inner.var), 0))) if base is not None else 2.0


def _lanes(indices) -> int:
    for i in indices:
        if isinstance(i, E.Ramp):
            return i.lanes
    return 1


def _numel(buf) -> float:
    shape = getattr(buf, "shape", ())
    n = 1
    for s in shape:
        c = _const(s)
        n *= c if c is not None else 1024
    return n


def _bytes(buf, elements: float) -> float:
    dt = getattr(buf, "dtype", None)
    bits = getattr(dt, "bits", 32) or 32
    return elements * max(1, bits // 8)


def program_features(funcs) -> np.ndarray:
    """The feature vector (FEATURE_NAMES) of the lowered functions `funcs` (PrimFuncs)."""
    walk = _Walk()
    for f in funcs:
        walk.visit(f.body)
    x = np.zeros(len(FEATURE_NAMES))
    if not walk.stores:
        return x
    heavy = max(walk.stores, key=lambda s: (s.ops, s.iterations))
    total_iter = sum(s.iterations * s.lanes for s in walk.stores)
    vector_iter = sum(s.iterations * s.lanes for s in walk.stores if s.lanes > 1)
    accesses = heavy.loads + 1
    values = {
        "ops": _log(heavy.ops),
        "float_ops": _log(heavy.float_ops),
        "iterations": _log(heavy.iterations),
        "lanes": _log(heavy.lanes),
        "parallel": _log(heavy.parallel),
        "unrolled": _log(heavy.unrolled),
        "serial_depth": float(heavy.serial_depth),
        "innermost_extent": _log(heavy.innermost),
        "loads": float(heavy.loads),
        "contiguous_loads": float(heavy.contiguous),
        "strided_loads": float(heavy.strided),
        "vector_loads": float(heavy.vector_loads),
        "local_accesses": float(heavy.local),
        "bytes_touched": _log(heavy.bytes_touched),
        "max_buffer_bytes": _log(heavy.max_buffer),
        "reuse": _log(heavy.iterations * heavy.lanes * accesses / max(1.0, heavy.elements)),
        "intensity": _log(heavy.ops / max(1.0, heavy.bytes_touched)),
        "stride_of_store": _log(heavy.store_stride),
        "total_ops": _log(sum(s.ops for s in walk.stores)),
        "total_bytes": _log(sum(s.bytes_touched for s in walk.stores)),
        "total_iterations": _log(sum(s.iterations for s in walk.stores)),
        "stores": float(len(walk.stores)),
        "vector_fraction": vector_iter / max(1.0, total_iter),
        "alloc_bytes": _log(walk.alloc_bytes),
        "local_alloc_bytes": _log(walk.local_alloc_bytes),
        "allocs": float(walk.allocs),
        "outer_parallel": _log(walk.outer_parallel),
        "max_depth": float(walk.max_depth),
    }
    for i, name in enumerate(FEATURE_NAMES):
        x[i] = values[name]
    return x
