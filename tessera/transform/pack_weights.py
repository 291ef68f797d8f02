"""Re-pack the constant weights of dense and matmul into the panels their CPU kernel streams.

    before:  %y = matmul(%x, %w) : f32[1, 128, 3072]           (%w: a constant f32[768, 3072])
    after:   %y = nn.dense_packed(%x, %w_packed, units=3072) : f32[1, 128, 3072]
             (%w_packed: a new constant f32[48, 768, 64], %w in panels of 64 columns)

The weight is packed here, once, at compile time, so the compiled model holds the packed weight
and the kernel never copies it. Whether and how to pack is the op's strategy's answer (for x86,
`topi/x86/strategy.py`: the "packed" implementation, whose config's nv sets the panel width
nr = nv * lanes, by default from the target's vector width and registers); this pass asks it.
Rewritten: float32 `nn.dense(x, w)` (w is units x in) and `matmul(a, b)` with a 2-D constant b
and a of any rank (numpy.matmul broadcasts b over a's leading axes: they are rows). A weight
used by several calls is packed once per panel width. The new call keeps the old call's span.
The pass needs the target (`with target:` around the graph passes, as `build` does, or
`target=`); for targets whose table row has no `layout_strategies`, or none, it changes nothing.
"""

from __future__ import annotations

from tessera.graph.dims import lowers_symbolic, representative_call
from tessera.graph.ir import Call, Constant, Function, Value
from tessera.graph.op import get_op
from tessera.target import Target
from tessera.topi import strategy
from tessera.transform.graph_pass import graph_pass, rebuild


def _packable(call: Call) -> tuple[Value, Constant, bool] | None:
    """(data, weight, transposed) when the call multiplies data by a constant 2-D weight."""
    if call.op.name not in ("nn.dense", "matmul") or len(call.inputs) != 2:
        return None
    x, w = call.inputs
    if not isinstance(w, Constant) or w.type.ndim != 2 or x.type.ndim < 1:
        return None
    if str(x.type.dtype) != "float32" or str(w.type.dtype) != "float32":
        return None
    return x, w, call.op.name == "nn.dense"


@graph_pass(opt_level=1)
def pack_weights(func: Function, target: Target | str | None = None) -> Function:
    """Rewrite dense/matmul with constant weights as their strategy's config wants (see the
    module docstring)."""
    target = Target.current() if target is None else target
    target = Target(target) if isinstance(target, str) else target
    if target is None or not target.kind_info.layout_strategies:
        return func  # the target's kernels do not take packed weights (its table row)
    packed: dict[tuple, Constant] = {}  # (id(weight), op, attrs) -> packed weight
    body, constants = [], list(func.constants)
    for call in func.body:
        # symbolic rows (graph/dims.py): the panels depend on the weight only
        asked = representative_call(call)
        plan = strategy.plan_layout(asked, target) if _packable(call) is not None else None
        if plan is None:
            body.append(call)
            continue
        w = call.inputs[1]
        attrs = dict(plan["attrs"])
        key = (id(w), plan["op"], plan["weight"].shape, call.op.name)
        if key not in packed:
            packed[key] = Constant.of(f"{w.name}_packed", plan["weight"])
            constants.append(packed[key])
        op = get_op(plan["op"])
        new = Call(op, (call.inputs[0], packed[key]), attrs, call.outputs, call.span)
        if asked is not call and not lowers_symbolic(new, target):
            body.append(call)  # its packed kernel does not take symbolic rows (yet)
            continue
        body.append(new)
    if not packed:
        return func
    used = {id(v) for c in body for v in c.inputs} | {id(v) for v in func.outputs}
    constants = [c for c in constants if id(c) in used]  # the unpacked weights, if now unused
    return rebuild(func, body, {}, constants)
