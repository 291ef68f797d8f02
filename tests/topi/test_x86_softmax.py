"""x86 softmax / log_softmax over the last axis (topi/x86/softmax.py) vs numpy: lane-split row
reductions, one exp per element, rows in parallel; AVX2 and SSE targets too; the loop structure."""

import numpy as np
import pytest

import tessera
from tessera.target import Target
from tessera.tir.stmt_functor import collect
from tessera.topi import nn as topi_nn
from tessera.topi.testing import check_ops
from tessera.topi.x86.softmax import schedule_rows

RNG = np.random.default_rng(7)


def randn(*shape, dtype="float32", scale=3.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


SHAPES = [
    (12, 128, 128),  # attention scores
    (1, 1000),  # a classifier head: one row
    (5, 1003),  # a tail of n % 16 elements
    (3, 7),  # rows shorter than the lane split
    (2, 3, 16),  # exactly one split
    (4, 33),
    (1,),  # one element: no row loop
    (2, 1, 40),
    (2, 4099),  # a long row: several vector accumulators (Note [lane split]) and a tail
]


@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_matches_numpy_on_many_shapes(name):
    cases = [(name, [randn(*shape)], {}) for shape in SHAPES]
    cases.append((name, [randn(4, 40, scale=30.0)], {}))  # large logits: the max is subtracted
    cases.append((name, [randn(3, 19, dtype="float64")], {}))
    check_ops(cases, target="llvm", schedule_target="x86")


@pytest.mark.parametrize("mcpu", ["haswell", "x86-64"])
def test_narrower_vectors(mcpu):
    target = Target(f"llvm -mcpu={mcpu}")
    if not target.is_host and mcpu == "haswell" and "avx2" not in Target("llvm").features:
        pytest.skip("the host cannot run AVX2 code")
    cases = [(n, [randn(6, 37)], {}) for n in ("nn.softmax", "nn.log_softmax")]
    cases.append(("nn.softmax", [randn(2, 64, 128)], {}))
    check_ops(cases, target=target, schedule_target="x86")


def test_row_split_is_one_vector_for_short_rows_and_several_for_long_ones():
    from tessera.topi.nn.softmax import ROW_ACCUMULATORS, ROW_LANES, row_split

    most = ROW_ACCUMULATORS.value()
    assert row_split(1 << 15, "float32") == ROW_LANES * most  # no CPU target
    with Target("llvm -mcpu=haswell"):  # AVX2: 8 float32 lanes, 4 float64
        assert row_split(64, "float32") == 8
        assert row_split(512, "float32") == 16  # 2 vectors of 32 steps each
        assert row_split(1 << 15, "float32") == 8 * most
        assert row_split(1 << 15, "float64") == 4 * most
    with Target("llvm -mcpu=haswell"):  # the compute takes the rule: 32 lanes for 4099
        x = tessera.te.placeholder((2, 4099), name="x")
        partial = next(
            t for t in _stages(topi_nn.softmax(x)) if getattr(t.op, "tag", "") == "row_partial"
        )
        assert [int(d.value) for d in partial.shape] == [2, 32]


def _stages(t):
    seen, todo = [], [t]
    while todo:
        t = todo.pop()
        if all(t is not s for s in seen):
            seen.append(t)
            todo.extend(getattr(t.op, "input_tensors", []))
    return seen


def test_masked_rows():
    x = randn(4, 50)
    x[0, :20] = -np.inf  # a mask inside the lane split and its tail
    x[1, 48:] = -np.inf
    x[2, ::3] = -np.inf
    check_ops([("nn.softmax", [x], {}), ("nn.log_softmax", [x[1:]], {})], schedule_target="x86")


def test_other_axes_fall_back_to_the_generic_schedule():
    x = randn(2, 3, 5, 17)
    cases = [("nn.softmax", [x], {"axis": 1}), ("nn.log_softmax", [x], {"axis": 0})]
    check_ops(cases, target="llvm", schedule_target="x86")


def test_one_parallel_row_loop_with_vector_partials_and_one_exp_per_element():
    x = tessera.te.placeholder((24, 100), name="x")
    y = topi_nn.softmax(x)
    s = schedule_rows([y], Target("llvm -mcpu=haswell"))
    func = tessera.te.lower(s, [x, y])
    loops = collect(func.body, lambda n: isinstance(n, tessera.tir.For))
    assert [lp.kind.value for lp in loops].count("parallel") == 1
    allocs = collect(func.body, lambda n: isinstance(n, tessera.tir.Allocate))
    sizes = {
        a.buffer.name: (a.buffer.scope, [int(d.value) for d in a.buffer.shape]) for a in allocs
    }
    # per row, on the stack: the exp row once, the 16 partial lanes of each reduction
    scope, (one, row) = sizes["softmax_exp"]
    assert scope == "local" and one == 1 and 100 <= row < 108  # (rounded up to whole vectors)
    assert sizes["softmax_max_partial"] == ("local", [1, 16])
    assert sizes["softmax_sum_partial"] == ("local", [1, 16])
    text = str(tessera.driver.optimize(func))
    assert text.count("exp(") == 2  # the vector loop and its scalar tail: once per element
    assert "softmax_max_partial[Ramp(8, 1, 8)]" in text  # AVX2: 16 lanes, two vectors of 8


def test_generic_schedule_stays_correct_for_c():
    x = randn(3, 45)
    check_ops([("nn.softmax", [x], {}), ("nn.log_softmax", [x], {})], target="c")


# Note [short kept axes] (topi/nn/schedule.py): over a middle axis, the kept inner axes shorter
# than a vector are unrolled inside the reduce loop, longer ones run in vectors; the running
# (max, sum) of a row live on the stack
MIDDLE = [
    ((30, 7, 27, 3), 2),  # the sweep's case: 3 kept elements, 27 steps
    ((6, 15, 9, 3), 2),
    ((3, 36, 18, 4), 1),  # kept [18, 4]: 72 elements, over a vector
    ((2, 5, 1), 1),  # one kept element
    ((4, 11, 7), 1),  # an odd kept extent under a vector
    ((3, 9, 8), 1),  # exactly one vector
    ((2, 13, 30), 1),  # three vectors and a tail of 6
    ((5, 2, 2, 2), 1),  # two kept axes of 2: 4 elements unrolled
]


@pytest.mark.parametrize("name", ["nn.softmax", "nn.log_softmax"])
def test_middle_axes_match_numpy(name):
    cases = [(name, [randn(*shape)], {"axis": axis}) for shape, axis in MIDDLE]
    x = randn(4, 9, 3, scale=30.0)
    x[0, :, 0] = -np.inf  # a whole masked slice: NaN (numpy)
    x[1, 2, 1] = np.inf  # +inf: NaN for its slice
    x[2, ::2, 2] = -np.inf
    x[3, 4, 0] = np.nan
    cases.append((name, [x], {"axis": 1}))
    with np.errstate(invalid="ignore"):
        check_ops(cases, target="llvm", schedule_target="x86")


def test_short_kept_axes_are_unrolled_inside_the_reduce_loop_on_the_stack():
    x = tessera.te.placeholder((30, 7, 27, 3), name="x")
    y = topi_nn.softmax(x, axis=2)
    s = schedule_rows([y], Target("llvm -mcpu=haswell"))
    func = tessera.te.lower(s, [x, y])
    allocs = collect(func.body, lambda n: isinstance(n, tessera.tir.Allocate))
    sizes = {(a.buffer.scope, int(np.prod([int(d.value) for d in a.buffer.shape]))) for a in allocs}
    assert sizes == {("local", 3)}  # the max and the sum of the row's 3 kept elements
    loops = collect(func.body, lambda n: isinstance(n, tessera.tir.For))
    (k,) = [lp for lp in loops if lp.loop_var.name == "k"]
    inside = collect(k.body, lambda n: isinstance(n, tessera.tir.For))
    # the three kept elements unrolled inside k: three chains per step
    assert [(lp.kind.value, int(lp.extent.value)) for lp in inside] == [("unrolled", 3)]
    outer = [lp for lp in loops if collect(lp.body, lambda n: n is k) and lp.extent.value > 1]
    assert [lp.kind.value for lp in outer] == ["parallel"]  # only the row loop around k
