"""Re-pack the constant weights of int8 convs as their strategy's chosen kernel reads them.

    before:  %acc = qnn.conv2d(%xq, %w4, strides=[1, 1], ..., pad_value=0) : i32[1, 512, 7, 7]
             (%w4: a constant i32[512, 128, 3, 3], words of 4 input channels)
    after:   %acc = qnn.conv2d_packed(%xq, %w4_packed, strides=[1, 1], ..., channels=512)
             (%w4_packed: a constant i32[32, 128, 3, 3, 16], 16 output channels side by side)

Which kernel runs a qnn.conv2d is its strategy's answer (for CPUs, topi/x86/int8_strategy.py,
Note [int8 conv rule]): "rows" keeps the call as it is, "channels" wants the weight in blocks
of output channels; this pass asks, and re-packs the weight here, once, at compile time. It
runs after alter_layout, which has already moved the convs between blocked int8 activations
to qnn.conv2d_nchwc (Note [blocked int8 activations] in topi/qnn.py): what is left here reads
NCHW data. A
weight used by several calls is re-packed once. It needs the target (`with target:` as `build`
does, or `target=`); targets whose table row has no `layout_strategies` (the C target) keep
their convs as they are, except microcontrollers ("c -device=micro"), whose strategies
(topi/micro/strategy.py) re-pack int8 convs and dense layers for MVE; a plan's "constants"
(the MVE kernels' compensation) become more inputs of the call.
"""

from __future__ import annotations

from tessera.graph.ir import Call, Constant, Function
from tessera.graph.op import get_op
from tessera.target import Target
from tessera.topi import strategy
from tessera.transform.graph_pass import graph_pass, rebuild


@graph_pass(opt_level=1)
def pack_qnn_weights(func: Function, target: Target | str | None = None) -> Function:
    target = Target.current() if target is None else target
    target = Target(target) if isinstance(target, str) else target
    micro = target is not None and target.device == "micro"
    if target is None or not (target.kind_info.layout_strategies or micro):
        return func
    packed: dict[tuple, Constant] = {}  # (id(weight), op, shape) -> packed weight
    body, constants = [], list(func.constants)
    for call in func.body:
        is_conv = call.op.name == "qnn.conv2d" and len(call.inputs) == 2
        is_conv = is_conv or call.op.name == "qnn.dense"  # micro (MVE), arm (i8mm)
        plan = None
        if is_conv and isinstance(call.inputs[1], Constant) and call.inputs[0].type.is_static:
            plan = strategy.plan_layout(call, target)
        if plan is None:
            body.append(call)
            continue
        w = call.inputs[1]
        key = (id(w), plan["op"], plan["weight"].shape)
        if key not in packed:
            packed[key] = Constant.of(f"{w.name}_packed", plan["weight"])
            constants.append(packed[key])
            for k, array in enumerate(plan.get("constants", ())):
                packed[(*key, k)] = Constant.of(f"{w.name}_packed_{k}", array)
                constants.append(packed[(*key, k)])
        extra = tuple(packed[(*key, k)] for k in range(len(plan.get("constants", ()))))
        op = get_op(plan["op"])
        body.append(Call(op, (call.inputs[0], packed[key], *extra), plan["attrs"], call.outputs,
                         call.span))  # fmt: skip
    if not packed:
        return func
    used = {id(v) for c in body for v in c.inputs} | {id(v) for v in func.outputs}
    constants = [c for c in constants if id(c) in used]
    return rebuild(func, body, {}, constants)
