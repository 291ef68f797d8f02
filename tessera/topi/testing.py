"""Check a graph op's compute and schedule rules against its numpy reference (the oracle).

    check_op("nn.conv2d", [x, w], dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1)))
    check_ops([("nn.relu", [x], {}), ("nn.softmax", [x], {"axis": 0})], target="c")

Each case becomes one kernel: te placeholders shaped like the numpy inputs, the op's compute rule,
its schedule rule for `schedule_target` (or the generic default for its kind), then `te.lower`.
All cases of one call are built as one module (one LLVM/C compile), run, and compared with
`op.evaluate`. The output types must also equal what the op's type rule says.
"""

from __future__ import annotations

import numpy as np

from tessera import te
from tessera.graph.ir import TensorType
from tessera.graph.op import OpKind, get_op
from tessera.ir.module import IRModule
from tessera.topi import generic

# default (rtol, atol) per output dtype; reductions over a few hundred terms stay well inside
_TOLERANCE = {"float16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-10, 1e-12)}


def op_schedule(op, outs, target, schedule_target: str = "generic") -> te.Schedule:
    """The op's schedule rule for schedule_target (falling back to "generic"), else the default
    for its kind: injective groups get schedule_injective, the rest schedule_reduce."""
    for key in (f"schedule:{schedule_target}", "schedule:generic"):
        if key in op.rules:
            return op.rules[key](list(outs), target)
    if op.kind <= OpKind.INJECTIVE:
        return generic.schedule_injective(list(outs), target)
    return generic.schedule_reduce(list(outs), target)


def compute_op(name: str, inputs, attrs=None):
    """(placeholders, outputs) of op `name` applied to placeholders shaped like `inputs`."""
    op = get_op(name)
    attrs = dict(attrs or {})
    if "compute" not in op.rules:
        raise NotImplementedError(f"op {name} has no compute rule")
    args = [
        te.placeholder(tuple(np.shape(x)), str(np.asarray(x).dtype), name=f"in{k}")
        for k, x in enumerate(inputs)
    ]
    outs = op.rules["compute"](*args, **attrs)
    outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
    expected = op.infer_type(
        [TensorType(np.shape(x), str(np.asarray(x).dtype)) for x in inputs], attrs
    )
    got = tuple(TensorType(tuple(int(d.value) for d in t.shape), t.dtype) for t in outs)
    if got != expected:
        shown = ", ".join(map(str, got))
        raise AssertionError(f"{name}: compute gives {shown}, type rule says {expected}")
    return args, outs


def build_cases(cases, target="llvm", schedule_target: str = "generic"):
    """Build one module holding a kernel `case<k>` per (name, inputs, attrs) case."""
    import tessera

    target = tessera.Target(target) if isinstance(target, str) else target
    funcs = {}
    for k, (name, inputs, attrs) in enumerate(cases):
        args, outs = compute_op(name, inputs, attrs)
        s = op_schedule(get_op(name), outs, target, schedule_target)
        funcs[f"case{k}"] = te.lower(s, [*args, *outs], name=f"case{k}")
    return tessera.build(IRModule(funcs), target=target), funcs


def check_ops(cases, target="llvm", rtol=None, atol=None, schedule_target="generic") -> None:
    """Build all cases in one module, run each, compare every output with the numpy reference."""
    mod, _ = build_cases(cases, target, schedule_target)
    for k, (name, inputs, attrs) in enumerate(cases):
        expected = get_op(name).evaluate(inputs, attrs or {})
        outs = [np.empty(e.shape, e.dtype) for e in expected]
        mod[f"case{k}"](*[np.array(x, order="C") for x in inputs], *outs)
        for e, o in zip(expected, outs, strict=True):
            r, a = _TOLERANCE.get(str(e.dtype), (0, 0))
            np.testing.assert_allclose(
                o,
                e,
                rtol=r if rtol is None else rtol,
                atol=a if atol is None else atol,
                err_msg=f"{name} {attrs} on {[np.shape(x) for x in inputs]} ({target})",
            )


def check_op(name: str, inputs, attrs=None, target="llvm", rtol=None, atol=None) -> None:
    """Build, run and compare one op call (see check_ops)."""
    check_ops([(name, inputs, attrs or {})], target, rtol, atol)


def loop_work(name: str, inputs, attrs=None, schedule_target: str = "generic") -> int:
    """How many times the innermost statements of op `name`'s lowered kernel run, counted from
    its loops' constant extents (both sides of a branch count): the work of the algorithm,
    which a test can bound (O(n log n), not O(n^2)) without timing anything."""
    from tessera import tir

    args, outs = compute_op(name, inputs, attrs)
    s = op_schedule(get_op(name), outs, None, schedule_target)
    func = te.lower(s, [*args, *outs], name="work")

    def work(stmt) -> int:
        if isinstance(stmt, tir.For):
            extent = getattr(stmt.extent, "value", None)
            if extent is None:
                raise ValueError(f"loop_work: loop {stmt.loop_var.name} has no constant extent")
            return int(extent) * work(stmt.body)
        if isinstance(stmt, tir.SeqStmt):
            return sum(work(c) for c in stmt.seq)
        if isinstance(stmt, tir.IfThenElse):
            return work(stmt.then_case) + (work(stmt.else_case) if stmt.else_case else 0)
        body = getattr(stmt, "body", None)
        return work(body) if body is not None else 1

    return work(func.body)
