"""(Re)compute the output types of every call from the op type rules.

    before:  def main(%x: f32[8, 3]) { %1 = nn.relu(%x) : f32[2, 3]; return %1 }   (stale)
    after:   def main(%x: f32[8, 3]) { %1 = nn.relu(%x) : f32[8, 3]; return %1 }

Use it after changing the types of parameters (binding a batch size) or after a rewrite that
built calls by hand. A call whose types change gets new output values (same names); its users
are rewired. A type rule that rejects a call raises a TypeError naming the function, the call
and its input types.
"""

from __future__ import annotations

from tessera.graph.ir import Call, Function, Value
from tessera.transform.graph_pass import graph_pass, rebuild, remap_call


def _call_text(call: Call) -> str:
    outs = ", ".join(f"%{v.name}" for v in call.outputs)
    args = ", ".join(f"%{v.name}: {v.type}" for v in call.inputs)
    return f"{outs} = {call.op.name}({args})"


@graph_pass(opt_level=0)
def infer_types(func: Function) -> Function:
    mapping: dict[int, Value] = {}
    body = []
    for call in func.body:
        call = remap_call(call, mapping)
        try:
            types = call.op.infer_type([v.type for v in call.inputs], call.attrs)
        except (TypeError, ValueError, NotImplementedError) as e:
            raise TypeError(f"{func.name}: cannot type {_call_text(call)}: {e}") from None
        if len(types) != len(call.outputs):
            raise TypeError(
                f"{func.name}: {_call_text(call)} defines {len(call.outputs)} values, "
                f"its type rule gives {len(types)}"
            )
        if any(v.type != t for v, t in zip(call.outputs, types, strict=True)):
            outs = tuple(
                v if v.type == t else Value(v.name, t)
                for v, t in zip(call.outputs, types, strict=True)
            )
            mapping.update(
                (id(a), b) for a, b in zip(call.outputs, outs, strict=True) if a is not b
            )
            call = Call(call.op, call.inputs, call.attrs, outs, call.span)
        body.append(call)
    return rebuild(func, body, mapping)
