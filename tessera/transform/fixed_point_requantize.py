"""Requantize in fixed point where the target's strategy asks for it (micro targets).

    before:  %y = qnn.requantize(%acc, %scale, zero_point=-128, dtype="int8")   (%scale: constant)
    after:   %y = qnn.requantize_fixed(%acc, %mult, %shift, zero_point=-128, dtype="int8")
             (%mult, %shift: new int32 constants of %scale's shape)

The pass asks qnn.requantize's strategy for the target (`strategy.plan_layout`): the micro
strategy's default implementation "fixed" answers with the op and the scale as (multiplier,
shift) (Note [fixed-point requantize] in topi/micro/requantize.py). Targets without such a
strategy, and scales without an exact fixed-point form, keep the float requantize. The pass
needs the target (`with target:`, as `build` does, or `target=`).
"""

from __future__ import annotations

from tessera.graph.ir import Call, Constant, Function
from tessera.graph.op import get_op
from tessera.target import Target
from tessera.topi import strategy
from tessera.transform.graph_pass import graph_pass, rebuild


@graph_pass(opt_level=1)
def fixed_point_requantize(func: Function, target: Target | str | None = None) -> Function:
    """Rewrite qnn.requantize with a constant scale as its strategy's config wants."""
    target = Target.current() if target is None else target
    target = Target(target) if isinstance(target, str) else target
    if target is None or not any(c.op.name == "qnn.requantize" for c in func.body):
        return func
    body, constants = [], list(func.constants)
    for call in func.body:
        plan = None
        if call.op.name == "qnn.requantize" and isinstance(call.inputs[1], Constant):
            plan = strategy.plan_layout(call, target)
        if plan is None:
            body.append(call)
            continue
        name = call.inputs[1].name
        mult, shift = (
            Constant.of(f"{name}_{k}", a)
            for k, a in zip(("mult", "shift"), plan["weight"], strict=True)
        )
        constants += [mult, shift]
        inputs = (call.inputs[0], mult, shift)
        body.append(Call(get_op(plan["op"]), inputs, plan["attrs"], call.outputs, call.span))
    if len(constants) == len(func.constants):
        return func
    used = {id(v) for c in body for v in c.inputs} | {id(v) for v in func.outputs}
    return rebuild(func, body, {}, [c for c in constants if id(c) in used])
