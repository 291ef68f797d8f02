"""x86 schedule of the plain reductions (topi/x86/reduce.py, Note [reduction vectors]) vs numpy:
vector partials over a reduced innermost axis, vectors over a kept innermost axis; every axis
subset, keepdims, tails of the vector and of the accumulators, narrower vectors; the loops."""

import itertools

import numpy as np
import pytest

import tessera
import tessera.topi.x86.ops  # noqa: F401  (registers the x86 schedules of the core ops)
from tessera.graph.op import get_op
from tessera.target import Target
from tessera.tir.expr import Ramp
from tessera.tir.stmt import BufferStore
from tessera.tir.stmt_functor import collect
from tessera.topi.testing import check_ops, compute_op, op_schedule

RNG = np.random.default_rng(11)


def data(*shape, dtype="float32"):
    return RNG.uniform(-2, 2, size=shape).astype(dtype)


# innermost extents: under a vector, one vector, whole vectors (3 and 9: accumulators that
# divide them), a tail of the vector (219 = 27 * 8 + 3, 37), a tail of the accumulators (41)
SHAPES = [(3, 5, 7), (4, 3, 24), (2, 5, 219), (7, 37), (5, 41), (300,)]


def _subset_cases(name, shapes):
    cases = []
    for shape in shapes:
        x = data(*shape)
        subsets = [
            a
            for n in range(1, len(shape) + 1)
            for a in itertools.combinations(range(len(shape)), n)
        ]
        for axes, keep in itertools.product(subsets, (False, True)):
            cases.append((name, [x], {"axis": axes, "keepdims": keep}))
    return cases


def test_every_axis_subset_of_tails_matches_numpy():
    cases = _subset_cases("sum", [(2, 5, 219), (300,)]) + _subset_cases("max", [(5, 41)])
    check_ops(cases, schedule_target="x86", rtol=2e-5, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_every_axis_subset_matches_numpy(name):
    check_ops(_subset_cases(name, SHAPES), schedule_target="x86", rtol=2e-5, atol=2e-5)


def test_prod_and_other_dtypes():
    cases = [("prod", [RNG.uniform(0.9, 1.1, (4, 45)).astype("float32")], {"axis": (1,)})]
    cases.append(("sum", [data(3, 50, dtype="float64")], {"axis": (1,)}))
    cases.append(("sum", [RNG.integers(-9, 9, (6, 40, 3)).astype("int32")], {"axis": (1,)}))
    cases.append(("max", [RNG.integers(-9, 9, (6, 70)).astype("int32")], {"axis": (1,)}))
    cases.append(("mean", [data(4, 33, dtype="float16")], {"axis": (1,)}))
    flags = RNG.random((5, 70)) < 0.3  # bool: any / all / a count
    cases += [(n, [flags], {"axis": (1,)}) for n in ("max", "min", "sum")]
    cases.append(("max", [RNG.random((4, 33, 9)) < 0.5], {"axis": (1,)}))
    check_ops(cases, schedule_target="x86", rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("mcpu", ["haswell", "x86-64", "skylake-avx512"])
def test_vector_widths_of_the_target(mcpu):
    target = Target(f"llvm -mcpu={mcpu}")
    if not target.is_host and "avx2" not in Target("llvm").features and mcpu == "haswell":
        pytest.skip("the host cannot run AVX2 code")
    if "avx512f" in target.features and "avx512f" not in Target("llvm").features:
        pytest.skip("the host cannot run AVX-512 code")
    cases = [("sum", [data(3, 101)], {"axis": (1,)}), ("mean", [data(5, 67, 19)], {"axis": (1,)})]
    cases.append(("max", [data(2, 9, 130)], {"axis": (0, 2)}))
    check_ops(cases, target=target, schedule_target="x86")


def _vector_stores(name, shape, axes):
    """The vector stores (a Ramp index) into the reduction's buffers (`<name>_red...`: the
    partials or the output row) of the lowered kernel under the x86 schedule."""
    args, outs = compute_op(name, [np.zeros(shape, "float32")], {"axis": axes})
    s = op_schedule(get_op(name), outs, Target("llvm -mcpu=haswell"), "x86")
    mod = tessera.lower(s, [*args, *outs], simple_mode=False)
    body = next(iter(mod.functions.values())).body
    return [
        st
        for st in collect(body, lambda n: isinstance(n, BufferStore))
        if isinstance(st.indices[-1], Ramp) and st.buffer.name.startswith(f"{name}_red")
    ]


def test_reduced_innermost_axis_accumulates_in_vectors():
    # a ReduceMean of the whole tensor and over the last axis: vector partial sums
    assert _vector_stores("mean", (16, 9, 72), None)
    assert _vector_stores("sum", (6, 219), (1,))


def test_kept_innermost_axis_runs_in_vectors():
    # summed over a middle axis: the kept innermost axis in vectors, the reduce loop outside
    assert _vector_stores("sum", (20, 30, 16), (1,))


def test_peeled_rfactor_is_recorded_and_replays():
    # the partials' split guard is `likely` (rfactor's peel_tail), recorded in the steps
    args, outs = compute_op("sum", [np.zeros((4, 45), "float32")], {"axis": (1,)})
    s = op_schedule(get_op("sum"), outs, Target("llvm -mcpu=haswell"), "x86")
    assert "peel_tail=True" in str(s)
    assert _vector_stores("sum", (4, 45), (1,))
