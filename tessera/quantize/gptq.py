"""Second-order weight rounding (GPTQ, Frantar et al. 2022) for tessera.quantize.

    acc = HessianAccumulator(layer)          # one per layer
    acc.add(x)                               # each calibration feed's float input of the layer
    q = gptq_round(w, scale, acc.hessian(), groups)   # int8 rows, the scales kept

Note [GPTQ rounding]
A layer's output error from its weights is (w - w_q) x; over the calibration inputs its
expected square is, per output row, (w - w_q)^T H (w - w_q) with H = E[x x^T] over the inputs
that row multiplies (for a conv: the im2col patches of its group, kh*kw per input channel).
Rounding to nearest ignores that the inputs are correlated; GPTQ rounds one column at a time
and spreads the rounding error of column j onto the columns not yet rounded, by the row of the
inverse Hessian that cancels it best (the optimal brain surgeon update). The rows share H, so
the update runs on all rows of a group at once; a depthwise conv has one H (kh*kw square) per
channel and runs them as a stack. H gets `damp` times its mean diagonal on the diagonal (as
GPTQ's 1%): it keeps the Cholesky factor defined on rank-deficient H (few patches, channels
that stay zero on the feeds), and an input channel that is exactly zero on the feeds stays
decoupled (its H row is zero), so no error is pushed into a weight that the feeds never test.
The scales are chosen first (Note [weight scales]) and kept; GPTQ only changes the rounding.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

BLOCK = 128  # columns rounded before their errors reach the rest (speed only, same result)


def conv_patches(x: np.ndarray, attrs: dict, kernel: tuple[int, int], groups: int) -> np.ndarray:
    """The im2col patches of NCHW x for a conv: (P, groups, C/groups * kh * kw), each patch in
    the order of the weight's row (input channel, kh, kw)."""
    n, c = x.shape[:2]
    pt, pl, pb, pr = attrs["padding"]
    sh, sw = attrs["strides"]
    dh, dw = attrs.get("dilation", (1, 1)) or (1, 1)
    kh, kw = kernel
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    win = sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]  # (N, C, OH, OW, kh, kw)
    oh, ow = win.shape[2:4]
    win = win.transpose(0, 2, 3, 1, 4, 5)  # (N, OH, OW, C, kh, kw)
    return win.reshape(n * oh * ow, groups, (c // groups) * kh * kw)


class HessianAccumulator:
    """E[x x^T] of the inputs each weight row multiplies, over the arrays added: (groups, K, K)."""

    def __init__(self, kind: str, attrs: dict, weight_shape: tuple[int, ...]):
        self.kind, self.attrs, self.shape = kind, attrs, weight_shape
        self.groups = attrs.get("groups", 1) if kind == "conv2d" else 1
        self.sum: np.ndarray | None = None
        self.count = 0

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float64)
        if self.kind == "conv2d":
            p = conv_patches(x, self.attrs, self.shape[2:4], self.groups)
        else:
            p = x.reshape(-1, 1, x.shape[-1])
        h = np.einsum("pgk,pgl->gkl", p, p)
        self.sum = h if self.sum is None else self.sum + h
        self.count += p.shape[0]

    def hessian(self) -> np.ndarray:
        if self.sum is None:
            raise ValueError("HessianAccumulator: no inputs added")
        return self.sum / max(self.count, 1)


def _inverse_factor(h: np.ndarray, damp: float) -> np.ndarray:
    """Upper Cholesky factor of (h + damp * mean diag * I)^-1, a stack (G, K, K)."""
    k = h.shape[-1]
    diag = np.einsum("gkk->gk", h)
    lam = damp * diag.mean(axis=1) + 1e-12
    hd = h + lam[:, None, None] * np.eye(k)
    inv = np.linalg.inv(np.linalg.cholesky(hd))  # L^-1, lower
    hinv = np.swapaxes(inv, 1, 2) @ inv  # (L L^T)^-1
    hinv = (hinv + np.swapaxes(hinv, 1, 2)) / 2
    return np.swapaxes(np.linalg.cholesky(hinv), 1, 2)


# Note [GPTQ column order]
# GPTQ rounds the columns in their order, and the last columns have no later ones left to
# take their error. order="act" (GPTQ's act-order, "desc_act") rounds first the columns whose
# inputs carry the most energy (the largest diagonal of H), so that the columns that cost the
# output most are rounded while many others can still compensate; each group of a conv gets
# its own order (stable sort: ties keep their natural order). The result is the same rounding
# problem with the columns permuted, put back in place: the scales are unchanged.


def gptq_round(w: np.ndarray, scale: np.ndarray, h: np.ndarray, groups: int = 1,
               damp: float = 0.01, qmax: int = 127,
               order: str = "natural") -> np.ndarray:  # fmt: skip
    """int8 w (w's shape, output rows first) rounded column by column with the error carried
    onto later columns (Note [GPTQ rounding]); scale: one per row; h: (groups, K, K) with K the
    size of a row; order: "natural" or "act" (Note [GPTQ column order])."""
    o = w.shape[0]
    rows = w.reshape(groups, o // groups, -1).astype(np.float64).copy()  # (G, R, K)
    s = np.asarray(scale, np.float64).reshape(groups, o // groups)
    h = np.asarray(h, np.float64)
    if order == "act":
        perm = np.argsort(-np.einsum("gkk->gk", h), axis=1, kind="stable")  # (G, K)
        rows = np.take_along_axis(rows, perm[:, None, :], axis=2)
        h = np.take_along_axis(np.take_along_axis(h, perm[:, :, None], axis=1),
                               perm[:, None, :], axis=2)  # fmt: skip
        q = _gptq_rows(rows, s, h, damp, qmax)
        out = np.empty_like(q)
        np.put_along_axis(out, np.broadcast_to(perm[:, None, :], q.shape), q, axis=2)
        return out.reshape(w.shape).astype(np.int8)
    if order != "natural":
        raise ValueError(f"GPTQ column order must be natural or act, got {order!r}")
    return _gptq_rows(rows, s, h, damp, qmax).reshape(w.shape).astype(np.int8)


def _gptq_rows(rows: np.ndarray, s: np.ndarray, h: np.ndarray, damp: float,
               qmax: int) -> np.ndarray:  # fmt: skip
    """The int64 rounding of rows (G, R, K), scales s (G, R), in column order."""
    u = _inverse_factor(h, damp)  # (G, K, K)
    q = np.empty(rows.shape, np.int64)
    k = rows.shape[2]
    for i1 in range(0, k, BLOCK):  # GPTQ's lazy batches: a block's errors reach later ones at once
        i2 = min(i1 + BLOCK, k)
        block = rows[:, :, i1:i2].copy()
        errs = np.empty_like(block)
        for j in range(i2 - i1):
            col = block[:, :, j]
            qj = np.clip(np.round(col / s), -qmax, qmax)
            q[:, :, i1 + j] = qj
            errs[:, :, j] = (col - qj * s) / u[:, i1 + j, i1 + j][:, None]  # (G, R)
            block[:, :, j + 1 :] -= errs[:, :, j, None] * u[:, None, i1 + j, i1 + j + 1 : i2]
        rows[:, :, i2:] -= errs @ u[:, i1:i2, i2:]
    return q


def output_error(w: np.ndarray, wq: np.ndarray, h: np.ndarray, groups: int = 1) -> float:
    """sum over rows of (w - wq)^T H (w - wq): the expected squared output error."""
    o = w.shape[0]
    d = (np.asarray(w, np.float64) - wq).reshape(groups, o // groups, -1)
    return float(np.einsum("grk,gkl,grl->", d, np.asarray(h, np.float64), d))


def layer_output(kind: str, attrs: dict, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A conv's or dense's float output from data x and a weight w (output rows first) by
    im2col and matrix products, channel last: (positions, O). For scoring candidates fast."""
    o = w.shape[0]
    if kind != "conv2d":
        return np.asarray(x, np.float32).reshape(-1, x.shape[-1]) @ w.T.astype(np.float32)
    groups = attrs.get("groups", 1)
    p = conv_patches(np.asarray(x, np.float32), attrs, w.shape[2:4], groups)
    wg = w.reshape(groups, o // groups, -1).astype(np.float32)
    if groups == 1:
        return p[:, 0] @ wg[0].T
    return np.einsum("pgk,grk->pgr", p, wg).reshape(p.shape[0], o)
