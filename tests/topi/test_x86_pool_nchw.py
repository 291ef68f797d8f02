"""x86 schedules of the pools in NC[D]HW (topi/x86/ops.py): the windows over the padded copy,
computed first (Note [pool pad] in topi/x86/pooling.py), and the global pools as reductions
(Note [reduction vectors] in topi/x86/reduce.py), vs numpy on test_nn_pool's cases (pads,
ceil_mode overhangs, strides, dilations, 1-D/3-D, float64 and int32), odd widths and tails."""

import numpy as np
import pytest

import tessera
import tessera.topi.x86.ops  # noqa: F401  (registers the x86 schedules)
from tessera.graph.op import get_op
from tessera.target import Target
from tessera.topi.testing import check_ops, compute_op, op_schedule

from .test_nn_pool import cases_2d, cases_nd, data, global_cases, pool_case


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pools_match_reference(kind):
    cases = cases_2d(kind) + cases_nd(kind)
    cases.append(pool_case(kind, data(1, 3, 66, 66), (6, 6), (1, 1), (1, 1, 1, 1)))
    cases.append(pool_case(kind, data(1, 2, 69, 69), (4, 4), (2, 2), (0, 0, 0, 0), ceil_mode=1))
    check_ops(cases, schedule_target="x86")


def test_global_pools_match_reference():
    cases = global_cases() + [("nn.global_avg_pool2d", [data(1, 5, 33, 33)], {})]
    check_ops(cases, schedule_target="x86", rtol=1e-5, atol=1e-5)


def _stages(name, shape, attrs, target):
    args, outs = compute_op(name, [np.zeros(shape, "float32")], attrs)
    s = op_schedule(get_op(name), outs, Target(target), "x86")
    return str(tessera.lower(s, [*args, *outs], simple_mode=True))


def test_padded_copy_on_vector_targets_only():
    attrs = dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1))
    vector = _stages("nn.max_pool2d", (1, 2, 9, 9), attrs, "llvm -mcpu=haswell")
    assert "allocate max_pool_pad" in vector  # computed first, no bounds tests in the windows
    unpadded = dict(attrs, padding=(0, 0, 0, 0))
    assert "max_pool_pad" not in _stages("nn.max_pool2d", (1, 2, 9, 9), unpadded, "llvm")
