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


def test_gbt_on_program_features_ranks_unseen_programs():
    """Trained on a made-up law of the features, the trees rank unseen points in its order."""
    from tessera.autotune.cost_model import GBTRanker, normalized_throughput

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 8, (160, 6))
    seconds = np.exp(0.3 * X[:, 0] - 0.2 * X[:, 1] + 0.5 * np.abs(X[:, 2] - 4))
    y = normalized_throughput(seconds)
    model = GBTRanker().fit(X[:100], y[:100])
    pred = model.predict(X[100:])
    # Spearman rank correlation on the held-out points
    ranks = lambda v: np.argsort(np.argsort(v))  # noqa: E731
    rho = np.corrcoef(ranks(pred), ranks(y[100:]))[0, 1]
    assert rho > 0.8
    assert normalized_throughput([2.0, None, 1.0]).tolist() == [0.5, 0.0, 1.0]


def test_tuning_records_features_and_transfers_them_to_tasks_of_the_same_op(tiny, tmp_path):
    """With a build pool, every candidate's record holds the features of its lowered loops;
    another task of the same op starts with a cost model trained on them."""
    from tessera.autotune.records import Database
    from tessera.autotune.tuner import transfer_data

    _, mod, params, _ = tiny
    db = tmp_path / "tune.db"
    results = autotune.tune(mod, params, HOST, db=db, budget=60, max_trials=2, workers=2)
    records = Database(db).records
    candidates = [r for r in records if r.config != r.task.default(HOST) and not r.again]
    assert candidates and all(r.features is not None for r in candidates if r.ok)
    conv = next(r.task for r in results if r.task.workload.op == "nn.conv2d")
    other = autotune.Task(
        autotune.Workload(
            "nn.conv2d",
            conv.workload.inputs,
            conv.workload.attrs + (("x", 1),),
            conv.workload.constant,
            conv.workload.output,
        ),
        conv.key,
    )
    data = transfer_data(Database(db), other, HOST)
    assert data and all(0.0 < y <= 1.0 for _, y in data)
    assert transfer_data(Database(db), conv, HOST) == []  # its own records are not transfer
