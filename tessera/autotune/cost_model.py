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
