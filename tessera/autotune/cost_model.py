"""A small learned cost model: ridge regression on a config's knob features, per task.

    model = KnobRidge(task, target)
    model.fit(configs, seconds)             # the measured ones (online: refit as results come)
    best_first = model.rank(candidates)     # the candidates, most promising first

Features are AutoTVM's "knob" features: the implementation one-hot, and for each knob of it its
value (log2 of a positive number, 0/1 of a bool, one-hot of any other candidate). Within one
task the knobs fix the loop nest, so a linear model of log(time) on them already separates good
tile sizes from bad ones after a few measurements. It ranks candidates the search proposes, so
that fewer poor configs get built and timed. Not yet: features of the lowered loop IR, and
transfer across tasks (issue 11).
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


class _Tree:
    """A regression tree of depth <= `depth`: split on the (feature, threshold) that most lowers
    the squared error, thresholds at up to `bins` quantiles of the feature."""

    def __init__(self, depth: int, min_leaf: int, bins: int):
        self.depth, self.min_leaf, self.bins = depth, min_leaf, bins
        self.nodes: list = []  # (feature, threshold, left, right) or (None, value, -1, -1)

    def fit(self, X: np.ndarray, g: np.ndarray) -> _Tree:
        self.nodes = []
        self._grow(X, g, np.arange(len(g)), 0)
        return self

    def _grow(self, X, g, rows, depth) -> int:
        at = len(self.nodes)
        self.nodes.append((None, float(g[rows].mean()), -1, -1))
        if depth >= self.depth or len(rows) < 2 * self.min_leaf:
            return at
        best = _best_split(X[rows], g[rows], self.min_leaf, self.bins)
        if best is None:
            return at
        feature, threshold = best
        left = rows[X[rows, feature] <= threshold]
        right = rows[X[rows, feature] > threshold]
        lo = self._grow(X, g, left, depth + 1)
        hi = self._grow(X, g, right, depth + 1)
        self.nodes[at] = (feature, threshold, lo, hi)
        return at

    def predict(self, X: np.ndarray) -> np.ndarray:
        out = np.empty(len(X))
        for r, x in enumerate(X):
            n = 0
            while self.nodes[n][0] is not None:
                feature, threshold, lo, hi = self.nodes[n]
                n = lo if x[feature] <= threshold else hi
            out[r] = self.nodes[n][1]
        return out


def _best_split(X: np.ndarray, g: np.ndarray, min_leaf: int, bins: int):
    """(feature, threshold) with the largest drop of the squared error, or None."""
    n = len(g)
    total, best, best_gain = g.sum(), None, 1e-12
    for f in range(X.shape[1]):
        col = X[:, f]
        order = np.argsort(col, kind="stable")
        xs, cum = col[order], np.cumsum(g[order])
        # candidate cuts: after position i (left = first i+1 rows), where the value changes
        cuts = np.nonzero(xs[1:] > xs[:-1])[0]
        cuts = cuts[(cuts + 1 >= min_leaf) & (n - cuts - 1 >= min_leaf)]
        if not len(cuts):
            continue
        if len(cuts) > bins:
            cuts = cuts[np.linspace(0, len(cuts) - 1, bins).astype(int)]
        nl = cuts + 1.0
        sl = cum[cuts]
        gain = sl**2 / nl + (total - sl) ** 2 / (n - nl) - total**2 / n
        i = int(np.argmax(gain))
        if gain[i] > best_gain:
            best_gain, best = gain[i], (f, float((xs[cuts[i]] + xs[cuts[i] + 1]) / 2))
    return best


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
        for _ in range(self.trees):
            residual = y - pred
            if np.abs(residual).max(initial=0) < 1e-9:
                break
            tree = _Tree(self.depth, self.min_leaf, self.bins).fit(X, residual)
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
