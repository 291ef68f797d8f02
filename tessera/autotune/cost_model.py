"""A small learned cost model: ridge regression on a config's knob features, per task.

    model = KnobRidge(task, target)
    model.fit(configs, seconds)             # the measured ones (online: refit as results come)
    best_first = model.rank(candidates)     # the candidates, most promising first

Features are AutoTVM's "knob" features: the implementation one-hot, and for each knob of it its
value (log2 of a positive number, 0/1 of a bool, one-hot of any other candidate). Within one
task the knobs fix the loop nest, so a linear model of log(time) on them already separates good
tile sizes from bad ones after a few measurements. It ranks candidates the search proposes, so
that fewer poor configs get built and timed. `GBTRanker` (below) ranks by features of the
lowered loop program instead, trained across tasks (the tuner's transfer), where a build pool
lowers the candidates.
"""

from __future__ import annotations

import math

import numpy as np

from tessera.topi.strategy import Config, Task


class KnobRidge:
    def __init__(self, task: Task, target, alpha: float = 1.0):
        self.alpha = alpha
        self.columns: dict[tuple, int] = {}
        for impl, space in sorted(task.implementations(target).items()):
            self.columns[("impl", impl)] = len(self.columns)
            for knob in space.knobs:
                if all(_numeric(v) for v in knob.candidates):
                    self.columns[(impl, knob.name)] = len(self.columns)
                else:
                    for v in knob.candidates:
                        self.columns[(impl, knob.name, repr(v))] = len(self.columns)
        self.weights: np.ndarray | None = None

    def features(self, config: Config) -> np.ndarray:
        x = np.zeros(len(self.columns) + 1)
        x[-1] = 1.0  # bias
        x[self.columns[("impl", config.impl)]] = 1.0
        for name, v in config.knobs().items():
            col = self.columns.get((config.impl, name))
            if col is not None:
                x[col] = float(v) if isinstance(v, bool) else math.log2(1 + abs(v))
            else:
                col = self.columns.get((config.impl, name, repr(v)))
                if col is not None:
                    x[col] = 1.0
        return x

    def fit(self, configs: list[Config], seconds: list[float]) -> None:
        """Least squares of -log(seconds) on the features, with an L2 penalty `alpha`."""
        X = np.stack([self.features(c) for c in configs])
        y = -np.log(np.maximum(np.asarray(seconds, dtype=np.float64), 1e-12))
        y = y - y.mean()
        A = X.T @ X + self.alpha * np.eye(X.shape[1])
        self.weights = np.linalg.solve(A, X.T @ y)

    def score(self, config: Config) -> float:
        """Higher is predicted faster (0 for every config before `fit`)."""
        return 0.0 if self.weights is None else float(self.features(config) @ self.weights)

    def rank(self, configs: list[Config]) -> list[Config]:
        return sorted(configs, key=self.score, reverse=True)


def _numeric(v) -> bool:
    return isinstance(v, (bool, int, float))


# -- gradient-boosted trees on loop-program features --------------------------------------------


# Note [histogram trees]
# The search refits the trees before every ranking, on the task's measurements and every
# transferred one (hundreds of rows after a few tasks), so the fit is on the search's path: a
# split search that sorted each feature at every node (in Python, per feature) took 2-3 s per
# fit on a loaded 2-core machine, as long as building and measuring the batch it ranked. As in
# LightGBM, each feature is cut once per fit at up to `bins` thresholds (midpoints between its
# distinct values, at quantiles when there are more), every row mapped to its bin, and a node's
# best split is read from per-bin sums of its rows (one bincount over all features at once):
# a fit is tens of milliseconds. The trees keep the thresholds as values, so prediction reads
# the raw features.


class _Bins:
    """Each feature's thresholds (at most `bins`) and every row's bin: row r is left of
    threshold k of feature f iff bin[r, f] <= k."""

    def __init__(self, X: np.ndarray, bins: int):
        self.thresholds: list[np.ndarray] = []
        for f in range(X.shape[1]):
            values = np.unique(X[:, f])
            cuts = (values[1:] + values[:-1]) / 2
            if len(cuts) > bins:
                cuts = cuts[np.linspace(0, len(cuts) - 1, bins).astype(int)]
            self.thresholds.append(cuts)
        self.width = max(1, max((len(t) for t in self.thresholds), default=0) + 1)
        columns = [np.searchsorted(t, X[:, f], side="left") for f, t in enumerate(self.thresholds)]
        self.bin = np.stack(columns, axis=1) if columns else np.zeros((len(X), 0), np.int64)
        self.count = np.array([len(t) for t in self.thresholds], dtype=np.int64)


