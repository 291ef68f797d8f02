"""The knob cost model learns which configs of a task are fast: fit on some configs with a
known timing law, it ranks the others in the law's order (no machine timing involved)."""

import math
import random

import numpy as np
import pytest

import tessera
from tessera import autotune
from tessera.autotune.cost_model import KnobRidge

HOST = tessera.Target("llvm")


@pytest.fixture
def conv(tiny):
    _, mod, params, _ = tiny
    return next(
        t for t in autotune.extract_tasks(mod, params, HOST) if t.workload.op == "nn.conv2d"
    )


def law(config) -> float:
    """Seconds of a made-up machine: one implementation is slower, larger blocks are faster."""
    knobs = config.knobs()
    t = 2.0 if config.impl == "nchw" else 1.0
    for v in knobs.values():
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            t /= 1 + 0.3 * math.log2(v)
    return t * 1e-5


def test_ranks_unseen_configs_by_the_law(conv):
    configs = list(conv.configs(HOST))
    random.Random(0).shuffle(configs)
    train, test = configs[: len(configs) // 2], configs[len(configs) // 2 :]
    model = KnobRidge(conv, HOST, alpha=0.1)
    model.fit(train, [law(c) for c in train])
    ranked = model.rank(test)
    order = [sorted(test, key=law).index(c) for c in ranked]
    rho = np.corrcoef(order, np.arange(len(order)))[0, 1]
    assert rho > 0.8, rho
    # before any fit it knows nothing: every config scores the same
    assert len({KnobRidge(conv, HOST).score(c) for c in test}) == 1


def test_features_name_the_implementation_and_its_knobs(conv):
    model = KnobRidge(conv, HOST)
    default = conv.default(HOST)
    x = model.features(default)
    assert x[model.columns[("impl", default.impl)]] == 1.0 and x[-1] == 1.0
    others = [impl for impl in conv.implementations(HOST) if impl != default.impl]
    assert all(x[model.columns[("impl", o)]] == 0.0 for o in others)
