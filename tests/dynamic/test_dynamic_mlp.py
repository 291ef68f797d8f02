"""An MLP with a dynamic batch: compiled once, run at any batch, against ONNX Runtime; the
frontend's symbolic dims, the executor's binding, bounds and errors, export and load."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.frontend import from_onnx
from tessera.graph.dims import dim_bounds
from tessera.models_dynamic import mlp
from tessera.runtime import GraphModule, load_module

SIZES = (1, 3, 17, 2, 64)


def _x(n: int) -> np.ndarray:
    return np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)


def test_frontend_keeps_dynamic_dims():
    mod, _ = from_onnx(mlp())
    (x, *_), y = mod["main"].params, mod["main"].outputs[0]
    batch = x.type.shape[0]
    assert x.type.shape[1] == 64 and not x.type.is_static
    assert batch.name == "batch" and dim_bounds(batch) == (1, None)
    assert y.type.shape[0] is batch  # type inference carries the same var


def test_shape_dict_bounds_and_sizes():
    mod, _ = from_onnx(mlp(), {"x": (("batch", 2, 8), 64)})
    batch = mod["main"].params[0].type.shape[0]
    assert dim_bounds(batch) == (2, 8)
    mod, _ = from_onnx(mlp(), {"x": (4, 64)})  # a size still specializes
    assert mod["main"].params[0].type.shape == (4, 64)
    with pytest.raises(ValueError, match="bounds are"):
        from_onnx(mlp(), {"x": (("batch", 8, 2), 64)})


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_mlp_any_batch_matches_ort(target, ort_of):
    mod, params = from_onnx(mlp())
    lib = tessera.build(mod, target=target, params=params)
    m, ort = GraphModule(lib["default"]()), ort_of(mlp())
    for n in SIZES:
        ort.check(m, {"x": _x(n)})


def test_bounds_and_shape_errors_name_the_dim():
    mod, params = from_onnx(mlp(), {"x": (("batch", 1, 16), 64)})
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    with pytest.raises(ValueError, match=r"dim 0 \('batch'\) = 17 is out of its bounds \[1, 16\]"):
        m.set_input("x", _x(17))
    with pytest.raises(ValueError, match="dim 1 must be 64"):
        m.set_input("x", np.zeros((2, 65), np.float32))
    with pytest.raises(ValueError, match="expected a shape"):
        m.set_input("x", np.zeros((2, 64, 1), np.float32))
    assert m(_x(16))[0].shape == (16, 10)


def test_arena_grows_and_is_reused():
    mod, params = from_onnx(mlp())
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    m(_x(4))
    ex = m._ex
    small = ex.arena
    m(_x(2))  # fits: the same arena
    assert ex.arena is small
    m(_x(100))  # does not fit: grown
    assert ex.arena.nbytes > small.nbytes
    big = ex.arena
    y = m(_x(3))[0]
    assert ex.arena is big and y.shape == (3, 10)


def test_binding_stands_until_a_shape_changes(ort_of):
    """Note [per-call binding]: new values at the same shape keep the binding (the same
    entry arguments), a new shape binds again, and every run matches ORT."""
    mod, params = from_onnx(mlp())
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    ort = ort_of(mlp())
    ort.check(m, {"x": _x(4)})
    args = m._ex._entry_args
    ort.check(m, {"x": _x(4)[::-1].copy()})  # other values, same shape
    assert m._ex._entry_args is args
    m.get_input("x").copyfrom(_x(4) * 2)  # written in place: still bound
    m.run()
    assert m._ex._entry_args is args
    np.testing.assert_allclose(
        m.get_output(0).numpy(), ort.session.run(None, {"x": _x(4) * 2})[0], rtol=1e-4, atol=1e-4
    )
    for n in (7, 4, 1):  # a new shape each time: bound again
        ort.check(m, {"x": _x(n)})
        assert m._ex._entry_args is not args
        args = m._ex._entry_args


def test_python_loop_path_matches(ort_of):
    mod, params = from_onnx(mlp())
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    m.run(x=_x(5))
    m._ex.use_native = False  # the debugging path: a Python loop of kernel calls
    ort = ort_of(mlp())
    for n in (5, 9):
        ort.check(m, {"x": _x(n)})


def test_export_and_load_run_any_batch(tmp_path, ort_of):
    mod, params = from_onnx(mlp(), {"x": (("batch", 1, 64), 64)})
    path = tessera.build(mod, target="llvm", params=params).export_library(tmp_path / "mlp.so")
    lib = load_module(path)
    assert lib.plan["dynamic"]["dims"] == [{"name": "batch", "min": 1, "max": 64}]
    m, ort = GraphModule(lib["default"]()), ort_of(mlp())
    for n in SIZES:
        ort.check(m, {"x": _x(n)})


def test_c_entry_reads_the_arena_table_and_has_no_static_arena():
    from tessera.codegen.aot import emit_entry_c

    mod, params = from_onnx(mlp())
    plan = tessera.build(mod, target="c", params=params).plan
    source = emit_entry_c(plan)
    assert "((const int64_t*)arena)[0]" in source  # the batch, from the table
    assert "#error" in source.split("TESSERA_STATIC_ARENA", 1)[1]


def test_malformed_dynamic_plans_are_refused():
    from tessera.runtime.plan_check import check_plan

    mod, params = from_onnx(mlp())
    plan = tessera.build(mod, target="llvm", params=params).plan
    check_plan(plan, "m.so")
    bad = {**plan, "calls": [{**plan["calls"][0], "args": [["dyn", 99]]}]}
    with pytest.raises(ValueError, match="dyn slot"):
        check_plan(bad, "m.so")
    bad = {**plan, "dynamic": {**plan["dynamic"], "dims": [{"name": "batch", "min": 3, "max": 1}]}}
    with pytest.raises(ValueError, match="a dim"):
        check_plan(bad, "m.so")
    static = {k: v for k, v in plan.items() if k != "dynamic"}
    with pytest.raises(ValueError, match="no shape|dyn argument"):
        check_plan(static, "m.so")


def test_get_output_before_a_run_says_so():
    mod, params = from_onnx(mlp())
    m = GraphModule(tessera.build(mod, target="llvm", params=params)["default"]())
    with pytest.raises(ValueError, match="run the model first"):
        m.get_output(0)
    m.run(x=_x(2))
    assert m.get_output(0).shape == (2, 10)
    assert m.get_input_info()[0] == {"x": ("batch", 64)}
