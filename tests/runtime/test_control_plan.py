"""The executor plan of a model with control flow: its sub-function plans and control calls are
checked when a library is loaded (one clear error for a malformed one), and a profile times a
control call as one call."""

import copy

import numpy as np
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.models_control import branch_on_input
from tessera.runtime import GraphModule
from tessera.runtime.plan_check import check_plan


@pytest.fixture(scope="module")
def lib():
    mod, params = from_onnx(branch_on_input())
    return tessera.build(mod, target="llvm", params=params)


def test_plan_has_functions_and_a_control_call(lib):
    plan = lib.plan
    (control,) = [c for c in plan["calls"] if "control" in c]
    assert control["control"] == "if" and len(control["functions"]) == 2
    assert len(plan["functions"]) == 2
    check_plan(plan, "model.so")


@pytest.mark.parametrize(
    "edit, what",
    [
        (lambda p, c: c.update(functions=[7, 1]), "functions"),
        (lambda p, c: c.update(control="while"), "control call"),
        (lambda p, c: c.pop("region"), "region"),
        (lambda p, c: p.update(functions="x"), "functions is not a list"),
    ],
)
def test_a_malformed_control_call_is_one_clear_error(lib, edit, what):
    plan = copy.deepcopy(lib.plan)
    edit(plan, next(c for c in plan["calls"] if "control" in c))
    with pytest.raises(ValueError, match=f"malformed.*{what}"):
        check_plan(plan, "model.so")


def test_profile_times_the_control_call_as_one_call(lib):
    m = GraphModule(lib["default"]())
    m.set_input(x=np.ones((2, 3), np.float32), flag=np.array(1.0, np.float32))
    rows = m.profile(repeat=2)
    assert len(rows) == m.num_calls
    assert any(r.kernel == "control.if" and r.seconds > 0 for r in rows)
