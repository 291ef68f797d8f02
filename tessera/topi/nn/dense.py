"""Dense layers and matrix products: one reduction over k each.

    y = dense(x, w)                 # x (..., K), w (UNITS, K) -> (..., UNITS): x @ w.T
    y = matmul(a, b)                # numpy.matmul: batch dims broadcast, 1-D operands promoted
    y = batch_matmul(a, b, transpose_a=False, transpose_b=True)   # (B, M, K) x (B, N, K)

The reduction axis is always named "k", so schedules find it as `op.reduce_axis[0]`. 16-bit
float operands accumulate in float32, then a rounding stage (an epilogue to the schedules). A weight
that is read transposed (dense's, batch_matmul's with transpose_b) goes through a transposing
stage (tag "dense_pack"): computed once per call it makes the output columns contiguous (fast
vector loads); inlined it gives the plain strided form (better for a single row).
"""

from __future__ import annotations

from tessera import te

PACK_TAG = "dense_pack"


def _accumulated(out: te.Tensor, dtype) -> te.Tensor:
    """A product accumulated in float32 (for 16-bit float operands), rounded once to `dtype`:
    16-bit sums lose a bit per add (numpy and ONNX Runtime accumulate wider too)."""
    if str(out.dtype) == str(dtype):
        return out
    return te.compute(
        out.shape, lambda *i: te.cast(out(*i), dtype), name=f"{out.op.name}_round",
        tag="elemwise",
    )  # fmt: skip


def _wide(x):
    """x(...) as the accumulation type: float32 for bfloat16, and for float16 unless the current
    target computes in half precision (Note [half sums])."""
    dtype = str(x.dtype)
    if dtype == "bfloat16" or dtype == "float16" and not _half_arithmetic():
        return te.cast(x, "float32")
    return x


# Note [half sums]
# A float16 product accumulates in float32 and is rounded once, as numpy and ONNX Runtime's
# reference kernels do, except on a target whose CPU has half-precision arithmetic (Arm's
# FEAT_FP16, "fullfp16" in its features): there the point of a float16 model is the doubled
# throughput of `fmla` on halves (docs/arm.md), and the sums stay in float16, as Arm's own
# libraries and ONNX Runtime's fp16 kernels on such cores do. The current target is the
# build's (lower_group makes it current); with none, float32 sums.


def _half_arithmetic() -> bool:
    from tessera.target import Target

    target = Target.current()
    return target is not None and target.half_arithmetic


def _dim(d):
    return getattr(d, "value", d)


def dense(x: te.Tensor, w: te.Tensor) -> te.Tensor:
    """x @ w.T over the last axis of x."""
    if w.ndim != 2 or x.ndim < 1 or _dim(x.shape[-1]) != _dim(w.shape[1]):
        raise ValueError(f"dense: data {x.shape} and weight {w.shape} (units, in) disagree")
    wt = pack_transposed(w)
    k = te.reduce_axis((0, w.shape[1]), name="k")
    out = te.compute(
        (*x.shape[:-1], w.shape[0]),
        lambda *i: te.sum(_wide(x(*i[:-1], k)) * _wide(wt(k, i[-1])), axis=k),
        name="dense",
        tag="dense",
    )
    return _accumulated(out, x.dtype)


def pack_transposed(w: te.Tensor) -> te.Tensor:
    """w with its last two axes swapped (tag "dense_pack"), so that the output columns are
    contiguous in the reduction's operand; a schedule computes it once or inlines it."""
    *lead, rows, cols = w.shape
    return te.compute(
        (*lead, cols, rows),
        lambda *i: w(*i[:-2], i[-1], i[-2]),
        name=f"{w.name}_transposed",
        tag=PACK_TAG,
    )


def _broadcast_index(shape, idx):
    """The index into a batch `shape` that broadcasts to the output batch index `idx`."""
    lead = len(idx) - len(shape)
    return [0 if _dim(shape[j]) == 1 else idx[lead + j] for j in range(len(shape))]


def _batch_shape(a_batch, b_batch):
    out = []
    n = max(len(a_batch), len(b_batch))
    for j in range(n):
        dims = [s[len(s) - n + j] for s in (a_batch, b_batch) if len(s) - n + j >= 0]
        non_one = [d for d in dims if _dim(d) != 1]
        if len({_dim(d) for d in non_one}) > 1:
            raise ValueError(f"matmul: batch dims {a_batch} and {b_batch} do not broadcast")
        out.append(non_one[0] if non_one else dims[0])
    return out


def matmul(a: te.Tensor, b: te.Tensor) -> te.Tensor:
    """numpy.matmul (the ONNX MatMul): the contraction is over a's last and b's second-last axis."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must not be scalars, got {a.shape} and {b.shape}")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    k_a = a.shape[-1]
    k_b = b.shape[0] if b_vec else b.shape[-2]
    if _dim(k_a) != _dim(k_b):
        raise ValueError(f"matmul: inner dims of {a.shape} and {b.shape} disagree")
    a_batch = () if a_vec else a.shape[:-2]
    b_batch = () if b_vec else b.shape[:-2]
    batch = _batch_shape(a_batch, b_batch)
    nb = len(batch)
    shape = [*batch, *(() if a_vec else (a.shape[-2],)), *(() if b_vec else (b.shape[-1],))]
    k = te.reduce_axis((0, k_a), name="k")

    def f(*i):
        bi, rest = i[:nb], list(i[nb:])
        row = [] if a_vec else [rest.pop(0)]
        col = [] if b_vec else [rest.pop(0)]
        lhs = a(*_broadcast_index(a_batch, bi), *row, k)
        rhs = b(*_broadcast_index(b_batch, bi), k, *col)
        return te.sum(_wide(lhs) * _wide(rhs), axis=k)

    return _accumulated(te.compute(shape, f, name="matmul", tag="matmul"), a.dtype)


def batch_matmul(a: te.Tensor, b: te.Tensor, transpose_a=False, transpose_b=False) -> te.Tensor:
    """(B, M, K) x (B, K, N) -> (B, M, N), either operand transposed in its last two axes, a batch
    of 1 broadcast."""
    if a.ndim != 3 or b.ndim != 3:
        raise ValueError(f"batch_matmul: expects rank-3 operands, got {a.shape} and {b.shape}")
    m, ka = (a.shape[2], a.shape[1]) if transpose_a else (a.shape[1], a.shape[2])
    kb, n = (b.shape[2], b.shape[1]) if transpose_b else (b.shape[1], b.shape[2])
    if _dim(ka) != _dim(kb):
        raise ValueError(f"batch_matmul: inner dims of {a.shape} and {b.shape} disagree")
    batch = _batch_shape(a.shape[:1], b.shape[:1])
    k = te.reduce_axis((0, ka), name="k")
    bt = pack_transposed(b) if transpose_b else b

    def f(bi, i, j):
        ab, bb = _broadcast_index(a.shape[:1], (bi,)), _broadcast_index(b.shape[:1], (bi,))
        lhs = a(*ab, k, i) if transpose_a else a(*ab, i, k)
        rhs = bt(*bb, k, j)
        return te.sum(_wide(lhs) * _wide(rhs), axis=k)

    out = te.compute((*batch, m, n), f, name="batch_matmul", tag="batch_matmul")
    return _accumulated(out, a.dtype)
