"""Calibration: run the float model on the calibration feeds, observe the tensors that will be
quantized, and choose each one's range (min-max, percentile, KL/entropy, MSE-optimal, or the
min-max range times a fraction: "clip0.8").

    m = compile_probe(func, values, target)                 # values as the outputs
    stats = observe(m, len(values), feeds, histograms=True)  # one Observer per value
    lo, hi = choose_range(stats[k], "entropy")              # the float range to quantize
    scale, zero_point = activation_params(lo, hi, "uint8")

The float function is compiled once with the observed values as extra outputs. Min and max are
taken on a first pass over the feeds; the percentile, entropy and mse methods need a histogram
of |x| over [0, max |x|], filled on a second pass (feeds are kept in a list for it).
"""

from __future__ import annotations

import numpy as np

from tessera.graph.ir import Function

BINS = 2048


class Observer:
    """Running min, max and (second pass) a histogram of |x| with BINS bins over [0, absmax]."""

    def __init__(self):
        self.min, self.max = np.inf, -np.inf
        self.hist: np.ndarray | None = None

    @property
    def absmax(self) -> float:
        return float(max(abs(self.min), abs(self.max), 1e-12))

    def update_range(self, x: np.ndarray) -> None:
        self.min = min(self.min, float(x.min()))
        self.max = max(self.max, float(x.max()))

    def update_hist(self, x: np.ndarray) -> None:
        # exact zeros (most of a ReLU's output) are exact at any scale: counted, they make a
        # spike that drags the entropy threshold down to the first candidate
        x = np.abs(x[x != 0])
        h, _ = np.histogram(x, bins=BINS, range=(0.0, self.absmax))
        self.hist = h if self.hist is None else self.hist + h


def compile_probe(func: Function, values, target):
    """`func` compiled with `values` as its outputs (a GraphModule)."""
    import tessera
    from tessera.runtime import GraphModule, cpu
    from tessera.transform import PassContext

    probe = Function(func.name, func.params, func.body, tuple(values), func.constants)
    with PassContext(opt_level=3):
        lib = tessera.build(probe, target=target)
    return GraphModule(lib["default"](cpu(0)))


def run_values(m, feeds):
    """For each feed, the outputs of compiled probe `m` (a generator: one list per feed)."""
    for feed in feeds:
        for name, array in feed.items():
            m.set_input(name, np.ascontiguousarray(array))
        m.run()
        yield [m.get_output(k).numpy() for k in range(m.get_num_outputs())]


def observe(m, count: int, feeds: list, histograms: bool) -> list[Observer]:
    """An Observer of each of the first `count` outputs of compiled probe `m` over the feeds."""
    stats = [Observer() for _ in range(count)]
    for arrays in run_values(m, feeds):
        for obs, a in zip(stats, arrays[:count], strict=True):
            obs.update_range(a)
    if histograms:
        for arrays in run_values(m, feeds):
            for obs, a in zip(stats, arrays[:count], strict=True):
                obs.update_hist(a)
    return stats


def channel_absmax(m, feeds) -> list[np.ndarray]:
    """Each output of compiled probe `m` (N, C, ...): its largest |x| per channel (axis 1)
    over the feeds."""
    out = None
    for arrays in run_values(m, feeds):
        r = [np.abs(np.moveaxis(a, 1, 0).reshape(a.shape[1], -1)).max(axis=1) for a in arrays]
        out = r if out is None else [np.maximum(a, b) for a, b in zip(out, r, strict=True)]
    return out or []


