"""Remove calls whose results are never used, and constants nothing uses.

    before:  def main(%x: f32[4]) { %c = constant(1.0) : f32[]; %a = exp(%x); %b = nn.relu(%x);
             return %b }
    after:   def main(%x: f32[4]) { %b = nn.relu(%x); return %b }

Function parameters stay, used or not: they are the model's inputs. A call with side effects
stays. A call with several outputs stays when any of them is used.
"""

from __future__ import annotations

from tessera.graph.ir import Function
from tessera.transform.graph_pass import graph_pass, rebuild


@graph_pass(opt_level=1)  # as in TVM
def eliminate_dead_code(func: Function) -> Function:
    live, kept = {id(v) for v in func.outputs}, []
    for call in reversed(func.body):  # the body is in topological order
        if call.op.has_side_effects or any(id(v) in live for v in call.outputs):
            kept.append(call)
            live.update(id(v) for v in call.inputs)
    constants = [c for c in func.constants if id(c) in live]
    return rebuild(func, reversed(kept), {}, constants)