class _Tree:
    """A regression tree of depth <= `depth`: split on the (feature, threshold) that most lowers
    the squared error, among each feature's binned thresholds (Note [histogram trees])."""

    def __init__(self, depth: int, min_leaf: int):
        self.depth, self.min_leaf = depth, min_leaf
        # parallel arrays once fitted: feature (-1 at a leaf), threshold, children, value
        self.nodes: list = []

    def fit(self, bins: _Bins, g: np.ndarray) -> _Tree:
        self.nodes = []
        self._grow(bins, g, np.arange(len(g)), 0)
        self._arrays()
        return self

    def _grow(self, bins: _Bins, g, rows, depth) -> int:
        at = len(self.nodes)
        self.nodes.append((-1, 0.0, -1, -1, float(g[rows].mean())))
        if depth >= self.depth or len(rows) < 2 * self.min_leaf:
            return at
        best = _best_split(bins, g, rows, self.min_leaf)
        if best is None:
            return at
        feature, k = best
        left = rows[bins.bin[rows, feature] <= k]
        right = rows[bins.bin[rows, feature] > k]
        lo = self._grow(bins, g, left, depth + 1)
        hi = self._grow(bins, g, right, depth + 1)
        threshold = float(bins.thresholds[feature][k])
        self.nodes[at] = (feature, threshold, lo, hi, self.nodes[at][4])
        return at

    def _arrays(self) -> None:
        cols = list(zip(*self.nodes, strict=True))
        self._feature = np.array(cols[0], dtype=np.int64)
        self._threshold = np.array(cols[1], dtype=np.float64)
        self._lo = np.array(cols[2], dtype=np.int64)
        self._hi = np.array(cols[3], dtype=np.int64)
        self._value = np.array(cols[4], dtype=np.float64)

    def predict(self, X: np.ndarray) -> np.ndarray:
        node = np.zeros(len(X), dtype=np.int64)
        rows = np.arange(len(X))
        for _ in range(self.depth):
            feature = self._feature[node]
            inner = feature >= 0
            if not inner.any():
                break
            f = np.where(inner, feature, 0)
            left = X[rows, f] <= self._threshold[node]
            node = np.where(inner, np.where(left, self._lo[node], self._hi[node]), node)
        return self._value[node]


def _best_split(bins: _Bins, g: np.ndarray, rows: np.ndarray, min_leaf: int):
    """(feature, threshold index) of `rows` with the largest drop of the squared error, or
    None: per-bin sums of every feature at once, then each threshold's left and right sums."""
    n_features = bins.bin.shape[1]
    if not n_features:
        return None
    width = bins.width
    n = len(rows)
    index = (bins.bin[rows] + np.arange(n_features) * width).ravel()
    gs = np.repeat(g[rows], n_features)
    size = n_features * width
    sums = np.bincount(index, weights=gs, minlength=size).reshape(n_features, width)
    counts = np.bincount(index, minlength=size).reshape(n_features, width)
    sl = np.cumsum(sums, axis=1)[:, :-1]  # left of threshold k: bins 0..k
    nl = np.cumsum(counts, axis=1)[:, :-1].astype(np.float64)
    total = float(g[rows].sum())
    nr = n - nl
    valid = (nl >= min_leaf) & (nr >= min_leaf)
    valid &= np.arange(width - 1)[None, :] < bins.count[:, None]
    if not valid.any():
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = sl**2 / nl + (total - sl) ** 2 / nr - total**2 / n
    gain = np.where(valid, gain, -np.inf)
    f, k = np.unravel_index(int(np.argmax(gain)), gain.shape)
    if not gain[f, k] > 1e-12:
        return None
    return int(f), int(k)


class GBTRanker:
    """Gradient-boosted regression trees (squared loss) on program features, in numpy.

        model = GBTRanker()
        model.fit(X, y)           # y: normalized throughput, best_seconds / seconds in (0, 1]
        order = np.argsort(-model.predict(X_candidates))

    Targets are throughputs normalized per task (1 for a task's fastest config), as in Ansor, so
    that measurements of different tasks (and shapes) train one model: that is the transfer
    across tasks. `fit` is cheap (tens of milliseconds for hundreds of rows): the search refits
    it as measurements arrive (online)."""

    def __init__(
        self, trees: int = 40, depth: int = 4, rate: float = 0.3, min_leaf: int = 2, bins: int = 16
    ):
        self.trees, self.depth, self.rate = trees, depth, rate
        self.min_leaf, self.bins = min_leaf, bins
        self.base = 0.0
        self.forest: list[_Tree] = []

    @property
    def fitted(self) -> bool:
        return bool(self.forest)

    def fit(self, X, y) -> GBTRanker:
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        self.base = float(y.mean())
        self.forest = []
        pred = np.full(len(y), self.base)
        bins = _Bins(X, self.bins)
        for _ in range(self.trees):
            residual = y - pred
            if np.abs(residual).max(initial=0) < 1e-9:
                break
            tree = _Tree(self.depth, self.min_leaf).fit(bins, residual)
            if len(tree.nodes) == 1:  # no split helps any more
                break
            self.forest.append(tree)
            pred += self.rate * tree.predict(X)
        return self

    def predict(self, X) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        out = np.full(len(X), self.base)
        for tree in self.forest:
            out += self.rate * tree.predict(X)
        return out


def normalized_throughput(seconds) -> np.ndarray:
    """best / seconds for one task's measurements (1 for the fastest; 0 for a failed one)."""
    s = np.array([np.inf if t is None else t for t in seconds], dtype=np.float64)
    best = s[np.isfinite(s)].min(initial=np.inf)
    return np.where(np.isfinite(s), best / s, 0.0) if np.isfinite(best) else np.zeros(len(s))