def _kl_threshold(hist: np.ndarray, levels: int) -> int:
    """The number of histogram bins to keep that minimizes KL(P || Q), Q being P quantized to
    `levels` levels (TensorRT's entropy calibration). Candidates every 8 bins keep it fast."""
    hist = hist.astype(np.float64)
    best, best_i = np.inf, len(hist)
    for i in range(levels, len(hist) + 1, 8):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        starts = (np.arange(levels) * i) // levels
        sums = np.add.reduceat(hist[:i], starts)
        nonzero = (hist[:i] > 0).astype(np.float64)
        counts = np.add.reduceat(nonzero, starts)
        per_bin = np.where(counts > 0, sums / np.maximum(counts, 1), 0.0)
        q = np.repeat(per_bin, np.diff(np.append(starts, i))) * nonzero
        if p.sum() == 0 or q.sum() == 0:
            continue
        p, q = p / p.sum(), q / q.sum()
        mask = p > 0
        kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
        if kl < best:
            best, best_i = kl, i
    return best_i


def _mse_threshold(hist: np.ndarray, width: float, levels: float) -> float:
    """The clipping threshold t of |x| that minimizes the expected squared error of quantizing
    to `levels` steps over [0, t]: rounding, (t / levels)^2 / 12 per value inside, plus the
    clipping, (|x| - t)^2 per value outside (values at their bin's centre). Every bin edge is
    a candidate; the sums over the clipped tail are suffix sums, so this is one vector pass."""
    h = hist.astype(np.float64)
    c = (np.arange(len(h)) + 0.5) * width
    t = np.arange(1, len(h) + 1) * width  # candidate i keeps bins 0..i-1
    inside = np.cumsum(h)
    s0 = inside[-1] - inside  # tail count, sum of c, sum of c^2 past each candidate
    s1 = np.sum(h * c) - np.cumsum(h * c)
    s2 = np.sum(h * c * c) - np.cumsum(h * c * c)
    err = inside * (t / levels) ** 2 / 12 + (s2 - 2 * t * s1 + t * t * s0)
    return float(t[int(np.argmin(err))])


def choose_range(obs: Observer, method: str, percentile: float = 99.99,
                 dtype: str = "uint8") -> tuple[float, float]:  # fmt: skip
    """The float range [lo, hi] (lo <= 0 <= hi) to quantize to `dtype`, by `method`."""
    lo, hi = min(obs.min, 0.0), max(obs.max, 0.0)
    if method.startswith("clip"):  # "clip0.8": the min-max range times 0.8 (a clipping grid)
        fraction = clip_fraction(method)
        return lo * fraction, hi * fraction
    if method == "minmax" or obs.hist is None or not obs.hist.any():
        return lo, hi
    width = obs.absmax / BINS
    if method == "percentile":
        cdf = np.cumsum(obs.hist) / obs.hist.sum()
        t = (np.searchsorted(cdf, percentile / 100.0) + 1) * width
    elif method in ("entropy", "mse"):
        # the levels that |x| gets: all 256 of uint8 for non-negative data, else half
        levels = 255 if lo == 0.0 and dtype == "uint8" else 127
        if method == "entropy":
            t = _kl_threshold(obs.hist, levels) * width
        else:
            t = _mse_threshold(obs.hist, width, levels)
    else:
        raise ValueError(f"unknown calibration method {method!r} "
                         "(minmax, percentile, entropy, mse, clipR)")  # fmt: skip
    return max(lo, -t), min(hi, t)


def clip_fraction(method: str) -> float:
    """R of a method "clipR" (0 < R <= 1): the min-max range times R."""
    try:
        fraction = float(method[len("clip") :])
    except ValueError:
        fraction = 0.0
    if not 0 < fraction <= 1:
        raise ValueError(f"calibration method {method!r}: clipR needs 0 < R <= 1 (clip0.8)")
    return fraction


def activation_params(lo: float, hi: float, dtype: str) -> tuple[float, int]:
    """(scale, zero point) of [lo, hi]: uint8 or uint16 asymmetric, int8 symmetric (zero point
    0)."""
    if dtype == "int8":
        scale = max(abs(lo), abs(hi)) / 127.0
        return float(np.float32(scale if scale > 0 else 1.0)), 0
    top = float(np.iinfo(dtype).max)
    scale = (hi - lo) / top
    if scale <= 0:
        return 1.0, 0
    zero_point = int(np.clip(np.round(-lo / scale), 0, top))
    return float(np.float32(scale)), zero_point
